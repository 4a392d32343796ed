//! The address the user gives: `etcd://[user:password@]host:port[,host:port...]`, or `etcds://`
//! for TLS, parsed and checked before anything connects. Credentials never appear in a message; a
//! malformed address is a usage error (exit 64).

use dlock_core::error;
use dlock_core::error::{Context, FailAs};

use dlock_core::url::{host_list, redact, user_password};

/// The server dlock tries without a `--url`.
const DEFAULT_URL: &str = "etcd://127.0.0.1:2379";
const DEFAULT_PORT: u16 = 2379;

/// A parsed `etcd://` or `etcds://` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EtcdUrl {
    pub(super) credentials: Option<(String, String)>,
    /// `host:port`, each tried (as etcdctl's `--endpoints` are).
    pub(super) hosts: Vec<String>,
    pub(super) tls: bool,
}

impl EtcdUrl {
    /// The address from the `--url`s given (none: the default), tagged as a usage error when it is
    /// malformed or when there is more than one.
    pub(super) fn from_urls(urls: &[String]) -> error::Result<EtcdUrl> {
        let url = match urls {
            [] => DEFAULT_URL,
            [url] => url.as_str(),
            _ => {
                return Err(error!(
                    "the etcd backend takes one --url (list the cluster's endpoints in it), not {}",
                    urls.len()
                ))
                .usage()
            }
        };
        EtcdUrl::parse(url).usage()
    }

    fn parse(url: &str) -> error::Result<EtcdUrl> {
        let shown = redact(url);
        let (tls, rest) = if let Some(rest) = url.strip_prefix("etcd://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("etcds://") {
            (true, rest)
        } else {
            return Err(error!(
                "{shown:?} is not an etcd URL; expected etcd://[user:password@]host:port[,host:port...] (etcds:// for TLS)"
            ));
        };
        if rest.contains(['?', '#']) {
            return Err(error!(
                "etcd URL {shown:?}: etcd:// URLs take no ?query or #fragment (write ? and # in a \
                 password as %3F and %23)"
            ));
        }
        // The credentials end at the last `@`, as `redact` hides them.
        let (userinfo, hosts) = match rest.rfind('@') {
            Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
            None => (None, rest),
        };
        let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
        if hosts.contains('/') {
            return Err(error!(
                "etcd URL {shown:?}: etcd:// URLs take no path (locks live under /dlock/)"
            ));
        }
        let credentials = userinfo
            .map(|u| user_password(u, "etcd URL", &shown))
            .transpose()?;
        let hosts =
            host_list(hosts, DEFAULT_PORT).with_context(|| format!("etcd URL {shown:?}"))?;
        Ok(EtcdUrl {
            credentials,
            hosts,
            tls,
        })
    }

    pub(super) fn hosts(&self) -> String {
        self.hosts.join(",")
    }

    /// What the gRPC client connects to: `http://host:port` or `https://host:port`.
    pub(super) fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.hosts
            .iter()
            .map(|h| format!("{scheme}://{h}"))
            .collect()
    }

    /// The URL without credentials.
    pub(super) fn location(&self) -> String {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        format!("{scheme}://{}", self.hosts())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_hosts_credentials_and_tls() {
        let url = EtcdUrl::parse("etcds://alice:s%40cret@h1:2379,h2,[::1]:2380/").unwrap();
        assert_eq!(url.credentials, Some(("alice".into(), "s@cret".into())));
        assert_eq!(url.hosts, ["h1:2379", "h2:2379", "[::1]:2380"]);
        assert!(url.tls);
        assert_eq!(url.location(), "etcds://h1:2379,h2:2379,[::1]:2380");
        assert_eq!(url.endpoints()[0], "https://h1:2379");
        let plain = EtcdUrl::parse("etcd://127.0.0.1:1").unwrap();
        assert_eq!(plain.endpoints(), ["http://127.0.0.1:1"]);
        assert!(plain.credentials.is_none());
    }

    #[test]
    fn malformed_urls_are_refused_without_showing_the_password() {
        for bad in [
            "redis://h:1",
            "http://h:1",
            "etcd://",
            "etcd://h:notaport",
            "etcd://h:0",
            "etcd://h1,,h2",
            "etcd://h:1/prefix",
            "etcd://user@h:1",
            "etcd://u:p%zz@h:1",
            "etcd://h:1?x=y",
            "etcd://[::1",
        ] {
            assert!(EtcdUrl::parse(bad).is_err(), "{bad}");
        }
        for url in ["etcd://bob:hunter2@h:x", "etcd://bob:hunter2@h:1/x"] {
            let err = EtcdUrl::parse(url).unwrap_err();
            assert!(!format!("{err:#}").contains("hunter2"), "{err:#}");
        }
    }

    proptest::proptest! {
        /// URLs from the command line: parsed or refused, never a panic; no password in a message.
        #[test]
        fn any_url_text_parses_or_is_refused(text in "(etcds?://)?\\PC{0,60}") {
            let _ = EtcdUrl::parse(&text);
        }

        #[test]
        fn no_message_shows_a_password(url in dlock_core::url::with_password()) {
            let url = url.replacen("redis://", "etcd://", 1).replacen("zk://", "etcds://", 1);
            match EtcdUrl::parse(&url) {
                Ok(parsed) => proptest::prop_assert!(!parsed.location().contains("SECRET")),
                Err(e) => proptest::prop_assert!(!format!("{e:#}").contains("SECRET"), "{}", e),
            }
        }
    }
}
