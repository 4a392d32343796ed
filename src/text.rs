//! How values are spelled where they must stay readable and map back: `%XX` escapes for lock names
//! inside file names, Redis keys and znodes, lower-case hex for digests and ids, and durations
//! rounded for people. Each backend decides which characters to escape; the spelling is shared.

use std::fmt::Write as _;
use std::time::Duration;

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

/// A duration to the millisecond, for people (`humantime::format_duration` shows nanoseconds).
pub fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn durations_round_down_to_the_millisecond() {
        assert_eq!(
            round_ms(Duration::from_micros(1_999)),
            Duration::from_millis(1)
        );
        assert_eq!(round_ms(Duration::MAX), Duration::from_millis(u64::MAX));
    }
}
