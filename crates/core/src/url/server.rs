//! The servers of a URL: `host:port`, `host` or `[v6]:port`, alone or in a comma-separated list
//! (ZooKeeper's and etcd's), as every backend reads them.

use crate::error;

/// The servers of an `etcd://` or `zk://` URL, `host:port[,host:port...]`: each as `server`
/// reads it, as `host:port`. A message names the host it refuses (never the credentials, which the
/// caller has taken off).
pub fn host_list(hosts: &str, default_port: u16) -> error::Result<Vec<String>> {
    hosts
        .split(',')
        .map(|h| {
            server(h, Some(default_port))
                .map(|s| s.to_string())
                .map_err(|bad| error!("{}", bad.words(h)))
        })
        .collect()
}

/// One server of a URL, its host without brackets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Server {
    /// `host:port`, `[v6]:port`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// Why `server` refused a `host:port`; each backend words it for its own URL (`words` is the
/// host lists' wording).
#[derive(Debug, PartialEq, Eq)]
pub enum BadServer<'a> {
    /// A `[` without its `]`.
    Unclosed,
    /// Something other than `:port` after `[v6]`, or an IPv6 address without brackets.
    Malformed,
    NoHost,
    /// A host with a character no host name has (spaces, controls, `@`, `/`, `\`, `%`, and a
    /// bracket inside the brackets or without them), as written.
    BadHost(&'a str),
    /// A port that is not 1 to 65535, as written.
    BadPort(&'a str),
    /// No port where the URL has no default one.
    NoPort,
}

impl BadServer<'_> {
    /// The refusal of `text` in words.
    pub fn words(&self, text: &str) -> String {
        match self {
            BadServer::Unclosed => format!("unclosed [ in host {text:?}"),
            BadServer::Malformed => format!("bad host {text:?}"),
            BadServer::NoHost => format!("empty host in {text:?}"),
            BadServer::BadHost(host) => format!("bad host {host:?}"),
            BadServer::BadPort(port) => format!("bad port {port:?} in host {text:?}"),
            BadServer::NoPort => format!("no port in host {text:?}"),
        }
    }
}

/// `host:port`, `host`, `[v6]:port` or `[v6]`, the port `default_port` when none is written
/// (`None`: a port must be). An IPv6 address goes in brackets: `fe80::1:80` could be either.
pub fn server(text: &str, default_port: Option<u16>) -> Result<Server, BadServer<'_>> {
    let (host, written, port) = if let Some(v6) = text.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or(BadServer::Unclosed)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(BadServer::Malformed)?),
        };
        let written = &text[..addr.len() + 2];
        (addr, written, port)
    } else {
        match text.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => return Err(BadServer::Malformed),
            Some((host, port)) => (host, host, Some(port)),
            None => (text, text, None),
        }
    };
    if host.is_empty() {
        return Err(BadServer::NoHost);
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "@/\\%[]".contains(c))
    {
        return Err(BadServer::BadHost(written));
    }
    let port = match port {
        None => default_port.ok_or(BadServer::NoPort)?,
        Some(p) => p
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or(BadServer::BadPort(p))?,
    };
    Ok(Server {
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::{host_list, server, BadServer, Server};

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
            ("[a b]:1", "bad host \"[a b]\""),
            ("[[]", "bad host \"[[]\""),
            ("a]b:1", "bad host \"a]b\""),
            ("fe80::1", "bad host \"fe80::1\""),
            ("fe80::1:80", "bad host \"fe80::1:80\""),
        ] {
            let err = host_list(bad, 7).expect_err(bad);
            assert_eq!(format!("{err:#}"), message, "{bad}");
        }
    }

    #[test]
    fn a_server_is_its_host_without_brackets_and_its_port() {
        let s = |host: &str, port| Server {
            host: host.into(),
            port,
        };
        assert_eq!(server("h:1", None), Ok(s("h", 1)));
        assert_eq!(server("h", Some(7)), Ok(s("h", 7)));
        assert_eq!(server("[::1]:9", None), Ok(s("::1", 9)));
        assert_eq!(server("[::1]", Some(7)), Ok(s("::1", 7)));
        assert_eq!(server("[::1]:9", None).unwrap().to_string(), "[::1]:9");
        assert_eq!(server("h", None), Err(BadServer::NoPort));
        assert_eq!(server("[::1]", None), Err(BadServer::NoPort));
        assert_eq!(server("", Some(7)), Err(BadServer::NoHost));
        assert_eq!(server("h:", Some(7)), Err(BadServer::BadPort("")));
        assert_eq!(server("h:-1", Some(7)), Err(BadServer::BadPort("-1")));
        assert_eq!(server("::1", Some(7)), Err(BadServer::Malformed));
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
    }
}
