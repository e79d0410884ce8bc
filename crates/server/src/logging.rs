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
            "ts={} level={} target={} msg=\"{}\"\n",
            utc_timestamp(ts_ms),
            record.level(),
            record.target(),
            msg
        );
        // A failed write to stderr has nowhere better to go.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// `ms` since the Unix epoch as RFC 3339 UTC with milliseconds
/// (`2026-11-27T01:49:00.123Z`), which people and log shippers read alike.
fn utc_timestamp(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = stoa_proto::time::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000
    )
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

#[cfg(test)]
mod tests {
    use super::utc_timestamp;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc_timestamp(1_795_743_000_123), "2026-11-27T01:30:00.123Z");
        assert_eq!(utc_timestamp(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(utc_timestamp(-1), "1969-12-31T23:59:59.999Z");
    }
}
