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

/// The password in the file: its first line, without the line ending. An empty one is refused.
pub fn read_password(path: &Path) -> Result<String, String> {
    let text = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read the password file {}: {}",
            path.display(),
            crate::report::plain(&e)
        )
    })?;
    let text = String::from_utf8(text)
        .map_err(|_| format!("the password file {} is not UTF-8", path.display()))?;
    let password = text.lines().next().unwrap_or("");
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
/// A URL with its own password keeps it; a path (the file backend) is left as it is.
pub fn with_password(url: &str, password: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://").filter(|_| starts_with_scheme(url)) else {
        return url.to_owned();
    };
    if scheme == "file" {
        return url.to_owned();
    }
    let encoded = crate::text::percent_encode(password, |_, c| {
        !(c.is_ascii_alphanumeric() || "-._~".contains(c))
    });
    match rest.rfind('@') {
        Some(at) if rest[..at].contains(':') => url.to_owned(),
        Some(at) => format!("{scheme}://{}:{encoded}{}", &rest[..at], &rest[at..]),
        None => format!("{scheme}://:{encoded}@{rest}"),
    }
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
        ] {
            assert_eq!(with_password(url, "p@ss:w"), with, "{url}");
        }
    }
}
