//! Why a Redis server did not answer as hoped, in words a user can act on: every failed call
//! becomes a `Fault`, whose kind decides whether dlock rides it out (a server that is down may come
//! back) or gives up (bad credentials, a missing permission, not a Redis server).

use std::io;
use std::time::Duration;

use dlock_core::error;
use redis::RedisError;

use dlock_core::lock::escaped;
use dlock_core::report::connection_failure;

/// Why one server did not answer as hoped.
#[derive(Debug, Clone)]
pub(super) struct Fault {
    addr: String,
    pub(super) kind: FaultKind,
    detail: String,
}

/// The detail of an `Auth` fault whose URL gave no password (see `Fault::without_password`).
const WITHOUT_PASSWORD: &str = "no password given";

#[derive(Debug, Clone, Copy)]
pub(super) enum FaultKind {
    /// Unreachable, timed out, connection broken: may come back.
    Down,
    /// The server refused our credentials (or wants some).
    Auth,
    /// The server answered with an error (a script error, out of memory, read-only replica...).
    Refused,
    /// dlock's scripts refused a key of this lock, and only of this lock: a fencing counter out of
    /// range, a key of another type than dlock keeps there (another client wrote it).
    BadKey,
    /// Not a Redis server (or not one speaking TLS, for rediss://).
    Protocol,
    /// The ACL user may not run a command dlock needs.
    NoPermission,
    /// The sentinels monitor no master of the name given.
    NoMaster,
    /// The master granted or renewed, but too few replicas acknowledged it in time (`--replicas`).
    Unreplicated,
    /// A cluster node: the slot is served by another node (`SLOT HOST:PORT` in the detail).
    Moved,
    /// A cluster node: the slot is being moved, ask the node named once (`SLOT HOST:PORT`).
    Ask,
    /// A cluster node: the slot is half moved, try again shortly.
    TryAgain,
    /// The server answers but cannot serve the lock now: the node the sentinels name is (still) a
    /// replica, loading its data or without its master (a failover under way), or a cluster kept
    /// redirecting the lock's calls (its slot being moved). Like `Down`, waiting may cure it; the
    /// backend is not counted out for it: `-n` finds the lock busy for now, a waiter waits.
    NotNow,
}

impl Fault {
    /// A fault of the server at `addr` (`host:port`).
    pub(super) fn new(addr: &str, kind: FaultKind, detail: String) -> Fault {
        Fault {
            addr: addr.to_owned(),
            kind,
            detail,
        }
    }

    /// What `e`, met by a call to the server at `addr` that had `timeout`, says about the server;
    /// `stopped`: a stop signal was caught (the caller's `Stop`), which interrupts calls too.
    pub(super) fn classify(addr: &str, e: &RedisError, timeout: Duration, stopped: bool) -> Fault {
        let fault = |kind, detail| Fault::new(addr, kind, detail);
        // A server with a password answers a client without one with NOAUTH, or (for commands
        // with many arguments, like ours) with "Protocol error: unauthenticated ...".
        if e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
            || e.to_string().contains("unauthenticated")
        {
            return fault(FaultKind::Auth, String::new());
        }
        match e.code() {
            Some("MOVED") => return fault(FaultKind::Moved, e.detail().unwrap_or("").to_owned()),
            Some("ASK") => return fault(FaultKind::Ask, e.detail().unwrap_or("").to_owned()),
            Some("TRYAGAIN") => {
                return fault(
                    FaultKind::TryAgain,
                    "a slot is being moved between cluster nodes".into(),
                )
            }
            Some("CLUSTERDOWN") => {
                return fault(
                    FaultKind::Down,
                    escaped(e.detail().unwrap_or("the cluster is down"), 300),
                )
            }
            _ => {}
        }
        if matches!(e.code(), Some("NOPERM")) {
            // The server's own words, without the client's name for the error's kind (`NoPerm:`).
            let detail = e
                .detail()
                .unwrap_or("this user lacks a permission dlock needs");
            return fault(FaultKind::NoPermission, detail.to_owned());
        }
        if e.kind() == redis::ErrorKind::Parse {
            return fault(
                FaultKind::Protocol,
                "does not speak the Redis protocol".into(),
            );
        }
        if let Some(io) = io_error_of(e) {
            return fault(FaultKind::Down, describe_io(io, timeout, stopped));
        }
        if e.to_string().contains("corrupt message") {
            return fault(
                FaultKind::Protocol,
                "did not answer the TLS handshake (a plain redis:// server?)".into(),
            );
        }
        if e.is_io_error() || e.is_connection_dropped() {
            return fault(FaultKind::Down, e.to_string());
        }
        // dlock's scripts refuse with a message of their own (a broken fencing counter, a key of
        // the wrong type).
        if let (Some("DLOCK"), Some(detail)) = (e.code(), e.detail()) {
            return fault(FaultKind::BadKey, escaped(detail, 300));
        }
        fault(FaultKind::Refused, e.to_string())
    }

    /// Whether waiting cannot cure it: anything but a server that is down.
    pub(super) fn is_fatal(&self) -> bool {
        !matches!(
            self.kind,
            FaultKind::Down | FaultKind::TryAgain | FaultKind::NotNow
        )
    }

    /// Whether the server answered, but cannot serve the lock now (see `FaultKind::NotNow`).
    pub(super) fn is_not_now(&self) -> bool {
        matches!(self.kind, FaultKind::NotNow)
    }

    /// How it failed, without where.
    pub(super) fn detail(&self) -> &str {
        &self.detail
    }

    /// A failover under way, as a sentinel-managed master shows it: a node that is now a replica
    /// (READONLY), still loading its data, or without its master: reconnect to whichever node the
    /// sentinels name. (For a plain `redis://` address these stay errors: the URL names a replica.)
    pub(super) fn failover(addr: &str, e: &RedisError) -> Option<Fault> {
        matches!(e.code(), Some("READONLY" | "LOADING" | "MASTERDOWN"))
            .then(|| Fault::new(addr, FaultKind::NotNow, escaped(&e.to_string(), 300)))
    }

    /// This fault, met by a connection whose URL gives no password: a refused authentication
    /// then says a password is needed rather than to check one never given.
    pub(super) fn without_password(mut self) -> Fault {
        if matches!(self.kind, FaultKind::Auth) {
            self.detail = WITHOUT_PASSWORD.into();
        }
        self
    }

    pub(super) fn to_error(&self) -> error::Error {
        match self.kind {
            FaultKind::Down => error!("cannot reach redis at {}: {}", self.addr, self.detail),
            FaultKind::Auth if self.detail == WITHOUT_PASSWORD => error!(
                "authentication failed at redis {}: {}",
                self.addr,
                dlock_core::url::password_needed()
            ),
            FaultKind::Auth => error!(
                "authentication failed at redis {}: {}",
                self.addr,
                dlock_core::url::credentials_hint()
            ),
            FaultKind::Protocol => error!("the server at {} {}", self.addr, self.detail),
            FaultKind::NoPermission => error!(
                "{} at {}: dlock needs the permissions listed in its README (Redis ACL)",
                self.detail, self.addr
            ),
            FaultKind::NoMaster => error!("the redis sentinels at {} {}", self.addr, self.detail),
            FaultKind::NotNow => error!(
                "redis at {} cannot serve the lock now: {}",
                self.addr, self.detail
            ),
            FaultKind::Unreplicated | FaultKind::TryAgain => {
                error!("redis at {}: {}", self.addr, self.detail)
            }
            // Only a plain redis:// URL meets these unfollowed: it names a cluster node.
            FaultKind::Moved | FaultKind::Ask => error!(
                "redis at {} is a node of a Redis Cluster that serves other slots: give the \
                 cluster as --url redis+cluster://{}",
                self.addr, self.addr
            ),
            FaultKind::Refused | FaultKind::BadKey => {
                error!(
                    "redis at {} answered with an error: {}",
                    self.addr, self.detail
                )
            }
        }
    }
}

/// The first of `faults` that waiting cannot cure.
pub(super) fn first_fatal(faults: &[Fault]) -> Option<&Fault> {
    faults.iter().find(|f| f.is_fatal())
}

/// The messages of `faults` in one line.
pub(super) fn describe(faults: &[Fault]) -> String {
    let why: Vec<String> = faults.iter().map(|f| f.to_error().to_string()).collect();
    why.join("; ")
}

/// The I/O error under a redis error. The crate keeps it in an `Arc`, which is what `source`
/// shows, so look inside that.
fn io_error_of(e: &RedisError) -> Option<&io::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let source = std::error::Error::source(e)?;
    match source.downcast_ref::<Shared>() {
        Some(shared) => shared.downcast_ref::<io::Error>(),
        None => source.downcast_ref::<io::Error>(),
    }
}

/// Whether a read was cut short by a signal (the call's alarm, or one for the supervisor).
pub(super) fn is_interrupted(e: &RedisError) -> bool {
    io_error_of(e).is_some_and(|io| io.kind() == io::ErrorKind::Interrupted)
}

/// An I/O failure in a few words: `connection refused`, `no answer within 5s`.
fn describe_io(e: &io::Error, timeout: Duration, stopped: bool) -> String {
    match e.kind() {
        io::ErrorKind::Interrupted if stopped => "interrupted".into(),
        // Otherwise the call's alarm went off: its budget is spent.
        io::ErrorKind::Interrupted => {
            connection_failure(&io::ErrorKind::TimedOut.into(), Some(timeout))
        }
        _ => {
            let text = connection_failure(e, Some(timeout));
            if text.contains("certificate") {
                format!("{text} (rediss:// trusts the system CAs, or SSL_CERT_FILE when set)")
            } else {
                text
            }
        }
    }
}
