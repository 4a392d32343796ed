//! The stores as the command sees them: the contract (dlock-core's, re-exported here), the
//! registry (registry.rs: one descriptor per store, for the command line, the help, the man pages,
//! the completions and `--version`, with the store's `open`: the one place that names each
//! store's crate), and `open`.

use crate::failure::FailWith;

mod registry;

/// How to reach a store, as every store's `open` takes it.
pub use dlock_core::backend::BackendConfig as StoreConfig;
pub use dlock_core::backend::*;
pub use registry::{
    backend_help, by_scheme, kind_named, kind_of_url, not_built, url_help, version, BackendKind,
    KindParser,
};

/// Which store holds the locks, and how to reach it: from the command line and environment.
#[derive(Clone, Debug)]
pub struct BackendConfig {
    pub kind: BackendKind,
    pub store: StoreConfig,
}

/// Opens the configured backend (its descriptor's `open`). Errors are tagged with the exit status
/// they map to (usage for a malformed address, backend-unavailable for one that cannot be used).
pub fn open(config: &BackendConfig) -> anyhow::Result<Box<dyn Backend>> {
    replicas_only_where_taken(config.kind, &config.store)?;
    let descriptor = config.kind.descriptor();
    match descriptor.open {
        Some(open) => open(&config.store),
        // The command line refuses the name of a backend not built; this is for any other way in.
        None => {
            Err(anyhow::anyhow!(not_built(descriptor))).fail_with(crate::failure::Failure::Usage)
        }
    }
}

/// `--replicas N` or a URL's `?replicas=N` for a backend that has no replicas to wait for: a
/// usage error naming it (DLOCK_REPLICAS, set fleet-wide, was dropped for it by then).
fn replicas_only_where_taken(kind: BackendKind, config: &StoreConfig) -> anyhow::Result<()> {
    if kind.descriptor().replicas {
        return Ok(());
    }
    let url = config
        .urls
        .iter()
        .find(|url| kind.takes(url) && crate::url::has_parameter(url, "replicas"));
    let kind = kind.as_str();
    let why = match url {
        _ if config.replicas > 0 => "--replicas (DLOCK_REPLICAS)".to_owned(),
        Some(url) => format!("replicas= in {}", crate::url::redact(url)),
        None => return Ok(()),
    };
    Err(anyhow::anyhow!(
        "{why} is for {}, not {kind}",
        registry::replicas_help()
    ))
    .fail_with(crate::failure::Failure::Usage)
}

#[cfg(test)]
mod tests {
    use super::{open, BackendConfig, BackendKind, StoreConfig};
    use crate::url::{redact, with_password};
    use std::time::Duration;

    /// `url`, opened without making anything and giving up on a server at once.
    fn opening(kind: BackendKind, url: &str) -> BackendConfig {
        BackendConfig {
            kind,
            store: StoreConfig {
                urls: vec![url.to_owned()],
                connect_timeout: Duration::from_millis(1),
                create: false,
                replicas: 0,
                stop: Default::default(),
                trust_owners: vec![],
            },
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
        for kind in kinds.into_iter().filter(|k| k.descriptor().built()) {
            for url in urls {
                let refused = match open(&opening(kind, url)) {
                    Ok(_) => false,
                    Err(e) => crate::failure::status_of(&e) == crate::exit::Status::Usage,
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
