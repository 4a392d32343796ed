//! The address the user gives: `zk://[user:password@]host:port[,host:port...][/chroot]`, parsed
//! and checked before anything connects. Credentials never appear in a message; a malformed
//! address is a usage error (exit 64).

use dlock_core::error;
use dlock_core::error::{Context, FailAs};

use super::naming::allowed;
use dlock_core::url::{host_list, redact, user_password};

/// The ensemble dlock tries without a `--url`.
const DEFAULT_URL: &str = "zk://127.0.0.1:2181";
const DEFAULT_PORT: u16 = 2181;

/// A parsed `zk://[user:password@]host:port[,host:port...][/chroot]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ZkUrl {
    pub(super) credentials: Option<(String, String)>,
    hosts: Vec<String>,
    /// Empty, or an absolute path without a trailing slash.
    pub(super) chroot: String,
}

impl ZkUrl {
    /// The address from the `--url`s given (none: the default), tagged as a usage error when it is
    /// malformed or when there is more than one.
    pub(super) fn from_urls(urls: &[String]) -> error::Result<ZkUrl> {
        let url = match urls {
            [] => DEFAULT_URL,
            [url] => url.as_str(),
            _ => {
                return Err(error!(
                    "the zk backend takes one --url (list the ensemble's hosts in it), not {}",
                    urls.len()
                ))
                .usage()
            }
        };
        ZkUrl::parse(url).usage()
    }

    fn parse(url: &str) -> error::Result<ZkUrl> {
        let shown = redact(url);
        let rest = url.strip_prefix("zk://").ok_or_else(|| {
            error!("{shown:?} is not a ZooKeeper URL; expected zk://[user:password@]host:port[,host:port...][/chroot]")
        })?;
        // `redact` hides everything after a `?` or `#`, and a query or fragment means nothing here.
        if rest.contains(['?', '#']) {
            return Err(error!(
                "ZooKeeper URL {shown:?}: zk:// URLs take no ?query or #fragment (write ? and # \
                 in a password as %3F and %23)"
            ));
        }
        // The credentials end at the last `@`, as `redact` hides them: a password may hold `/`
        // (then a chroot may not hold `@`).
        let (userinfo, rest) = match rest.rfind('@') {
            Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
            None => (None, rest),
        };
        let (hosts, chroot) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let credentials = userinfo
            .map(|u| user_password(u, "ZooKeeper URL", &shown))
            .transpose()?;
        let hosts =
            host_list(hosts, DEFAULT_PORT).with_context(|| format!("ZooKeeper URL {shown:?}"))?;
        let chroot = chroot.trim_end_matches('/');
        if !chroot.is_empty()
            && chroot[1..]
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".." || c.chars().any(|c| !allowed(c)))
        {
            return Err(error!(
                "ZooKeeper URL {shown:?}: the chroot {chroot:?} is not a valid znode path"
            ));
        }
        Ok(ZkUrl {
            credentials,
            hosts,
            chroot: chroot.to_owned(),
        })
    }

    /// The ensemble's servers, `host:port` each.
    pub(super) fn host_list(&self) -> &[String] {
        &self.hosts
    }

    pub(super) fn hosts(&self) -> String {
        self.hosts.join(",")
    }

    /// The URL without credentials.
    pub(super) fn location(&self) -> String {
        format!("zk://{}{}", self.hosts(), self.chroot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_hosts_credentials_and_chroot() {
        let url = ZkUrl::parse("zk://alice:s%40cret@h1:2181,h2,[::1]:2182/apps/x/").unwrap();
        assert_eq!(url.credentials, Some(("alice".into(), "s@cret".into())));
        assert_eq!(url.hosts, ["h1:2181", "h2:2181", "[::1]:2182"]);
        assert_eq!(url.chroot, "/apps/x");
        assert_eq!(url.location(), "zk://h1:2181,h2:2181,[::1]:2182/apps/x");
        assert_eq!(ZkUrl::parse("zk://h:1/").unwrap().chroot, "");
    }

    #[test]
    fn malformed_urls_are_refused_without_showing_the_password() {
        for bad in [
            "redis://h:1",
            "zk://",
            "zk://h:notaport",
            "zk://h:0",
            "zk://h1,,h2",
            "zk://h:1/a//b",
            "zk://h:1/a/../b",
            "zk://user@h:1",
            "zk://u:p%zz@h:1",
        ] {
            assert!(ZkUrl::parse(bad).is_err(), "{bad}");
        }
        let err = ZkUrl::parse("zk://bob:hunter2@h:x").unwrap_err();
        assert!(!format!("{err:#}").contains("hunter2"), "{err:#}");
    }

    proptest::proptest! {
        /// URLs from the command line: parsed or refused, never a panic.
        #[test]
        fn any_url_text_parses_or_is_refused(text in "(zk://)?\\PC{0,60}") {
            let _ = ZkUrl::parse(&text);
        }
    }
}
