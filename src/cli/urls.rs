//! Servers as a fleet writes them once (DLOCK_URL, the configuration file's `url`), and the
//! password from a file put into them, so that none needs to be on a command line.

use std::path::Path;

/// One value that may name several servers: separated by commas or white space where the next
/// one starts with a scheme (`redis://a:6379,redis://b:6379 redis://c:6379`). A comma or space
/// not followed by a scheme is part of the URL (`zk://a:2181,b:2181/app`, a directory with a
/// space in its name).
pub fn split(text: &str) -> Vec<String> {
    let text = text.trim();
    let is_separator = |c: char| c == ',' || c.is_whitespace();
    let mut urls = Vec::new();
    let mut start = 0;
    let mut rest = text;
    while let Some(at) = rest.find(is_separator) {
        let offset = text.len() - rest.len() + at;
        let after = text[offset..].trim_start_matches(is_separator);
        let next = text.len() - after.len();
        if starts_with_scheme(after) {
            let url = text[start..offset].trim_end_matches(is_separator);
            if !url.is_empty() {
                urls.push(url.to_owned());
            }
            start = next;
        }
        rest = after;
    }
    if start < text.len() {
        urls.push(text[start..].to_owned());
    }
    urls
}

/// `scheme://` at the start: a letter, then letters, digits, `+`, `-` or `.`.
fn starts_with_scheme(text: &str) -> bool {
    let Some((scheme, _)) = text.split_once("://") else {
        return false;
    };
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// The password in the file: its first line, without the line ending and the white space at its
/// end (which an editor adds unseen). An empty one is refused, and so is a file that another user
/// could have written or that everyone may read (see `trusted`).
pub fn read_password(path: &Path) -> Result<String, String> {
    let text = super::trusted::read(path, super::trusted::Kind::Password)?;
    let password = text.lines().next().unwrap_or("").trim_end();
    if password.is_empty() {
        return Err(format!(
            "the password file {} is empty: write the password on its first line",
            path.display()
        ));
    }
    Ok(password.to_owned())
}

/// `url` with `password` in it, percent-encoded, where it has none: after the user name in
/// `scheme://user@host`, or as `scheme://:password@host` without a user (Redis's default user).
/// A URL with its own password keeps it; a path (the file backend) is left as it is. The URL is
/// cut into its parts first (`crate::url::Parts`), so the password lands in the user information
/// whatever `@`, `:`, `?` or `#` the path, query or fragment hold. `Ok(None)`: left as it was.
///
/// ZooKeeper's and etcd's parsers end the credentials at the last `@` of the whole URL (so that a
/// password may hold a `/`): an `@` after the hosts would put the password somewhere else than
/// where it was inserted, so such a URL is refused instead, with the one line to show.
pub fn with_password(url: &str, password: &str) -> Result<Option<String>, String> {
    let Some(parts) = crate::url::Parts::of(url) else {
        return Ok(None);
    };
    if parts.scheme == "file" {
        return Ok(None);
    }
    if matches!(parts.scheme, "zk" | "etcd" | "etcds") && parts.tail.contains('@') {
        return Err(format!(
            "{}: an `@` after the hosts would be read as the end of the credentials: write it as \
             %40, or put the password in the URL",
            crate::url::redact(url)
        ));
    }
    let encoded = crate::text::percent_encode(password, |_, c| {
        !(c.is_ascii_alphanumeric() || "-._~".contains(c))
    });
    Ok(match parts.userinfo {
        Some(userinfo) if userinfo.contains(':') => None,
        Some(user) => Some(parts.with_userinfo(Some(&format!("{user}:{encoded}")))),
        None => Some(parts.with_userinfo(Some(&format!(":{encoded}")))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_servers_split_where_a_scheme_follows() {
        for (text, urls) in [
            ("redis://a:1", vec!["redis://a:1"]),
            (
                "redis://a:1,redis://b:2 redis://c:3",
                vec!["redis://a:1", "redis://b:2", "redis://c:3"],
            ),
            (
                " redis://a:1 ,  redis://b:2\n",
                vec!["redis://a:1", "redis://b:2"],
            ),
            ("zk://a:1,b:2/app", vec!["zk://a:1,b:2/app"]),
            ("etcd://a:1,b:2", vec!["etcd://a:1,b:2"]),
            ("/srv/my locks", vec!["/srv/my locks"]),
            ("", vec![]),
        ] {
            assert_eq!(split(text), urls, "{text:?}");
        }
    }

    #[test]
    fn a_password_goes_where_the_url_has_none() {
        for (url, with) in [
            ("redis://10.0.0.5:6379", "redis://:p%40ss%3Aw@10.0.0.5:6379"),
            ("redis://app@h:1/2", "redis://app:p%40ss%3Aw@h:1/2"),
            ("redis://app:own@h:1", "redis://app:own@h:1"),
            (
                "postgres://dlock@db/locks",
                "postgres://dlock:p%40ss%3Aw@db/locks",
            ),
            ("zk://app@a:1,b:2/x", "zk://app:p%40ss%3Aw@a:1,b:2/x"),
            ("/var/lock/dlock", "/var/lock/dlock"),
            ("file:///var/lock/dlock", "file:///var/lock/dlock"),
            (
                "mysql://root@h:1/db?ssl-ca=/x@y",
                "mysql://root:p%40ss%3Aw@h:1/db?ssl-ca=/x@y",
            ),
            (
                "postgres://h:1/db?application_name=a@b",
                "postgres://:p%40ss%3Aw@h:1/db?application_name=a@b",
            ),
            ("redis://h#a@b", "redis://:p%40ss%3Aw@h#a@b"),
        ] {
            let given = with_password(url, "p@ss:w")
                .unwrap()
                .unwrap_or_else(|| url.to_owned());
            assert_eq!(given, with, "{url}");
        }
    }

    proptest::proptest! {
        /// Whatever `@`, `:`, `%`, `?` or `#` every part of a URL of any backend holds, the
        /// password lands in its user information alone: the hosts, path, query and fragment come
        /// out as they went in, and a URL with a password of its own keeps it.
        #[test]
        fn the_password_goes_into_the_user_information_of_every_url(
            scheme in "redis|rediss|redis\\+sentinel|redis\\+cluster|rediss\\+cluster|zk|etcd|etcds|postgres|postgresql|mysql",
            user in proptest::option::of("[a-z0-9@:%?#._-]{0,8}"),
            hosts in "[a-z0-9.:,\\[\\]%-]{0,16}",
            path in proptest::option::of("/[a-z0-9/@:%?#&=._-]{0,12}"),
            query in proptest::option::of("\\?[a-z0-9/@:%?#&=._-]{0,16}"),
            fragment in proptest::option::of("#[a-z0-9/@:%?#&=._-]{0,8}"),
            password in "[ -~]{1,12}",
        ) {
            let at = user.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
            let url = format!(
                "{scheme}://{at}{hosts}{}{}{}",
                path.unwrap_or_default(),
                query.unwrap_or_default(),
                fragment.unwrap_or_default()
            );
            let before = crate::url::Parts::of(&url).expect("a scheme");
            let encoded = crate::text::percent_encode(&password, |_, c| {
                !(c.is_ascii_alphanumeric() || "-._~".contains(c))
            });
            match with_password(&url, &password) {
                Err(line) => {
                    proptest::prop_assert!(
                        ["zk", "etcd", "etcds"].contains(&before.scheme) && before.tail.contains('@'),
                        "{} refused: {}", url, line
                    );
                    proptest::prop_assert!(line.starts_with(&crate::url::redact(&url)), "{}", line);
                }
                Ok(None) => proptest::prop_assert!(
                    before.userinfo.is_some_and(|u| u.contains(':')),
                    "{} left without a password", url
                ),
                Ok(Some(given)) => {
                    let after = crate::url::Parts::of(&given).expect("a scheme");
                    proptest::prop_assert_eq!(after.scheme, before.scheme);
                    proptest::prop_assert_eq!(after.hosts, before.hosts);
                    proptest::prop_assert_eq!(after.tail, before.tail);
                    let expected = format!("{}:{encoded}", before.userinfo.unwrap_or(""));
                    proptest::prop_assert_eq!(after.userinfo, Some(expected.as_str()));
                    let decoded = after
                        .userinfo
                        .and_then(|u| u.rsplit_once(':'))
                        .and_then(|(_, p)| crate::text::percent_decode(p));
                    proptest::prop_assert_eq!(decoded.as_deref(), Some(password.as_str()));
                }
            }
        }
    }
}
