//! Logging setup: tracing with text or JSON lines on stderr, one line per event. Events are named with an
//! `event` field (`request.invalid`, `upstream.error`, ...) as DESIGN.md "Status codes" lists them.

use crate::config::LogFormat;

/// Installs the global subscriber. `level` is a tracing filter directive (validated by the config).
pub fn init(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
