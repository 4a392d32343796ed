//! Backend addresses as messages may show them: with every place a password can take hidden. One
//! helper for every backend, used wherever a URL (or what the user gave as one) reaches a message
//! or a location.

/// `url` with its credentials and its query hidden: everything between `://` and the last `@`
/// (`user:password@`, `password@`, a password with `/`, `:` or `@` in it) and everything after the
/// first `?` or `#` (`redis+unix:///x?pass=...`). When a `?` or `#` comes before the last `@`,
/// the two cannot be told apart and all but the scheme is hidden. Over-hiding is harmless;
/// showing a password is not.
pub fn redact(url: &str) -> String {
    // A scheme is a letter, then letters, digits, `+`, `-` or `.`: a `://` after anything else
    // may be inside a password.
    let is_scheme = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    };
    let (scheme, rest) = match url.find("://") {
        Some(i) if is_scheme(&url[..i]) => url.split_at(i + 3),
        _ => ("", url),
    };
    let at = rest.rfind('@');
    let query = rest.find(['?', '#']);
    if let (Some(at), Some(query)) = (at, query) {
        if query < at {
            return format!("{scheme}***");
        }
    }
    let start = at.map_or(0, |at| at + 1);
    let end = query.unwrap_or(rest.len());
    let mut shown = String::from(scheme);
    if at.is_some() {
        shown.push_str("***@");
    }
    shown.push_str(&rest[start..end]);
    if let Some(q) = query {
        shown.push_str(&rest[q..=q]);
        shown.push_str("***");
    }
    shown
}

/// URLs of every backend's shape with the password `...SECRET...` in each place a password can
/// take, for the tests of each backend's parser.
#[cfg(test)]
pub fn with_password() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::strategy::Strategy;
    let pieces = (
        "redis://|rediss://|redis\\+cluster://|rediss\\+cluster://|zk://|redis\\+unix://|unix://|file://|",
        "[a-z]{0,6}",
        "[A-Za-z0-9/:@?#%&=.+\\[\\]-]{0,12}SECRET[A-Za-z0-9/:@?#%&=.+\\[\\]-]{0,12}",
        "127\\.0\\.0\\.1:1|\\[::1\\]:1|h:x|h|/tmp/none\\.sock|",
        "|/|/0|/apps/x",
        0..6usize,
    );
    pieces.prop_map(|(scheme, user, password, host, path, place)| match place {
        0 => format!("{scheme}{user}:{password}@{host}{path}"),
        1 => format!("{scheme}{password}@{host}{path}"),
        2 => format!("{scheme}:{password}@{host}{path}"),
        3 => format!("{scheme}{host}{path}?pass={password}"),
        4 => format!("{scheme}{host}{path}?user={user}&password={password}"),
        _ => format!("{scheme}{user}:{password}@{host}{path}?db=1&pass={password}"),
    })
}

#[cfg(test)]
mod tests {
    use super::{redact, with_password};
    use crate::backend::{self, BackendConfig, BackendKind};
    use std::time::Duration;

    #[test]
    fn credentials_and_queries_are_hidden() {
        for (url, shown) in [
            ("redis://alice:s3cret@db:6379/2", "redis://***@db:6379/2"),
            ("redis://db:6379", "redis://db:6379"),
            ("zk://alice:PA/SS1@host", "zk://***@host"),
            ("zk://SECRET@host", "zk://***@host"),
            ("redis+unix:///x?pass=SECRET", "redis+unix:///x?***"),
            (
                "unix:///run/redis.sock?user=a&pass=SECRET",
                "unix:///run/redis.sock?***",
            ),
            ("rediss://h:1#insecure", "rediss://h:1#***"),
            ("redis://u:pa?ss@h", "redis://***"),
            ("unix:///x?pass=a@b", "unix://***"),
            ("u:SECRET@h:1", "***@h:1"),
            (":SECRET://@h:1", "***@h:1"),
            ("/var/lock/dlock", "/var/lock/dlock"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    /// What the file and ZooKeeper backends say about `url` when opened (neither connects when it
    /// opens), or where they keep their locks. The file backend only for other schemes: it would
    /// make a directory of a plain path.
    fn messages_about(url: &str) -> Vec<String> {
        let mut messages = vec![redact(url)];
        let mut kinds = vec![BackendKind::Zk];
        if url.contains("://") && !url.starts_with("file://") {
            kinds.push(BackendKind::File);
        }
        for kind in kinds {
            let config = BackendConfig {
                kind,
                urls: vec![url.to_owned()],
                connect_timeout: Duration::from_millis(1),
                create: false,
                replicas: 0,
            };
            match backend::open(&config) {
                Ok(b) => messages.push(b.location()),
                Err(e) => messages.push(format!("{e:#}")),
            }
        }
        messages
    }

    proptest::proptest! {
        /// For URLs of every backend's shape, with a password in each place a password can
        /// take, no message and no location contains it. (Redis's parser: in its own tests.)
        #[test]
        fn no_message_shows_a_password(url in with_password()) {
            for message in messages_about(&url) {
                proptest::prop_assert!(!message.contains("SECRET"), "{} gave {}", url, message);
            }
        }
    }
}
