//! Structured logs through `tracing`: human-readable text, or one JSON object per line for
//! log pipelines.

use std::str::FromStr;

use tracing_subscriber::EnvFilter;

use super::TelemetryError;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, event fields at the top level.
    Json,
}

impl FromStr for LogFormat {
    type Err = TelemetryError;

    fn from_str(format: &str) -> Result<Self, Self::Err> {
        match format.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(TelemetryError::UnknownLogFormat(format.to_owned())),
        }
    }
}

/// The filter in effect: `RUST_LOG` when set and not empty, else `default_filter`
/// (`tracing_subscriber::EnvFilter` syntax, e.g. `info,kube=warn`).
pub fn filter(default_filter: &str) -> Result<EnvFilter, TelemetryError> {
    let from_env = std::env::var(EnvFilter::DEFAULT_ENV).ok();
    parse_filter(directives(from_env.as_deref(), default_filter))
}

fn directives<'a>(from_env: Option<&'a str>, default_filter: &'a str) -> &'a str {
    from_env
        .filter(|directives| !directives.trim().is_empty())
        .unwrap_or(default_filter)
}

fn parse_filter(directives: &str) -> Result<EnvFilter, TelemetryError> {
    EnvFilter::try_new(directives).map_err(|error| TelemetryError::LogFilter(error.to_string()))
}

/// Installs the global subscriber, writing to stdout. Call once, at start-up.
pub fn init(format: LogFormat, default_filter: &str) -> Result<(), TelemetryError> {
    let filter = filter(default_filter)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    installed.map_err(|_| TelemetryError::LoggingAlreadyInitialised)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_case_insensitively_and_unknown_ones_are_refused() {
        assert_eq!("json".parse::<LogFormat>().unwrap(), LogFormat::Json);
        assert_eq!("Text".parse::<LogFormat>().unwrap(), LogFormat::Text);
        assert!(matches!(
            "yaml".parse::<LogFormat>(),
            Err(TelemetryError::UnknownLogFormat(_))
        ));
    }

    #[test]
    fn rust_log_wins_over_the_default_unless_empty() {
        assert_eq!(directives(Some("debug"), "info"), "debug");
        assert_eq!(directives(Some("  "), "info"), "info");
        assert_eq!(directives(None, "info"), "info");
    }

    #[test]
    fn filters_are_validated() {
        assert!(parse_filter("info,kube=warn,configrollout=debug").is_ok());
        assert!(matches!(
            parse_filter("info,kube=loud"),
            Err(TelemetryError::LogFilter(_))
        ));
    }
}
