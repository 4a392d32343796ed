//! Durations as the command line and the environment give them: plain seconds, as flock(1) takes
//! them (`120`, `0.5`, `.007`, `1e3`, `+5`), or humantime's units (`500ms`, `1.5s`, `5m`,
//! `1h 30m`); each option refuses, naming its limit, what it cannot use (negative, not a number,
//! too long).

use std::time::Duration;

/// The longest `--wait`, `--kill-after` and `--connect-timeout`: one year (humantime's `1y`, 365.25
/// days). Far longer than any wait a job means, and far below what the deadlines made of it can
/// hold (an `Instant` plus 2^64 seconds panics; tokio's timers reach about two years). To wait
/// without limit, leave `--wait` out.
pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600);
const MAX_DURATION_TEXT: &str = "1 year";

/// The longest `--ttl` any backend is asked for: a year, as the other durations. A backend that
/// cannot keep a lease that long says so in its descriptor (`max_ttl`, backend/registry.rs: 24 days
/// on ZooKeeper), checked once the backend is known (`resolve`). Redis counts leases in
/// milliseconds, in the scripts' doubles, PostgreSQL and MySQL in 64-bit milliseconds, etcd in
/// 64-bit seconds: all exact far beyond it. A lease this long already keeps a lock from others for
/// a year after its holder died; dlock renews every ttl/3, so no run needs a longer one.
pub const MAX_TTL: Duration = MAX_DURATION;
const MIN_TTL: Duration = Duration::from_millis(100);
/// The shortest `--connect-timeout`: a budget below it would fail against any server but the
/// nearest, and 0 would read as "no limit" to some clients and "fail at once" to others.
pub const MIN_CONNECT_TIMEOUT: Duration = Duration::from_millis(100);

/// What a duration option's value parser refuses, in words clap puts after "invalid value ...".
const FORMS: &str = "use seconds, as in 120 or 0.5, or a unit: 500ms, 30s, 5m";

/// `--wait`, `--kill-after`, `--connect-timeout`: zero to a year.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match read(text)? {
        Some(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!("too long: at most {MAX_DURATION_TEXT}")),
    }
}

/// `--connect-timeout`: 100ms to a year.
pub fn parse_connect_timeout(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d < MIN_CONNECT_TIMEOUT => Err(format!(
            "the connect timeout must be at least {}",
            crate::text::duration(MIN_CONNECT_TIMEOUT)
        )),
        d => Ok(d),
    }
}

/// `--ttl`: 100ms to a year (the backend's own limit is checked once it is known).
pub fn parse_ttl(text: &str) -> Result<Duration, String> {
    match read(text)? {
        Some(ttl) if ttl < MIN_TTL => Err("the ttl must be at least 100ms".into()),
        Some(ttl) if ttl <= MAX_TTL => Ok(ttl),
        _ => Err(format!("the ttl must be at most {MAX_DURATION_TEXT}")),
    }
}

/// The duration `text` says; `None` when it is well formed but more than a `Duration` holds; or
/// why it is not a duration.
fn read(text: &str) -> Result<Option<Duration>, String> {
    if let Some(magnitude) = text.strip_prefix('-') {
        // `-n` is not a negative duration but an option where the value was missing (`-w -n`).
        let negative = !magnitude.starts_with('-') && read(magnitude).is_ok();
        return Err(if negative {
            "a duration cannot be negative".into()
        } else {
            format!("not a duration ({FORMS})")
        });
    }
    let word = text.trim().trim_start_matches('+').to_ascii_lowercase();
    if ["nan", "inf", "infinity"].contains(&word.as_str()) {
        return Err(format!("not a number ({FORMS})"));
    }
    // flock(1) reads its number with strtod(3): `+5` and `1e3` are seconds there too.
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    if let Some(seconds) = plain_seconds(unsigned).or_else(|| exponent_seconds(unsigned)) {
        return Ok(seconds);
    }
    // humantime reads `M` as months: `-w 5M` is almost always five minutes mistyped.
    let mut units = text.split(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace());
    if units.any(|unit| unit == "M") {
        return Err(format!(
            "M is months: write {} for minutes (or `months` in full)",
            text.replace('M', "m")
        ));
    }
    match humantime::parse_duration(text) {
        Ok(d) => Ok(Some(d)),
        // humantime says this of a number too large and of a fraction finer than a nanosecond
        // (0.3333333333s); the first is the likely one.
        Err(humantime::DurationError::NumberOverflow) if !text.contains('.') => Ok(None),
        Err(e) => Err(format!("{e} ({FORMS})")),
    }
}

/// Whether `text` is plain seconds as flock(1) reads them (`120`, `0.5`, `.007`, `5.`: digits and
/// at most one `.`), and if so how long that is, to the nanosecond (further digits are dropped);
/// `Some(None)` when more seconds than a `Duration` holds.
fn plain_seconds(text: &str) -> Option<Option<Duration>> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let secs = match whole {
        "" => 0,
        _ => match whole.parse::<u64>() {
            Ok(secs) => secs,
            Err(_) => return Some(None),
        },
    };
    let nanos = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
    Some(Some(Duration::new(secs, nanos)))
}

/// Whether `text` is seconds with a decimal exponent (`1e3`, `2.5E-1`), as flock(1)'s strtod(3)
/// reads them, and if so how long that is; `Some(None)` when more than a `Duration` holds.
fn exponent_seconds(text: &str) -> Option<Option<Duration>> {
    let (mantissa, exponent) = text.split_once(['e', 'E'])?;
    plain_seconds(mantissa)?;
    let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: f64 = text.parse().ok()?;
    Some(Duration::try_from_secs_f64(seconds).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_and_a_plus_read_as_flock_reads_them() {
        for (text, want) in [
            ("1e3", Duration::from_secs(1000)),
            ("1E3", Duration::from_secs(1000)),
            ("2.5e-1", Duration::from_millis(250)),
            (".5e+1", Duration::from_secs(5)),
            ("+5", Duration::from_secs(5)),
            ("+.5", Duration::from_millis(500)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for text in ["1e", "e3", "1e+", "1e3.5", "1ee3", "++5", "1e3s"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
        assert!(parse_duration("1e8").unwrap_err().contains("too long"));
        assert!(parse_duration("1e999").unwrap_err().contains("too long"));
    }

    #[test]
    fn plain_seconds_read_as_flock_reads_them() {
        for (text, want) in [
            ("120", Duration::from_secs(120)),
            ("0", Duration::ZERO),
            ("0.5", Duration::from_millis(500)),
            (".007", Duration::from_millis(7)),
            ("5.", Duration::from_secs(5)),
            ("1.0000000019", Duration::new(1, 1)),
            ("1.5s", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
            ("1y", MAX_DURATION),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn out_of_range_durations_name_the_limit() {
        for (text, needle) in [
            ("-1", "negative"),
            ("-0.5s", "negative"),
            ("-n", "not a duration"),
            ("--5", "not a duration"),
            ("nan", "not a number"),
            ("inf", "not a number"),
            ("", "empty"),
            (".", "expected number"),
            ("1e3x", "unknown time unit"),
            ("31557601", "at most 1 year"),
            ("2y", "at most 1 year"),
            ("18446744073709551616", "at most 1 year"),
            ("584942417355y", "at most 1 year"),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        // A backend's own limit (ZooKeeper's 24 days) is its descriptor's, checked later.
        assert_eq!(parse_ttl("25d"), Ok(Duration::from_secs(25 * 86_400)));
        assert!(parse_ttl("366d").unwrap_err().contains("at most 1 year"));
        assert!(parse_ttl("0.05").unwrap_err().contains("at least 100ms"));
        assert_eq!(parse_ttl("30"), Ok(Duration::from_secs(30)));
        for zero in ["0", "0s", "0.05", "99ms"] {
            let err = parse_connect_timeout(zero).unwrap_err();
            assert!(err.contains("at least 100ms"), "{zero}: {err}");
        }
        assert_eq!(parse_connect_timeout("0.1"), Ok(MIN_CONNECT_TIMEOUT));
    }

    proptest::proptest! {
        /// Durations from the command line: parsed or refused, never a panic, never past a limit.
        #[test]
        fn any_duration_text_parses_or_is_refused(
            text in "\\PC{0,30}|[0-9]{1,25}(ns|us|ms|s|m|h|d|y)?|[0-9]{0,25}\\.[0-9]{0,25}"
        ) {
            if let Ok(d) = parse_duration(&text) {
                proptest::prop_assert!(d <= MAX_DURATION);
            }
            if let Ok(ttl) = parse_ttl(&text) {
                proptest::prop_assert!(ttl <= MAX_TTL);
                // What the backends make of it stays in range: 64-bit milliseconds (ZooKeeper's
                // 32-bit ones are its descriptor's limit).
                proptest::prop_assert!(i64::try_from(ttl.as_millis()).is_ok());
            }
        }
    }
}
