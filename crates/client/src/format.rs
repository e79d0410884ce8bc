//! Text as zkCli prints it: stats (`StatPrinter`), dates (`java.util.Date`
//! in UTC), ACL entries (jute's CSV form of `Id`) and child lists.

use std::fmt::Write;

use stoa_proto::records::{Acl, Stat};
use stoa_proto::time::civil_from_days;

use crate::acl::perms_to_string;

const MS_PER_SECOND: i64 = 1000;
const SECONDS_PER_DAY: i64 = 86_400;
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A stat exactly as zkCli's `StatPrinter` prints it, one field a line.
pub fn format_stat(stat: &Stat) -> String {
    format!(
        "cZxid = 0x{:x}\nctime = {}\nmZxid = 0x{:x}\nmtime = {}\npZxid = 0x{:x}\n\
         cversion = {}\ndataVersion = {}\naclVersion = {}\nephemeralOwner = 0x{:x}\n\
         dataLength = {}\nnumChildren = {}\n",
        stat.czxid,
        format_date(stat.ctime),
        stat.mzxid,
        format_date(stat.mtime),
        stat.pzxid,
        stat.cversion,
        stat.version,
        stat.aversion,
        stat.ephemeral_owner,
        stat.data_length,
        stat.num_children,
    )
}

/// Milliseconds since the epoch as `java.util.Date.toString()` prints them
/// in the UTC zone: `Thu Jan 01 00:00:00 UTC 1970`.
pub fn format_date(epoch_ms: i64) -> String {
    let seconds = epoch_ms.div_euclid(MS_PER_SECOND);
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let second_of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    // Day 0 (1970-01-01) was a Thursday.
    let weekday = WEEKDAYS[usize::try_from(days.rem_euclid(7)).unwrap_or(0)];
    let month_name = MONTHS[usize::try_from(month - 1).unwrap_or(0)];
    format!(
        "{weekday} {month_name} {day:02} {:02}:{:02}:{:02} UTC {year}",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

/// One ACL entry as zkCli's `getAcl` prints it: the `Id` record in jute's
/// CSV form, then `: ` and the permission letters:
/// `'world,'anyone\n: cdrwa`.
pub fn format_acl_entry(acl: &Acl) -> String {
    format!(
        "'{},'{}\n: {}",
        csv_escape(&acl.id.scheme),
        csv_escape(&acl.id.id),
        perms_to_string(acl.perms)
    )
}

/// jute's `Utils.toCSVString` escaping.
fn csv_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\0' | '\n' | '\r' | ',' | '}' | '%' => {
                // Writing to a String cannot fail.
                let _ = write!(out, "%{:02X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// A list as Java's `List.toString()`: `[a, b, c]`.
pub fn format_list(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_proto::records::Id;

    #[test]
    fn dates_print_like_java_in_utc() {
        assert_eq!(format_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(
            format_date(1_700_000_000_123),
            "Tue Nov 14 22:13:20 UTC 2023"
        );
        assert_eq!(format_date(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
        assert_eq!(format_date(-1000), "Wed Dec 31 23:59:59 UTC 1969");
    }

    #[test]
    fn stats_print_like_stat_printer() {
        let stat = Stat {
            czxid: 0x1a,
            mzxid: 0x1b,
            ctime: 0,
            mtime: 1000,
            version: 2,
            cversion: 3,
            aversion: 4,
            ephemeral_owner: 0x100,
            data_length: 5,
            num_children: 6,
            pzxid: 0x1c,
        };
        assert_eq!(
            format_stat(&stat),
            "cZxid = 0x1a\nctime = Thu Jan 01 00:00:00 UTC 1970\nmZxid = 0x1b\n\
             mtime = Thu Jan 01 00:00:01 UTC 1970\npZxid = 0x1c\ncversion = 3\n\
             dataVersion = 2\naclVersion = 4\nephemeralOwner = 0x100\ndataLength = 5\n\
             numChildren = 6\n"
        );
        let negative = Stat {
            ephemeral_owner: -1,
            ..Stat::default()
        };
        assert!(format_stat(&negative).contains("ephemeralOwner = 0xffffffffffffffff\n"));
    }

    #[test]
    fn acl_entries_print_in_jute_csv_form() {
        assert_eq!(
            format_acl_entry(&Acl::open_unsafe()),
            "'world,'anyone\n: cdrwa"
        );
        let acl = Acl {
            perms: 1,
            id: Id {
                scheme: "digest".into(),
                id: "u:a,b%".into(),
            },
        };
        assert_eq!(format_acl_entry(&acl), "'digest,'u:a%2Cb%25\n: r");
        assert_eq!(format_list(&["a".into(), "b".into()]), "[a, b]");
        assert_eq!(format_list(&[]), "[]");
    }
}
