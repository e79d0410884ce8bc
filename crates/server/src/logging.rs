//! Structured logs on stderr in logfmt (`ts=… level=… target=… msg="…"`),
//! one line per event, so operators can grep and ship them as they are.

use std::io::Write;

struct LogfmtLogger {
    max_level: log::LevelFilter,
}

impl log::Log for LogfmtLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= self.max_level
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let ts_ms = crate::partition::wall_clock_ms();
        let msg = record
            .args()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        let line = format!(
            "ts={}.{:03} level={} target={} msg=\"{}\"\n",
            ts_ms / 1000,
            ts_ms % 1000,
            record.level(),
            record.target(),
            msg
        );
        // A failed write to stderr has nowhere better to go.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger; the level comes from `STOA_LOG` (error, warn, info,
/// debug, trace), default info.
pub fn init() {
    let max_level = std::env::var("STOA_LOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(log::LevelFilter::Info);
    if log::set_boxed_logger(Box::new(LogfmtLogger { max_level })).is_ok() {
        log::set_max_level(max_level);
    }
}
