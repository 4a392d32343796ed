//! What a command line asks of a backend (`BackendConfig`) and the checks made of it before any
//! store is opened; `open` (backend/mod.rs) turns it into the store it names.

use std::time::Duration;

use super::{registry, stop, BackendKind};
use crate::exit::FailWith;

/// Where and how to reach a backend, from the command line and environment.
#[derive(Clone, Debug)]
pub struct BackendConfig {
    pub kind: BackendKind,
    /// `--url`, possibly given several times (Redlock); empty means the backend's default.
    pub urls: Vec<String>,
    /// How long to try to reach a server (network backends).
    pub connect_timeout: Duration,
    /// Create the place locks are kept if it is missing (the file backend's default directory;
    /// one given by the user must exist): `run` only, so `status`, `list` and `release` leave
    /// nothing behind.
    pub create: bool,
    /// Redis: how many replicas must acknowledge each acquisition and renewal (`--replicas`).
    pub replicas: u32,
    /// When to give up a connection being made (a signal while acquiring).
    pub stop: stop::Stop,
    /// The file backend, run by root: the uids besides root whose lock directories and files it
    /// may use (`--trust-owner`).
    pub trust_owners: Vec<u32>,
}

/// `--replicas N` or a URL's `?replicas=N` for a backend that has no replicas to wait for: a
/// usage error naming it (DLOCK_REPLICAS, set fleet-wide, was dropped for it by then).
pub(super) fn replicas_only_where_taken(config: &BackendConfig) -> anyhow::Result<()> {
    if config.kind.descriptor().replicas {
        return Ok(());
    }
    let kind = config.kind.as_str();
    let url = config
        .urls
        .iter()
        .find(|url| config.kind.takes(url) && crate::url::has_parameter(url, "replicas"));
    let why = match url {
        _ if config.replicas > 0 => "--replicas (DLOCK_REPLICAS)".to_owned(),
        Some(url) => format!("replicas= in {}", crate::url::redact(url)),
        None => return Ok(()),
    };
    Err(anyhow::anyhow!(
        "{why} is for {}, not {kind}",
        registry::replicas_help()
    ))
    .fail_with(crate::exit::Failure::Usage)
}

#[cfg(test)]
mod tests {
    use super::BackendConfig;
    use crate::backend::{open, BackendKind};
    use crate::url::{redact, with_password};
    use std::time::Duration;

    /// `kind` at `url`, opened without making anything and giving up on a server at once.
    fn opening(kind: BackendKind, url: &str) -> BackendConfig {
        BackendConfig {
            kind,
            urls: vec![url.to_owned()],
            connect_timeout: Duration::from_millis(1),
            create: false,
            replicas: 0,
            stop: Default::default(),
            trust_owners: vec![],
        }
    }

    /// `takes` says what each backend's own parser says of an address: usage error or not.
    #[test]
    fn backends_take_the_urls_takes_says() {
        let urls = [
            "/nonexistent/dlock-test",
            "relative/dir",
            "file:///nonexistent/dlock-test",
            "redis://127.0.0.1:1",
            "rediss://127.0.0.1:1",
            "redis+sentinel://127.0.0.1:1/main",
            "redis+cluster://127.0.0.1:1,127.0.0.1:2",
            "rediss+cluster://127.0.0.1:1",
            "zk://127.0.0.1:1",
            "http://127.0.0.1:1",
            "unix:///nonexistent.sock",
            "mysql://127.0.0.1:1/db",
            "mariadb://127.0.0.1:1/db",
        ];
        let kinds = [
            BackendKind::File,
            BackendKind::Redis,
            BackendKind::Zk,
            BackendKind::Mysql,
        ];
        for kind in kinds.into_iter().filter(|k| k.descriptor().built) {
            for url in urls {
                let refused = match open(&opening(kind, url)) {
                    Ok(_) => false,
                    Err(e) => crate::exit::status_of(&e) == crate::exit::Status::Usage,
                };
                assert_eq!(kind.takes(url), !refused, "{kind:?} {url}");
            }
        }
    }

    /// What the file and ZooKeeper backends say about `url` when opened (neither connects when it
    /// opens), or where they keep their locks. The file backend only for other schemes: a plain
    /// path is a directory's name, which it shows as given.
    fn messages_about(url: &str) -> Vec<String> {
        let mut messages = vec![redact(url)];
        let mut kinds = vec![BackendKind::Zk];
        if url.contains("://") && !url.starts_with("file://") {
            kinds.push(BackendKind::File);
        }
        for kind in kinds {
            match open(&opening(kind, url)) {
                Ok(b) => messages.push(b.location()),
                Err(e) => messages.push(format!("{e:#}")),
            }
        }
        messages
    }

    proptest::proptest! {
        #[test]
        fn no_message_shows_a_password(url in with_password()) {
            for message in messages_about(&url) {
                proptest::prop_assert!(!message.contains("SECRET"), "{} gave {}", url, message);
            }
        }
    }
}
