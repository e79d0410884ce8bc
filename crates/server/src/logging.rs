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
    // Civil date from days since 1970-01-01 (the proleptic Gregorian
    // calendar, counted in 400-year eras from 0000-03-01).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
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

    /// Every day of four centuries: the date after each midnight is the
    /// day after the one before it.
    #[test]
    fn consecutive_days_follow_the_calendar() {
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let (mut y, mut m, mut d) = (1970i64, 1i64, 1i64);
        for day in 0..146_097i64 {
            let expected = format!("{y:04}-{m:02}-{d:02}T00:00:00.000Z");
            assert_eq!(utc_timestamp(day * 86_400_000), expected);
            let month_days = match m {
                2 if leap(y) => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            d += 1;
            if d > month_days {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }
}
