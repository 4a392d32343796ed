//! Text that other users read on their terminals (hosts, owner ids, messages from the store):
//! what may be shown as it is, and how the rest is escaped.

use super::MAX_MESSAGE_BYTES;

pub use crate::text::escaped;

/// Whether `text` needs no escaping to be printed.
pub fn is_plain(text: &str) -> bool {
    text.chars()
        .all(|c| matches!(c, '"' | '\'' | '\\') || c.escape_debug().eq([c]))
}

/// Whether `text` prints as itself where it is shown to other users: no control characters (a
/// newline, a tab, a terminal escape), nothing invisible that reorders or hides what follows
/// (U+202E), no combining mark at its start. The rule `--message` is held to.
pub fn prints_as_itself(text: &str) -> bool {
    // str::escape_debug leaves printable text as it is but for a backslash before `"`, `'` and `\`.
    let mut expected = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '"' | '\'' | '\\') {
            expected.push('\\');
        }
        expected.push(c);
    }
    text.escape_debug().eq(expected.chars())
}

/// A `--message` as given, or why it is refused: at most `MAX_MESSAGE_BYTES` and printable.
pub fn check_message(text: &str) -> Result<String, String> {
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "the message is {} bytes long; the limit is {MAX_MESSAGE_BYTES} bytes",
            text.len()
        ));
    }
    if !prints_as_itself(text) {
        // A combining mark is refused only at the start, where it has nothing to combine with.
        let c = text
            .chars()
            .find(|c| !prints_as_itself(&format!("a{c}")))
            .or(text.chars().next())
            .unwrap_or(' ');
        return Err(format!(
            "the message contains {}, which does not print as itself (other users read it on \
             their terminals); use printable text, at most {MAX_MESSAGE_BYTES} bytes",
            c.escape_debug()
        ));
    }
    Ok(text.to_owned())
}

/// A message read from a store, if dlock could have written it.
pub(super) fn message_ok(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_MESSAGE_BYTES && prints_as_itself(text)
}

/// A decimal number in its plain spelling (no sign, no spaces), within `T`.
pub(super) fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_text_printable_and_short() {
        assert_eq!(escaped("plain \"host\" \\", 50), "plain \"host\" \\");
        assert_eq!(escaped("a\nb\u{1b}c\u{202e}", 50), "a\\nb\\u{1b}c\\u{202e}");
        assert_eq!(escaped("abcdef", 3), "abc...");
    }

    #[test]
    fn messages_are_refused_unless_they_print_as_themselves_within_the_limit() {
        for ok in [
            "deploy v1.4 by https://ci/1",
            "é \"q\" \\ '",
            "e\u{301}",
            "日本語",
        ] {
            assert!(check_message(ok).is_ok(), "{ok:?}");
        }
        assert!(check_message(&"é".repeat(128)).is_ok());
        for bad in [
            "a\nb",
            "a\tb",
            "\u{1b}[2J",
            "a\u{7f}",
            "a\u{9b}",
            "r\u{202e}l",
            "\u{301}e",
        ] {
            let why = check_message(bad).unwrap_err();
            assert!(!why.chars().any(char::is_control), "{why}");
        }
        let why = check_message(&"é".repeat(129)).unwrap_err();
        assert!(why.contains("258 bytes") && why.contains("256"), "{why}");
    }
}
