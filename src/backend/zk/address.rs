//! The address the user gives: `zk://[user:password@]host:port[,host:port...][/chroot]`, parsed
//! and checked before anything connects. Credentials never appear in a message; a malformed
//! address is a usage error (exit 64).

use anyhow::{anyhow, Context};

use super::naming::allowed;
use crate::exit::{FailWith, Failure};
use crate::text::percent_decode;
use crate::url::redact;

/// The ensemble dlock tries without a `--url`.
const DEFAULT_URL: &str = "zk://127.0.0.1:2181";

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
    pub(super) fn from_urls(urls: &[String]) -> anyhow::Result<ZkUrl> {
        let url = match urls {
            [] => DEFAULT_URL,
            [url] => url.as_str(),
            _ => {
                return Err(anyhow!(
                    "the zk backend takes one --url (list the ensemble's hosts in it), not {}",
                    urls.len()
                ))
                .fail_with(Failure::Usage)
            }
        };
        ZkUrl::parse(url).fail_with(Failure::Usage)
    }

    fn parse(url: &str) -> anyhow::Result<ZkUrl> {
        let shown = redact(url);
        let rest = url.strip_prefix("zk://").ok_or_else(|| {
            anyhow!("{shown:?} is not a ZooKeeper URL; expected zk://[user:password@]host:port[,host:port...][/chroot]")
        })?;
        // `redact` hides everything after a `?` or `#`, and a query or fragment means nothing here.
        if rest.contains(['?', '#']) {
            return Err(anyhow!(
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
        let credentials = match userinfo {
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').ok_or_else(|| {
                    anyhow!("ZooKeeper URL {shown:?}: credentials must be user:password")
                })?;
                // Not a word of the credentials in messages, only what is wrong with them.
                let user = percent_decode(user).ok_or_else(|| {
                    anyhow!("ZooKeeper URL {shown:?}: bad percent escape in the user name")
                })?;
                let password = percent_decode(password).ok_or_else(|| {
                    anyhow!("ZooKeeper URL {shown:?}: bad percent escape in the password")
                })?;
                if user.is_empty() {
                    return Err(anyhow!("ZooKeeper URL {shown:?}: the user name is empty"));
                }
                Some((user, password))
            }
            None => None,
        };
        let hosts = hosts
            .split(',')
            .map(|h| parse_host(h).with_context(|| format!("ZooKeeper URL {shown:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let chroot = chroot.trim_end_matches('/');
        if !chroot.is_empty()
            && chroot[1..]
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == ".." || c.chars().any(|c| !allowed(c)))
        {
            return Err(anyhow!(
                "ZooKeeper URL {shown:?}: the chroot {chroot:?} is not a valid znode path"
            ));
        }
        Ok(ZkUrl {
            credentials,
            hosts,
            chroot: chroot.to_owned(),
        })
    }

    pub(super) fn hosts(&self) -> String {
        self.hosts.join(",")
    }

    /// The URL without credentials.
    pub(super) fn location(&self) -> String {
        format!("zk://{}{}", self.hosts(), self.chroot)
    }
}

/// `host:port` with the port defaulting to 2181; `[v6]:port` too.
fn parse_host(h: &str) -> anyhow::Result<String> {
    let (host, port) = if let Some(v6) = h.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| anyhow!("unclosed [ in host {h:?}"))?;
        (format!("[{addr}]"), after.strip_prefix(':'))
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
        .any(|c| c.is_whitespace() || c.is_control() || c == '@')
    {
        return Err(anyhow!("bad host {host:?}"));
    }
    let port: u16 = match port {
        None => 2181,
        Some(p) => p
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| anyhow!("bad port {p:?} in host {h:?}"))?,
    };
    Ok(format!("{host}:{port}"))
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
