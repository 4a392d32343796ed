//! Backend addresses as messages may show them: with every place a password can take hidden. One
//! helper for every backend, used wherever a URL (or what the user gave as one) reaches a message
//! or a location; and the parts the URLs of several backends share (a list of hosts, credentials).

mod server;
pub use server::{host_list, server, BadServer, Server};

use crate::error;

use crate::text::percent_decode;

/// `url` with its password and its query hidden: the credentials run from `://` to the last `@`
/// (`user:password@`, `password@`, a password with `/`, `:` or `@` in it); of them only the user
/// name before the first `:` is shown (`postgres://app:***@db`), and a word without `:` only
/// where the URL's scheme reads it as a user name (`postgres://app@db`: PostgreSQL, MySQL); and
/// everything after the first `?` or `#` is hidden (`redis+unix:///x?pass=...`). When a `?` or `#`
/// comes before the last `@`, the two cannot be told apart and all but the scheme is hidden.
/// Over-hiding is harmless; showing a password is not.
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
    if let Some(at) = at {
        shown.push_str(&shown_credentials(scheme, &rest[..at]));
    }
    shown.push_str(&rest[start..end]);
    if let Some(q) = query {
        shown.push_str(&rest[q..=q]);
        shown.push_str("***");
    }
    shown
}

/// The credentials `userinfo` as `redact` shows them, with their `@`: the user name and `***`
/// for the password; all hidden where a lone word may be a password (`zk://SECRET@host`,
/// `redis://SECRET:@host`).
fn shown_credentials(scheme: &str, userinfo: &str) -> String {
    let names_user = ["postgres://", "postgresql://", "mysql://", "mariadb://"].contains(&scheme);
    match userinfo.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => {
            format!("{user}:***@")
        }
        None if names_user && !userinfo.is_empty() => format!("{userinfo}@"),
        _ => "***@".into(),
    }
}

/// A `scheme://authority...` URL cut where RFC 3986 cuts it: the authority ends at the first `/`,
/// `?` or `#` after `://`, and its user information at the last `@` inside it. Every backend's
/// parser reads a URL this way, so what goes into `userinfo` is what they take for credentials.
#[derive(Debug, PartialEq, Eq)]
pub struct Parts<'a> {
    /// `redis`, without `://`.
    pub scheme: &'a str,
    /// `user:password`, `user` or `:password` (as written, percent-escaped), if there is an `@`.
    pub userinfo: Option<&'a str>,
    /// The hosts: `host:port`, `a:1,b:2`, or empty.
    pub hosts: &'a str,
    /// The path, query and fragment, from the first `/`, `?` or `#` on.
    pub tail: &'a str,
}

impl<'a> Parts<'a> {
    /// `url` cut into its parts, or `None` without a `scheme://` at its start.
    pub fn of(url: &'a str) -> Option<Parts<'a>> {
        let (scheme, rest) = url.split_once("://")?;
        let is_scheme = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if !is_scheme {
            return None;
        }
        let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        Some(Parts {
            scheme,
            userinfo,
            hosts,
            tail,
        })
    }

    /// The URL again, with `userinfo` in place of its own.
    pub fn with_userinfo(&self, userinfo: Option<&str>) -> String {
        let at = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        format!("{}://{at}{}{}", self.scheme, self.hosts, self.tail)
    }
}

/// Set (to 1) for the command when a password was taken out of the DLOCK_URL it gets
/// (`without_secrets`): set by `cli::place`, kept from the command by `supervise::environment`.
pub const PASSWORD_WITHHELD_VAR: &str = "DLOCK_PASSWORD_WITHHELD";

/// Where a password that does not work came from, for the line that says so: set once, when a
/// password file is read (see `cli::resolve`), and read by every backend's message about a refused
/// password.
static PASSWORD_FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Records that the servers' password came from the file `path`.
pub fn password_from_file(path: &std::path::Path) {
    let _ = PASSWORD_FILE.set(path.to_owned());
}

/// What to check when a server refuses the credentials: the URL, or the password file the
/// password came from.
pub fn credentials_hint() -> String {
    match PASSWORD_FILE.get() {
        Some(path) => format!(
            "check the user in the URL and the password in the password file {}",
            path.display()
        ),
        None => "check the user and password in the URL".into(),
    }
}

/// What to do when a server asked for a password and the URL gave none (a user name alone): the
/// ways the README gives one, none of which puts it on a command line.
pub fn password_needed() -> &'static str {
    "it needs a password and the URL has none: give it with --password-file FILE (or \
     DLOCK_PASSWORD_FILE, or password-file in the configuration file), or in the URL"
}

/// `url` as a nested dlock may be given it: the password after the user name and every query value
/// that may be a secret (`sentinel_password`, `password`, `sslpassword`, a token) taken out, the
/// user name, host, database, prefix and the rest kept, as psql and redis-cli show a URL. Returns
/// whether anything was taken out. When a `?` or `#` comes before the last `@`, the credentials
/// cannot be told from the query (see `redact`), and the URL is passed on redacted, unusable, so
/// that the nested dlock fails naming it rather than connecting anywhere else.
pub fn without_secrets(url: &str) -> (String, bool) {
    let Some(parts) = Parts::of(url) else {
        let shown = redact(url);
        let taken = shown != url;
        return (shown, taken);
    };
    // `redis://u:pa?ss@h`, `redis://:pa/ss@h`: a password with a `/`, `?` or `#` in it, or an `@`
    // in the path or query; which one a backend's parser takes it for is not worth guessing, so
    // the URL is passed on unusable.
    if parts.tail.contains('@') {
        return (redact(url), true);
    }
    let query = parts.tail.find(['?', '#']);
    let mut taken = false;
    let user = parts.userinfo.map(|info| match info.split_once(':') {
        Some((user, _)) => {
            taken = true;
            user
        }
        None => info,
    });
    let mut kept = Parts { tail: "", ..parts }.with_userinfo(user.filter(|u| !u.is_empty()));
    let end = query.unwrap_or(parts.tail.len());
    kept.push_str(&parts.tail[..end]);
    let tail = &parts.tail[end..];
    let (query, fragment) = match tail.find('#') {
        Some(hash) => tail.split_at(hash),
        None => (tail, ""),
    };
    if let Some(pairs) = query.strip_prefix('?') {
        let public: Vec<&str> = pairs
            .split('&')
            .filter(|pair| {
                let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
                let key = percent_decode(key).unwrap_or_default().to_ascii_lowercase();
                let secret = key.is_empty()
                    || ["pass", "secret", "token", "credential"]
                        .iter()
                        .any(|word| key.contains(word));
                taken |= secret && !pair.is_empty();
                !secret
            })
            .collect();
        if !public.is_empty() {
            kept.push('?');
            kept.push_str(&public.join("&"));
        }
    }
    kept.push_str(fragment);
    (kept, taken)
}

/// Whether the query of the `scheme://` URL `url` has the parameter `key` (`?key=...`; a plain
/// path has no query).
pub fn has_parameter(url: &str, key: &str) -> bool {
    let Some(parts) = Parts::of(url) else {
        return false;
    };
    let before_fragment = parts.tail.split('#').next().unwrap_or_default();
    before_fragment.split_once('?').is_some_and(|(_, pairs)| {
        pairs
            .split('&')
            .any(|pair| pair.split('=').next() == Some(key))
    })
}

/// `user:password` from a URL (percent-escaped), for `what` ("etcd URL") `shown` (redacted): not a
/// word of either in a message, only what is wrong with them.
pub fn user_password(userinfo: &str, what: &str, shown: &str) -> error::Result<(String, String)> {
    let (user, password) = userinfo
        .split_once(':')
        .ok_or_else(|| error!("{what} {shown:?}: credentials must be user:password"))?;
    let user = percent_decode(user)
        .ok_or_else(|| error!("{what} {shown:?}: bad percent escape in the user name"))?;
    let password = percent_decode(password)
        .ok_or_else(|| error!("{what} {shown:?}: bad percent escape in the password"))?;
    if user.is_empty() {
        return Err(error!("{what} {shown:?}: the user name is empty"));
    }
    Ok((user, password))
}

/// `url` with `password` in it, percent-encoded, where it has none: after the user name in
/// `scheme://user@host`, or as `scheme://:password@host` without a user (Redis's default user).
/// A URL with its own password keeps it; a path (the file backend) is left as it is. The URL is
/// cut into its parts first (`Parts`), so the password lands in the user information
/// whatever `@`, `:`, `?` or `#` the path, query or fragment hold. `Ok(None)`: left as it was.
///
/// ZooKeeper's and etcd's parsers end the credentials at the last `@` of the whole URL (so that a
/// password may hold a `/`): an `@` after the hosts would put the password somewhere else than
/// where it was inserted, so such a URL is refused instead, with the one line to show.
pub fn insert_password(url: &str, password: &str) -> Result<Option<String>, String> {
    let Some(parts) = Parts::of(url) else {
        return Ok(None);
    };
    if parts.scheme == "file" {
        return Ok(None);
    }
    if matches!(parts.scheme, "zk" | "etcd" | "etcds") && parts.tail.contains('@') {
        return Err(format!(
            "{}: an `@` after the hosts would be read as the end of the credentials: write it as \
             %40, or put the password in the URL",
            redact(url)
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

/// URLs of every backend's shape with the password `...SECRET...` in each place a password can
/// take, for the tests of each backend's parser.
#[cfg(any(test, feature = "testing"))]
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
        // Alone, without a `:`: with one, the URL's grammar makes the part before it a user name,
        // which messages show.
        1 => format!("{scheme}{}@{host}{path}", password.replace(':', "")),
        2 => format!("{scheme}:{password}@{host}{path}"),
        3 => format!("{scheme}{host}{path}?pass={password}"),
        4 => format!("{scheme}{host}{path}?user={user}&password={password}"),
        _ => format!("{scheme}{user}:{password}@{host}{path}?db=1&pass={password}"),
    })
}

#[cfg(test)]
mod tests {
    use super::{has_parameter, insert_password, redact, user_password, without_secrets};

    #[test]
    fn a_parameter_is_found_in_the_query_only() {
        assert!(has_parameter("zk://h:1/?replicas=1", "replicas"));
        assert!(has_parameter(
            "postgres://h/db?sslmode=disable&replicas",
            "replicas"
        ));
        for url in [
            "zk://h:1/replicas",
            "zk://h:1/?xreplicas=1",
            "zk://h:1/#?replicas=1",
            "/srv/locks?replicas=1",
        ] {
            assert!(!has_parameter(url, "replicas"), "{url}");
        }
    }

    #[test]
    fn credentials_and_queries_are_hidden() {
        for (url, shown) in [
            (
                "redis://alice:s3cret@db:6379/2",
                "redis://alice:***@db:6379/2",
            ),
            ("redis://db:6379", "redis://db:6379"),
            ("redis://:s3cret@db", "redis://***@db"),
            ("postgres://app@db:5432/app", "postgres://app@db:5432/app"),
            ("mysql://app:pw@db/app", "mysql://app:***@db/app"),
            ("zk://alice:PA/SS1@host", "zk://alice:***@host"),
            ("zk://SECRET@host", "zk://***@host"),
            ("redis+unix:///x?pass=SECRET", "redis+unix:///x?***"),
            (
                "unix:///run/redis.sock?user=a&pass=SECRET",
                "unix:///run/redis.sock?***",
            ),
            ("rediss://h:1#insecure", "rediss://h:1#***"),
            ("redis://u:pa?ss@h", "redis://***"),
            ("unix:///x?pass=a@b", "unix://***"),
            ("u:SECRET@h:1", "u:***@h:1"),
            (":SECRET://@h:1", "***@h:1"),
            ("/var/lock/dlock", "/var/lock/dlock"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn passwords_and_secret_queries_are_taken_out_users_kept() {
        for (url, kept, taken) in [
            ("redis://db:6379/2", "redis://db:6379/2", false),
            ("redis://:pw@db:6379/2", "redis://db:6379/2", true),
            ("redis://app:p@ss@db/2", "redis://app@db/2", true),
            (
                "postgres://app@db/app?prefix=t_",
                "postgres://app@db/app?prefix=t_",
                false,
            ),
            (
                "postgres://app:pw@db/app?sslmode=require&password=x&prefix=t_",
                "postgres://app@db/app?sslmode=require&prefix=t_",
                true,
            ),
            (
                "redis+sentinel://u:pw@h:1,h:2/main/3?sentinel_password=S&x=1",
                "redis+sentinel://u@h:1,h:2/main/3?x=1",
                true,
            ),
            ("unix:///x?pass=a@b", "unix://***", true),
            ("redis://u:pa?ss@h", "redis://***", true),
            ("rediss://h:1#insecure", "rediss://h:1#insecure", false),
            ("u:SECRET@h:1", "u:***@h:1", true),
            ("etcd://a:1,b:2", "etcd://a:1,b:2", false),
            ("zk://app:pw@a:1/chroot", "zk://app@a:1/chroot", true),
            ("redis://:pa/ss@h:1/2", "redis://***@h:1/2", true),
        ] {
            assert_eq!(without_secrets(url), (kept.to_owned(), taken), "{url}");
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
        /// For URLs of every backend's shape, with a password in each place a password can
        /// take, no message and no location contains it. (Redis's parser: in its own tests.)
        /// A password after a user name, or in a query value whose key says so, never reaches
        /// a nested dlock, whatever characters it has.
        #[test]
        fn no_url_passed_on_has_a_password(
            user in "[a-z]{0,6}",
            password in "[A-Za-z0-9%:@/.+=-]{0,6}SECRET[A-Za-z0-9%:@/.+=-]{0,6}",
            key in "password|pass|sentinel_password|sslpassword|auth_token",
            place in 0..3usize,
        ) {
            let url = match place {
                0 => format!("redis://{user}:{password}@h:1/2"),
                1 => format!("postgres://{user}@h/db?prefix=t_&{key}={password}"),
                _ => format!("redis+sentinel://{user}:{password}@h:1/m?{key}={password}"),
            };
            let (kept, taken) = without_secrets(&url);
            proptest::prop_assert!(taken && !kept.contains("SECRET"), "{} gave {}", url, kept);
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
            let given = insert_password(url, "p@ss:w")
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
            let before = super::Parts::of(&url).expect("a scheme");
            let encoded = crate::text::percent_encode(&password, |_, c| {
                !(c.is_ascii_alphanumeric() || "-._~".contains(c))
            });
            match insert_password(&url, &password) {
                Err(line) => {
                    proptest::prop_assert!(
                        ["zk", "etcd", "etcds"].contains(&before.scheme) && before.tail.contains('@'),
                        "{} refused: {}", url, line
                    );
                    proptest::prop_assert!(line.starts_with(&redact(&url)), "{}", line);
                }
                Ok(None) => proptest::prop_assert!(
                    before.userinfo.is_some_and(|u| u.contains(':')),
                    "{} left without a password", url
                ),
                Ok(Some(given)) => {
                    let after = super::Parts::of(&given).expect("a scheme");
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
