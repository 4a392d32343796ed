//! The address the user gives: `elasticsearch://[user:password@]host:port[,host:port...][/INDEX]`,
//! `elasticsearchs://` for HTTPS, and `opensearch://`, `opensearchs://` as their aliases, parsed
//! and checked before anything connects. The path names the index the locks live in (`dlock`
//! without one). Credentials never appear in a message; a malformed address is a usage error
//! (exit 64).

use dlock_core::error;
use dlock_core::error::FailAs;

use dlock_core::url::{host_list, redact, user_password, Parts};

/// The node dlock tries without a `--url`.
const DEFAULT_URL: &str = "elasticsearch://127.0.0.1:9200";
const DEFAULT_PORT: u16 = 9200;
/// The index the locks live in when the URL names none.
pub(super) const DEFAULT_INDEX: &str = "dlock";
/// Longest index name the servers take, in bytes.
const MAX_INDEX_BYTES: usize = 255;

/// A parsed address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EsUrl {
    pub(super) credentials: Option<(String, String)>,
    /// `host:port`, each tried in turn when one cannot be reached.
    pub(super) hosts: Vec<String>,
    pub(super) tls: bool,
    pub(super) index: String,
    /// The scheme as written (for messages and the location).
    scheme: &'static str,
}

const SCHEMES: [(&str, bool); 4] = [
    ("elasticsearch", false),
    ("elasticsearchs", true),
    ("opensearch", false),
    ("opensearchs", true),
];

impl EsUrl {
    /// The address from the `--url`s given (none: the default), tagged as a usage error when it is
    /// malformed or when there is more than one.
    pub(super) fn from_urls(urls: &[String]) -> error::Result<EsUrl> {
        let url = match urls {
            [] => DEFAULT_URL,
            [url] => url.as_str(),
            _ => {
                return Err(error!(
                    "the elasticsearch backend takes one --url (list the cluster's nodes in it), \
                     not {}",
                    urls.len()
                ))
                .usage()
            }
        };
        EsUrl::parse(url).usage()
    }

    pub(super) fn parse(url: &str) -> error::Result<EsUrl> {
        let shown = redact(url);
        let expected = "expected elasticsearch://[user:password@]host:port[,host:port...][/index] \
                        (elasticsearchs:// for HTTPS; opensearch:// and opensearchs:// alike)";
        let parts = Parts::of(url)
            .ok_or_else(|| error!("{shown:?} is not an Elasticsearch URL; {expected}"))?;
        let Some(&(scheme, tls)) = SCHEMES.iter().find(|(s, _)| *s == parts.scheme) else {
            return Err(error!("{shown:?} is not an Elasticsearch URL; {expected}"));
        };
        if parts.tail.contains(['?', '#']) {
            return Err(error!(
                "Elasticsearch URL {shown:?}: takes no ?query or #fragment (write ? and # in a \
                 password as %3F and %23)"
            ));
        }
        let credentials = parts
            .userinfo
            .map(|u| user_password(u, "Elasticsearch URL", &shown))
            .transpose()?;
        // Not naming the host it refuses: with an `@` after a `/`, what reads as the hosts may be
        // a password.
        let hosts = host_list(parts.hosts, DEFAULT_PORT).map_err(|_| {
            error!("Elasticsearch URL {shown:?}: expected host:port[,host:port...] before the path")
        })?;
        let path = parts.tail.strip_prefix('/').unwrap_or(parts.tail);
        let path = path.strip_suffix('/').unwrap_or(path);
        let index = if path.is_empty() {
            DEFAULT_INDEX.to_owned()
        } else {
            index_name(path).ok_or_else(|| {
                error!(
                    "Elasticsearch URL {shown:?}: the path names the index, 1 to \
                     {MAX_INDEX_BYTES} lowercase letters, digits and `-_.+`, not starting with \
                     `-`, `_` or `+`"
                )
            })?
        };
        Ok(EsUrl {
            credentials,
            hosts,
            tls,
            index,
            scheme,
        })
    }

    /// The URL without credentials: where the locks live.
    pub(super) fn location(&self) -> String {
        format!("{}://{}/{}", self.scheme, self.hosts.join(","), self.index)
    }
}

/// `path` as an index name both servers take (a subset of their rules: no upper case, none of
/// `\/*?"<>|,#:` or spaces, not `.` or `..`, not starting with `-`, `_` or `+`).
fn index_name(path: &str) -> Option<String> {
    let ok = !path.is_empty()
        && path.len() <= MAX_INDEX_BYTES
        && path != "."
        && path != ".."
        && !path.starts_with(['-', '_', '+'])
        && path
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.+".contains(&b));
    ok.then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_hosts_credentials_tls_and_the_index() {
        let url =
            EsUrl::parse("elasticsearchs://alice:s%40cret@h1:9201,h2,[::1]:9202/locks").unwrap();
        assert_eq!(url.credentials, Some(("alice".into(), "s@cret".into())));
        assert_eq!(url.hosts, ["h1:9201", "h2:9200", "[::1]:9202"]);
        assert!(url.tls);
        assert_eq!(url.index, "locks");
        assert_eq!(
            url.location(),
            "elasticsearchs://h1:9201,h2:9200,[::1]:9202/locks"
        );
        let plain = EsUrl::parse("opensearch://127.0.0.1:1").unwrap();
        assert!(!plain.tls && plain.credentials.is_none());
        assert_eq!(plain.index, DEFAULT_INDEX);
        assert!(EsUrl::parse("opensearchs://h/").unwrap().tls);
    }

    #[test]
    fn malformed_urls_are_refused_without_showing_the_password() {
        for bad in [
            "redis://h:1",
            "http://h:1",
            "elasticsearch://",
            "elasticsearch://h:notaport",
            "elasticsearch://h:0",
            "elasticsearch://h1,,h2",
            "elasticsearch://h:1/Upper",
            "elasticsearch://h:1/a/b",
            "elasticsearch://h:1/_x",
            "elasticsearch://user@h:1",
            "elasticsearch://h:1?x=y",
        ] {
            assert!(EsUrl::parse(bad).is_err(), "{bad}");
        }
        for url in [
            "elasticsearch://bob:hunter2@h:x",
            "opensearch://bob:hunter2@h:1/X",
        ] {
            let err = EsUrl::parse(url).unwrap_err();
            assert!(!format!("{err:#}").contains("hunter2"), "{err:#}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_url_text_parses_or_is_refused(text in "(elasticsearchs?://)?\\PC{0,60}") {
            let _ = EsUrl::parse(&text);
        }

        #[test]
        fn no_message_shows_a_password(url in dlock_core::url::with_password()) {
            let url = url.replacen("redis://", "elasticsearch://", 1).replacen("zk://", "opensearchs://", 1);
            match EsUrl::parse(&url) {
                Ok(parsed) => proptest::prop_assert!(!parsed.location().contains("SECRET")),
                Err(e) => proptest::prop_assert!(!format!("{e:#}").contains("SECRET"), "{}", e),
            }
        }
    }
}
