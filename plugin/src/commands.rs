//! The API calls behind each command, on the caller's kubeconfig. Every request is bounded
//! by `--request-timeout`; waits (`status`, `-w`) are bounded by their own options or run
//! until interrupted.

mod diff;
mod lint;
mod overrides;
mod read;
mod region;

use super::approve::Reviewed;
use super::args::{Cli, Command, RegionCommand};
use super::hub::Hub;
use super::render;
use super::{CliError, EXIT_COMPLETE};
use configrollout_api::annotations::{ABORT_ANNOTATION, RETRY_ANNOTATION};
use diff::RegionAccess;
use lint::lint;

/// Runs one command; `Ok` carries the exit code.
pub(super) async fn run(cli: Cli) -> Result<u8, CliError> {
    // reqwest and kube share rustls; use ring, as the controller does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `lint` is offline: only the other commands load the kubeconfig.
    let hub = || Hub::connect(&cli.global);
    match cli.command {
        Command::Lint {
            file,
            schemas,
            from_hub,
        } => {
            let hub = if from_hub { Some(hub().await?) } else { None };
            lint(&file, &schemas, hub.as_ref()).await
        }
        Command::List {
            all_namespaces,
            watch,
        } => hub().await?.list(all_namespaces, watch).await,
        Command::Get {
            name,
            watch,
            output,
        } => hub().await?.get(&name, watch, output).await,
        Command::Status { name, timeout } => hub().await?.status(&name, timeout).await,
        Command::Approve {
            name,
            stage,
            reason,
            revision,
            digest,
        } => {
            let hub = hub().await?;
            match revision {
                Some(revision) => {
                    let reviewed = Reviewed { revision, digest };
                    hub.approve(&name, stage, reason, &reviewed, &mut print_line)
                        .await
                }
                None => {
                    hub.approve_asking(&name, stage, reason, &mut print_line)
                        .await
                }
            }
        }
        Command::Abort { name } => {
            hub()
                .await?
                .control(&name, ABORT_ANNOTATION, &mut print_line)
                .await
        }
        Command::Retry { name } => {
            hub()
                .await?
                .control(&name, RETRY_ANNOTATION, &mut print_line)
                .await
        }
        Command::Pause { name } => hub().await?.pause(&name, true, &mut print_line).await,
        Command::Resume { name } => hub().await?.pause(&name, false, &mut print_line).await,
        Command::Dashboard { port, address } => {
            let namespaced = cli.global.namespace.is_some();
            super::dashboard::run(hub().await?, namespaced, address, port).await
        }
        Command::Diff {
            name,
            from,
            to,
            show_values,
            region,
            region_kubeconfig,
            region_context,
        } => {
            let region = region
                .zip(region_kubeconfig)
                .map(|(region, kubeconfig)| RegionAccess {
                    region,
                    kubeconfig,
                    context: region_context,
                });
            hub()
                .await?
                .diff(&name, from, to, show_values, region)
                .await
        }
        Command::RepairState {
            name,
            force,
            region,
            region_kubeconfig,
            region_context,
            digest_key_secret,
        } => {
            hub()
                .await?
                .repair_state(
                    &name,
                    force,
                    &region,
                    &region_kubeconfig,
                    region_context,
                    &digest_key_secret,
                )
                .await
        }
        Command::RotateKey {
            force,
            digest_key_secret,
        } => hub().await?.rotate_key(&digest_key_secret, force).await,
        Command::Override {
            name,
            region,
            changes,
            reason,
            region_kubeconfig,
            region_context,
            digest_key_secret,
        } => {
            hub()
                .await?
                .override_keys(
                    &name,
                    &region,
                    changes,
                    reason,
                    &region_kubeconfig,
                    region_context,
                    &digest_key_secret,
                )
                .await
        }
        Command::Region {
            command: RegionCommand::Add(args),
        } => hub().await?.region_add(*args).await,
        Command::History { name } => {
            let rollout = hub().await?.rollout(&name).await?;
            print!("{}", render::render_history(&rollout));
            Ok(EXIT_COMPLETE)
        }
    }
}

fn print_line(line: String) {
    println!("{line}");
}

#[cfg(test)]
mod tests;
