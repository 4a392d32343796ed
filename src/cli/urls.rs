//! Servers as a fleet writes them once (DLOCK_URL, the configuration file's `url`), and the
//! password file's password, which `url::insert_password` puts into them, so that none needs to be
//! on a command line.

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
}
