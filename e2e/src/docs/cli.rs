//! `docs/reference/controller-flags.md` and `docs/reference/plugin.md`: the command lines,
//! from the clap `Command`s the binaries parse with (`configrollout::app::Options`,
//! `configrollout_plugin::Cli`), so the page says what `--help` says.

use std::fmt::Write as _;

use clap::{Arg, Command, CommandFactory};

use super::{Page, cell, generated_header};

/// The controller's flags.
pub fn controller_page() -> Page {
    let mut command = configrollout::app::Options::command();
    let mut out = generated_header("Controller flags");
    out.push_str(
        "`configrollout-controller`'s command line, from the clap command it parses \
         (`controller/src/app/options.rs`). Each flag is also read from the environment \
         variable shown (a flag given wins); every flag but `--identity`, `--lease-name` and \
         `--probe-addr` is a value of the Helm chart ([chart values](chart-values.md)).\n\n",
    );
    describe(&mut command, &mut out, None);
    Page {
        path: "controller-flags.md".to_owned(),
        content: trim_end(out),
    }
}

/// The kubectl plugin's commands.
pub fn plugin_page() -> Page {
    let mut command = configrollout_plugin::Cli::command();
    let mut out = generated_header("kubectl configrollout");
    out.push_str(
        "The kubectl plugin's commands, from the clap command it parses \
         (`plugin/src/args.rs`). The global flags go before or after the command.\n\n",
    );
    describe(&mut command, &mut out, None);
    let mut subcommands: Vec<Command> = command.get_subcommands().cloned().collect();
    for subcommand in &mut subcommands {
        if subcommand.is_hide_set() {
            continue;
        }
        let _ = writeln!(out, "## `{}`\n", subcommand.get_name());
        describe(subcommand, &mut out, Some("kubectl configrollout"));
    }
    Page {
        path: "plugin.md".to_owned(),
        content: trim_end(out),
    }
}

fn trim_end(mut text: String) -> String {
    while text.ends_with("\n\n") {
        text.pop();
    }
    text
}

/// The command's about, usage and arguments; for a subcommand (`parent` names the
/// command it belongs to), without the global arguments the parent already lists.
fn describe(command: &mut Command, out: &mut String, parent: Option<&str>) {
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    let usage = command.render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let usage = match parent {
        Some(parent) if !usage.starts_with(parent) => format!("{parent} {usage}"),
        _ => usage.to_owned(),
    };
    let _ = writeln!(out, "```\n{usage}\n```\n");
    let arguments: Vec<&Arg> = command
        .get_arguments()
        .filter(|argument| !argument.is_hide_set())
        .filter(|argument| parent.is_none() || !argument.is_global_set())
        .filter(|argument| !matches!(argument.get_id().as_str(), "help" | "version"))
        .collect();
    if !arguments.is_empty() {
        out.push_str("| argument | environment | default | description |\n|---|---|---|---|\n");
        for argument in arguments {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                name(argument),
                argument
                    .get_env()
                    .map(|env| format!("`{}`", env.to_string_lossy()))
                    .unwrap_or_default(),
                default(argument),
                cell(&help(argument))
            );
        }
        out.push('\n');
    }
    if let Some(after) = command.get_after_long_help().or(command.get_after_help()) {
        let _ = writeln!(out, "{}\n", cell(after.to_string().trim()));
    }
}

fn name(argument: &Arg) -> String {
    let value = argument
        .get_value_names()
        .and_then(|names| names.first())
        .map(|name| name.to_string());
    let takes_value = argument.get_action().takes_values();
    let mut spelled = match (argument.get_short(), argument.get_long()) {
        (Some(short), Some(long)) => format!("`-{short}`, `--{long}"),
        (None, Some(long)) => format!("`--{long}"),
        (Some(short), None) => format!("`-{short}"),
        (None, None) => {
            return format!(
                "`{}`",
                value.unwrap_or_else(|| argument.get_id().as_str().to_uppercase())
            );
        }
    };
    if takes_value && let Some(value) = value {
        let _ = write!(spelled, " {value}");
    }
    spelled.push('`');
    spelled
}

fn default(argument: &Arg) -> String {
    if argument.is_hide_default_value_set() || !argument.get_action().takes_values() {
        return String::new();
    }
    let defaults: Vec<String> = argument
        .get_default_values()
        .iter()
        .map(|value| format!("`{}`", value.to_string_lossy()))
        .collect();
    defaults.join(", ")
}

fn help(argument: &Arg) -> String {
    let mut text = argument
        .get_long_help()
        .or(argument.get_help())
        .map(|help| help.to_string())
        .unwrap_or_default();
    let values: Vec<String> = argument
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| format!("`{}`", value.get_name()))
        .collect();
    if !values.is_empty() && argument.get_action().takes_values() {
        let _ = write!(text, " (one of {})", values.join(", "));
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
