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
