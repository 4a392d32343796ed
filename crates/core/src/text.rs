//! How values are spelled where they must stay readable and map back: `%XX` escapes for lock names
//! inside file names, Redis keys and znodes, lower-case hex for digests and ids, and durations
//! rounded for people. Each backend decides which characters to escape; the spelling is shared.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// `text` with each character `escape(index, c)` picks written as `%XX` (upper-case hex) per
/// UTF-8 byte. The caller escapes `%` itself, so that `percent_decode` gives `text` back.
pub fn percent_encode(text: &str, escape: impl Fn(usize, char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if escape(i, c) {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The text `%XX` escapes spell; `None` for a `%` without two hex digits after it or bytes that
/// are not UTF-8. What it reads may come from other clients, so a caller that needs the mapping
/// to be one-to-one checks that encoding the result gives the input back.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (high, low) = (bytes.get(i + 1)?, bytes.get(i + 2)?);
            out.push(hex_digit(*high)? << 4 | hex_digit(*low)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// `bytes` as lower-case hex, two digits each.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A duration as people write it, to the precision a message needs: `250ms`, `3.7s`, `42s`,
/// `2m 5s`, `1h 30m`, `24d` (humantime shows every unit down to the nanosecond: `3s 700ms 149us 160ns`).
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let secs = d.as_secs();
    match secs {
        0 if ms == 0 && !d.is_zero() => "<1ms".to_owned(),
        0 => format!("{ms}ms"),
        1..=9 => {
            let tenths = (ms + 50) / 100;
            match tenths % 10 {
                0 => format!("{}s", tenths / 10),
                t => format!("{}.{t}s", tenths / 10),
            }
        }
        10..=59 => format!("{secs}s"),
        60..=3599 => match secs % 60 {
            0 => format!("{}m", secs / 60),
            s => format!("{}m {s}s", secs / 60),
        },
        // Hours up to two days, as people say them (`24h`, `36h`); days beyond.
        3600..=172_799 => match (secs / 60) % 60 {
            0 => format!("{}h", secs / 3600),
            m => format!("{}h {m}m", secs / 3600),
        },
        _ => match (secs / 3600) % 24 {
            0 => format!("{}d", secs / 86400),
            h => format!("{}d {h}h", secs / 86400),
        },
    }
}

/// `t` said from `now`: `3m 12s ago`, `in 12s`, `just now` within a second; to the second, as
/// `duration` writes it.
pub fn from_now(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) if ahead.as_secs() > 0 => {
            format!("in {}", duration(Duration::from_secs(ahead.as_secs())))
        }
        Ok(_) => "just now".into(),
        Err(behind) => match behind.duration().as_secs() {
            0 => "just now".into(),
            secs => format!("{} ago", duration(Duration::from_secs(secs))),
        },
    }
}

/// Most characters of one line dlock prints about an error or event: its own words are far fewer;
/// a longer line carries a server's text (a 2 MB error answer), which is cut.
pub const MAX_LINE_CHARS: usize = 1000;

/// `line` as it may reach a terminal: control characters (escape sequences, C1 controls, a
/// carriage return or newline that would start a line of the server's words), and what prints
/// invisibly, escaped (`\u{1b}`); cut after `MAX_LINE_CHARS` characters (`...`). Server error
/// text reaches the user only inside such a line.
pub fn for_terminal(line: &str) -> String {
    escaped(line, MAX_LINE_CHARS)
}

/// Text from outside made safe to print: control and other invisible characters escaped (`\u{1b}`,
/// `\n`), at most `max` characters kept (then `...`). A terminal shows it as it is written.
pub fn escaped(raw: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in raw.chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        match c {
            '"' | '\'' | '\\' => out.push(c),
            _ => out.extend(c.escape_debug()),
        }
    }
    out
}

/// `message` without the internals libraries put in their errors' text: Rust's ` (os error 2)`
/// after an I/O error, and the redis client's error kind (`... - Server(ResponseError): ...`,
/// `... - IoError`), which say nothing the words around them do not.
pub fn without_internals(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix(" (os error ") {
            let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            if digits > 0 && after[digits..].starts_with(')') {
                rest = &after[digits + 1..];
                continue;
            }
        }
        if let Some(after) = rest.strip_prefix(" - ") {
            let kind = error_kind_len(after);
            if kind > 0 && (after[kind..].is_empty() || after[kind..].starts_with(':')) {
                rest = &after[kind..];
                continue;
            }
        }
        let next = rest.chars().next().map_or(1, char::len_utf8);
        out.push_str(&rest[..next]);
        rest = &rest[next..];
    }
    out
}

/// The length of a Rust enum variant as Debug shows it at the start of `text`: `IoError`,
/// `Server(ResponseError)`; 0 if there is none.
fn error_kind_len(text: &str) -> usize {
    let word = |t: &str| {
        let n = t.len()
            - t.trim_start_matches(|c: char| c.is_ascii_alphanumeric())
                .len();
        if t.starts_with(|c: char| c.is_ascii_uppercase()) {
            n
        } else {
            0
        }
    };
    let first = word(text);
    if first == 0 {
        return 0;
    }
    let Some(inner) = text[first..].strip_prefix('(') else {
        return first;
    };
    let second = word(inner);
    match inner[second..].starts_with(')') {
        true if second > 0 => first + 1 + second + 1,
        _ => first,
    }
}

/// A signal by the name people use (`SIGTERM`), or `signal N` for one without a usual name.
pub fn signal_name(n: i32) -> String {
    let name = match n {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {n}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let ms = Duration::from_millis;
        for (d, shown) in [
            (ms(0), "0ms"),
            (Duration::from_nanos(1), "<1ms"),
            (ms(250), "250ms"),
            (Duration::from_nanos(3_700_149_160), "3.7s"),
            (ms(1_000), "1s"),
            (ms(9_960), "10s"),
            (ms(42_400), "42s"),
            (ms(125_000), "2m 5s"),
            (ms(120_000), "2m"),
            (ms(5_400_000), "1h 30m"),
            (ms(24 * 86_400_000), "24d"),
            (ms(90_000_000), "25h"),
            (ms(86_400_000), "24h"),
            (ms(172_800_000), "2d"),
            (Duration::MAX, "213503982334601d 7h"),
        ] {
            assert_eq!(duration(d), shown, "{d:?}");
        }
    }

    #[test]
    fn library_internals_are_left_out_of_messages() {
        for (raw, shown) in [
            (
                "cannot open /x/y: No such file or directory (os error 2)",
                "cannot open /x/y: No such file or directory",
            ),
            (
                "cannot take lock \"a\": An error was signalled by the server - Server(ResponseError): NOPERM no permissions",
                "cannot take lock \"a\": An error was signalled by the server: NOPERM no permissions",
            ),
            ("broken pipe - IoError", "broken pipe"),
            ("a - b (os error x) - plain words", "a - b (os error x) - plain words"),
            ("ünï (os error 13)", "ünï"),
        ] {
            assert_eq!(without_internals(raw), shown);
        }
    }

    #[test]
    fn signals_read_by_name() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGINT), "SIGINT");
        assert_eq!(signal_name(40), "signal 40");
    }

    #[test]
    fn percent_escapes_round_trip_and_refuse_what_no_encoder_writes() {
        let all = |_: usize, c: char| c == '%' || !c.is_ascii_alphanumeric();
        for text in ["plain", "a/b c", "50% off", "ünï ✓", ""] {
            let encoded = percent_encode(text, all);
            assert!(encoded
                .chars()
                .all(|c| c == '%' || c.is_ascii_alphanumeric()));
            assert_eq!(percent_decode(&encoded).as_deref(), Some(text));
        }
        assert_eq!(percent_encode("a/ü", all), "a%2F%C3%BC");
        for bad in ["%", "%4", "%G1", "%+1", "%C3", "a%zz"] {
            assert_eq!(percent_decode(bad), None, "{bad}");
        }
        assert_eq!(percent_decode("%2f%2F").as_deref(), Some("//"));
    }

    #[test]
    fn hex_is_two_lower_case_digits_a_byte() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }
}
