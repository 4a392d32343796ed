//! Backend addresses as messages may show them: with every place a password can take hidden. One
//! helper for every backend, used wherever a URL (or what the user gave as one) reaches a message
//! or a location; and the parts the URLs of several backends share (a list of hosts, credentials).

use anyhow::anyhow;

use crate::text::percent_decode;

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

/// The servers of an `etcd://` or `zk://` URL, `host:port[,host:port...]`: each `host:port`,
/// `host` (on `default_port`) or `[v6]:port`, as `host:port`. A message names the host it refuses
/// (never the credentials, which the caller has taken off).
pub fn host_list(hosts: &str, default_port: u16) -> anyhow::Result<Vec<String>> {
    hosts
        .split(',')
        .map(|h| host_port(h, default_port))
        .collect()
}

fn host_port(h: &str, default_port: u16) -> anyhow::Result<String> {
    let (host, port) = if let Some(v6) = h.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| anyhow!("unclosed [ in host {h:?}"))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| anyhow!("bad host {h:?}"))?,
            ),
        };
        (format!("[{addr}]"), port)
    } else {
        match h.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (h.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(anyhow!("empty host in {h:?}"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "@/\\%".contains(c))
    {
        return Err(anyhow!("bad host {host:?}"));
    }
    let port: u16 = match port {
        None => default_port,
        Some(p) => p
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| anyhow!("bad port {p:?} in host {h:?}"))?,
    };
    Ok(format!("{host}:{port}"))
}

/// `user:password` from a URL (percent-escaped), for `what` ("etcd URL") `shown` (redacted): not a
/// word of either in a message, only what is wrong with them.
pub fn user_password(userinfo: &str, what: &str, shown: &str) -> anyhow::Result<(String, String)> {
    let (user, password) = userinfo
        .split_once(':')
        .ok_or_else(|| anyhow!("{what} {shown:?}: credentials must be user:password"))?;
    let user = percent_decode(user)
        .ok_or_else(|| anyhow!("{what} {shown:?}: bad percent escape in the user name"))?;
    let password = percent_decode(password)
        .ok_or_else(|| anyhow!("{what} {shown:?}: bad percent escape in the password"))?;
    if user.is_empty() {
        return Err(anyhow!("{what} {shown:?}: the user name is empty"));
    }
    Ok((user, password))
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
    use super::{host_list, redact, user_password, with_password};
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
                stop: Default::default(),
            };
            match backend::open(&config) {
                Ok(b) => messages.push(b.location()),
                Err(e) => messages.push(format!("{e:#}")),
            }
        }
        messages
    }

    #[test]
    fn host_lists_take_ports_defaults_and_v6() {
        assert_eq!(
            host_list("h1:2379,h2,[::1]:2380,[fe80::1]", 7).unwrap(),
            ["h1:2379", "h2:7", "[::1]:2380", "[fe80::1]:7"]
        );
        for (bad, message) in [
            ("", "empty host in \"\""),
            ("h1,,h2", "empty host in \"\""),
            (":1", "empty host in \":1\""),
            ("[]:1", "empty host in \"[]:1\""),
            ("[::1", "unclosed [ in host \"[::1\""),
            ("[::1]x", "bad host \"[::1]x\""),
            ("h:x", "bad port \"x\" in host \"h:x\""),
            ("h:0", "bad port \"0\" in host \"h:0\""),
            ("h:65536", "bad port \"65536\" in host \"h:65536\""),
            ("a b:1", "bad host \"a b\""),
            ("a%41:1", "bad host \"a%41\""),
            ("a\\b", "bad host \"a\\\\b\""),
        ] {
            let err = host_list(bad, 7).expect_err(bad);
            assert_eq!(format!("{err:#}"), message, "{bad}");
        }
    }

    #[test]
    fn credentials_are_decoded_and_never_shown() {
        let (user, password) = user_password("al%40ice:s%3Acret", "etcd URL", "x").unwrap();
        assert_eq!((user.as_str(), password.as_str()), ("al@ice", "s:cret"));
        for bad in ["SECRET", ":SECRET", "u:SECRET%zz", "u%zz:SECRET"] {
            let err = user_password(bad, "etcd URL", "shown").expect_err(bad);
            let err = format!("{err:#}");
            assert!(
                err.starts_with("etcd URL \"shown\": ") && !err.contains("SECRET"),
                "{err}"
            );
        }
    }

    proptest::proptest! {
        /// Any host list is parsed or refused, never a panic; what it gives is `host:port` with a
        /// port that is not 0, and parses again to itself.
        #[test]
        fn host_lists_parse_or_are_refused(text in "[a-z0-9:\\[\\],. %@/]{0,40}") {
            if let Ok(hosts) = host_list(&text, 7) {
                for h in &hosts {
                    let port = h.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
                    proptest::prop_assert!(matches!(port, Some(Ok(p)) if p != 0), "{}", h);
                }
                proptest::prop_assert_eq!(host_list(&hosts.join(","), 7).ok(), Some(hosts));
            }
        }

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
