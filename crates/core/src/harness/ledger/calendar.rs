//! UTC calendar arithmetic for budget periods: a day (`2026-12-06`) or a
//! month (`2026-12`) from Unix time, and the instant the next one starts.
//! Plain integer arithmetic on the proleptic Gregorian calendar; it must
//! not read the clock (callers pass the time in).

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day counted from 1970-01-01
/// (proleptic Gregorian; Howard Hinnant's `civil_from_days`): also the
/// local lane's `strftime_now` for chat templates.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `YYYY-MM-DD` of a Unix time in seconds (UTC).
pub(crate) fn day_key(unix_s: i64) -> String {
    let (y, m, d) = civil_from_days(unix_s.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM` of a Unix time in seconds (UTC).
pub(crate) fn month_key(unix_s: i64) -> String {
    let (y, m, _) = civil_from_days(unix_s.div_euclid(86_400));
    format!("{y:04}-{m:02}")
}

/// The Unix time (s) of the next UTC midnight after `unix_s`.
pub(crate) fn next_day(unix_s: i64) -> i64 {
    (unix_s.div_euclid(86_400) + 1) * 86_400
}

/// The Unix time (s) of the first instant of the month after `unix_s`'s.
pub(crate) fn next_month(unix_s: i64) -> i64 {
    let (y, m, _) = civil_from_days(unix_s.div_euclid(86_400));
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    days_from_civil(y, m, 1) * 86_400
}

/// RFC 3339 (UTC, whole seconds) of a Unix time in seconds.
pub(crate) fn rfc3339(unix_s: i64) -> String {
    let (y, m, d) = civil_from_days(unix_s.div_euclid(86_400));
    let s = unix_s.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Now, as Unix milliseconds.
pub(crate) fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_renewals_follow_the_utc_calendar() {
        // 2026-12-06T19:22:48Z
        let t = 1_796_584_968;
        assert_eq!(day_key(t), "2026-12-06");
        assert_eq!(month_key(t), "2026-12");
        assert_eq!(rfc3339(next_day(t)), "2026-12-07T00:00:00Z");
        assert_eq!(rfc3339(next_month(t)), "2027-01-01T00:00:00Z");
        // A leap day and the month after it.
        let leap = days_from_civil(2028, 2, 29) * 86_400 + 5;
        assert_eq!(day_key(leap), "2028-02-29");
        assert_eq!(rfc3339(next_month(leap)), "2028-03-01T00:00:00Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        for z in [-800_000, -1, 0, 1, 59, 365, 20_000, 1_000_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }
}
