//! `strftime_now(format)` for chat templates (Llama 3.1 prints today's date into the system
//! prompt). UTC, with the directives templates use; an unknown directive is kept verbatim, as
//! C's strftime leaves it.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A UTC calendar time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32, // 1..=12
    pub day: u32,   // 1..=31
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub weekday: u32, // 0 = Monday
    pub yday: u32,    // 1..=366
}

impl Civil {
    /// From seconds since the Unix epoch (Howard Hinnant's days-to-civil algorithm).
    pub fn from_unix(secs: i64) -> Civil {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = CUM[month as usize - 1] + day + u32::from(leap && month > 2);
        Civil {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
            weekday: (days + 3).rem_euclid(7) as u32, // 1970-01-01 was a Thursday
            yday,
        }
    }

    pub fn now() -> Civil {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Civil::from_unix(secs)
    }

    pub fn format(&self, fmt: &str) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let month = MONTHS[self.month as usize - 1];
            let weekday = WEEKDAYS[self.weekday as usize];
            let hour12 = if self.hour.is_multiple_of(12) {
                12
            } else {
                self.hour % 12
            };
            match chars.next() {
                Some('Y') => out.push_str(&self.year.to_string()),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('m') => out.push_str(&format!("{:02}", self.month)),
                Some('d') => out.push_str(&format!("{:02}", self.day)),
                Some('e') => out.push_str(&format!("{:2}", self.day)),
                Some('B') => out.push_str(month),
                Some('b') | Some('h') => out.push_str(&month[..3]),
                Some('A') => out.push_str(weekday),
                Some('a') => out.push_str(&weekday[..3]),
                Some('H') => out.push_str(&format!("{:02}", self.hour)),
                Some('I') => out.push_str(&format!("{hour12:02}")),
                Some('M') => out.push_str(&format!("{:02}", self.minute)),
                Some('S') => out.push_str(&format!("{:02}", self.second)),
                Some('p') => out.push_str(if self.hour < 12 { "AM" } else { "PM" }),
                Some('j') => out.push_str(&format!("{:03}", self.yday)),
                Some('Z') => out.push_str("UTC"),
                Some('z') => out.push_str("+0000"),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates_format_like_python() {
        // 2024-07-26 13:05:09 UTC was a Friday, day 208 of a leap year.
        let t = Civil::from_unix(1_721_999_109);
        assert_eq!(t.format("%d %b %Y"), "26 Jul 2024");
        assert_eq!(t.format("%Y-%m-%d %H:%M:%S"), "2024-07-26 13:05:09");
        assert_eq!(
            t.format("%B %d, %Y (%A, %a, day %j, %I %p) 100%%"),
            "July 26, 2024 (Friday, Fri, day 208, 01 PM) 100%"
        );
        assert_eq!(
            Civil::from_unix(0).format("%Y-%m-%d %A"),
            "1970-01-01 Thursday"
        );
        assert_eq!(
            Civil::from_unix(951_782_400).format("%Y-%m-%d %j"),
            "2000-02-29 060"
        );
        assert_eq!(Civil::from_unix(-86_400).format("%Y-%m-%d"), "1969-12-31");
    }
}
