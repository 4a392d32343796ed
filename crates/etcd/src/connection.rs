//! The connection to the cluster and how it fails: a gRPC client (`client`) of the endpoint that
//! answered first, on a small tokio runtime of its own, each call bounded by a timeout; and what
//! a failed call means for the user (exit 69 when the cluster cannot be reached or used), named by
//! the endpoints without credentials.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use dlock_core::error;
use dlock_core::error::{Context, FailAs};
use tonic::Code;

use super::address::EtcdUrl;
use super::client::{Client, Error};
use super::rpc::{KeyValue, RangeRequest, SortOrder, SortTarget};
use dlock_core::backend::stop::{Stop, STOPPED};
use dlock_sys::blocking;

/// How long one call may take once connected (a renewal bounds its own calls more tightly).
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The client and the runtime it runs on, shared by the backend and every lease it hands out.
pub(super) struct Connection {
    runtime: blocking::Runtime,
    url: EtcdUrl,
    connect_timeout: Duration,
    /// A client of the endpoint that answered last (see `open`).
    current: Mutex<Client>,
    /// The endpoints, for messages.
    pub(super) hosts: String,
}

impl Connection {
    /// Connects (authenticating with the URL's credentials, if any) within `connect_timeout`.
    /// Every endpoint is tried at once and the first to answer a first call is used (a client
    /// connects lazily, on its first call). An address that cannot be reached fails here, with
    /// exit 69, not at the first lock.
    /// A `stop` that comes meanwhile ends the attempt at once (exit 69 unless the caller reports
    /// why it stopped).
    pub(super) fn open(
        url: &EtcdUrl,
        connect_timeout: Duration,
        stop: &Stop,
    ) -> error::Result<Connection> {
        let hosts = url.hosts();
        // One worker: the client's connection task must run while dlock's threads wait elsewhere.
        let runtime = blocking::runtime(Some("dlock-etcd"))
            .context("cannot start the etcd client's runtime")?;
        let racing = first_to_answer(url, connect_timeout);
        let client = match runtime.block_on(stop.unless(racing)) {
            None => return Err(error!("cannot reach etcd at {hosts}: {STOPPED}")).unavailable(),
            Some(Ok(client)) => client,
            Some(Err(Fault::TimedOut(_))) => {
                return Err(error!(
                    "cannot reach etcd at {hosts} within {} (--connect-timeout)",
                    dlock_core::text::duration(connect_timeout)
                ))
                .unavailable()
            }
            Some(Err(fault)) if fault.is_unreachable() => {
                return Err(error!("cannot reach etcd at {hosts}: {fault}")).unavailable();
            }
            Some(Err(fault)) => {
                return Err(error!("cannot use etcd at {hosts}: {fault}")).unavailable();
            }
        };
        Ok(Connection {
            runtime,
            url: url.clone(),
            connect_timeout,
            current: Mutex::new(client),
            hosts,
        })
    }

    /// The client of the endpoint in use (cheap: clients share their connection).
    pub(super) fn client(&self) -> Client {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After a call found the endpoint in use unreachable: with several endpoints, the first of
    /// them to answer (within `timeout`) is used from now on. A single endpoint needs nothing:
    /// its channel reconnects by itself.
    pub(super) async fn fail_over(&self, timeout: Duration) {
        if self.url.hosts.len() < 2 {
            return;
        }
        if let Ok(client) = first_to_answer(&self.url, timeout.min(self.connect_timeout)).await {
            *self.current.lock().unwrap_or_else(|p| p.into_inner()) = client;
        }
    }

    pub(super) fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    /// Runs `call` on the runtime, bounded by `timeout`.
    pub(super) fn run<T>(
        &self,
        timeout: Duration,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Fault> {
        self.runtime()
            .block_on(async { bounded(timeout, call).await })
    }

    /// A failed call as the user sees it: what dlock was doing, where, and why; tagged for exit
    /// status 69.
    pub(super) fn fail(&self, fault: Fault, doing: &str) -> error::Error {
        let result: error::Result<()> = Err(error!("{doing} on etcd at {}: {fault}", self.hosts));
        match result.unavailable() {
            Err(e) => e,
            Ok(()) => unreachable!("built as an error"),
        }
    }
}

/// A client of each endpoint, all trying a first call at once; the first to answer wins. An
/// endpoint that answers with an error (a wrong password) ends the race with that error, since the
/// others would say the same; unreachable ones drop out, and when all have, the last reason wins.
async fn first_to_answer(url: &EtcdUrl, timeout: Duration) -> Result<Client, Fault> {
    let mut racing = tokio::task::JoinSet::new();
    for endpoint in url.endpoints() {
        let credentials = url.credentials.clone();
        let tls = url.tls;
        racing.spawn(bounded(timeout, async move {
            let client = Client::new(&endpoint, tls, timeout, credentials)?;
            client.authenticate().await?;
            // The cheapest call every server answers, to learn that this one does.
            let count = RangeRequest {
                count_only: true,
                ..RangeRequest::prefix("/dlock/")
            };
            client.range(count).await?;
            Ok(client)
        }));
    }
    let mut last = Fault::TimedOut(timeout);
    // Bounded: one result per endpoint.
    while let Some(joined) = racing.join_next().await {
        match joined {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(fault)) if fault.is_unreachable() => {
                if !matches!(fault, Fault::TimedOut(_)) || matches!(last, Fault::TimedOut(_)) {
                    last = fault;
                }
            }
            Ok(Err(fault)) => return Err(fault),
            Err(_) => {}
        }
    }
    Err(last)
}

/// Why a call failed.
#[derive(Debug)]
pub(super) enum Fault {
    /// No answer within the time given.
    TimedOut(Duration),
    /// The server answered with an error, or the connection failed.
    Failed(Error),
}

impl Fault {
    /// Whether the cluster could not be reached (as opposed to answering with an error).
    pub(super) fn is_unreachable(&self) -> bool {
        if self.is_lease_not_found() {
            return false;
        }
        match self {
            Fault::TimedOut(_) => true,
            Fault::Failed(e) => is_unreachable(e),
        }
    }

    /// Whether the server said the lease does not exist (expired or revoked).
    pub(super) fn is_lease_not_found(&self) -> bool {
        match self {
            Fault::Failed(Error::Status(s)) => s.message().contains("lease not found"),
            Fault::Failed(Error::LeaseNotFound) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::TimedOut(t) => write!(
                f,
                "no answer within {}",
                dlock_core::text::duration(Duration::from_millis(t.as_millis() as u64))
            ),
            Fault::Failed(e) => f.write_str(&why(e)),
        }
    }
}

/// `call`, bounded by `timeout`.
/// Most keys one page of `all_under` reads at first.
const PAGE_KEYS: i64 = 64;

/// Every key under `root`, in create-revision order as `RangeRequest::prefix` gives them, read a
/// page at a time, all at the revision of the first page, each page within `CALL_TIMEOUT`: one
/// read of a prefix whose values pass the largest answer dlock reads (4 MiB) failed whole. A page
/// still too large is read again in halves, down to one key (a single value that large fails).
pub(super) async fn all_under(client: &Client, root: &str) -> Result<Vec<KeyValue>, Fault> {
    let whole = RangeRequest::prefix(root);
    let mut from = whole.key.clone();
    let (mut revision, mut limit) = (0, PAGE_KEYS);
    let mut kvs = Vec::new();
    loop {
        let page = RangeRequest {
            key: from.clone(),
            revision,
            sort_order: SortOrder::Ascend as i32,
            sort_target: SortTarget::Key as i32,
            ..whole.clone().limit(limit)
        };
        let answer = match bounded(CALL_TIMEOUT, client.range(page)).await {
            Err(Fault::Failed(Error::Status(s))) if s.code() == Code::OutOfRange && limit > 1 => {
                limit /= 2;
                continue;
            }
            answer => answer?,
        };
        if revision == 0 {
            revision = answer.header.as_ref().map_or(0, |h| h.revision);
        }
        let Some(last) = answer.kvs.last() else {
            break;
        };
        // The next page starts right after this one's last key.
        from = last.key.clone();
        from.push(0);
        kvs.extend(answer.kvs);
        if !answer.more {
            break;
        }
    }
    kvs.sort_by_key(|kv| kv.create_revision);
    Ok(kvs)
}

pub(super) async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Fault> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Fault::Failed(e)),
        Err(_) => Err(Fault::TimedOut(timeout)),
    }
}

fn is_unreachable(e: &Error) -> bool {
    match e {
        Error::Status(s) => matches!(
            s.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Aborted
        ),
        Error::StreamEnded(_) => true,
        Error::LeaseNotFound | Error::Unexpected(_) | Error::Endpoint(_) => false,
    }
}

/// The reason in a failed call, for people: the server's own words for an answer, a short phrase
/// for a connection that failed, never the client library's internals.
pub(super) fn why(e: &Error) -> String {
    match e {
        Error::Status(s) => {
            // tonic says only "transport error"; what failed is in the errors behind it.
            let mut causes = Vec::new();
            let mut source = std::error::Error::source(s);
            // Bounded: a chain of causes is short, and at most 8 are read.
            while let Some(cause) = source.filter(|_| causes.len() < 8) {
                // A connection that failed reads as it does for every backend.
                let io = cause.downcast_ref::<std::io::Error>();
                if let Some(words) =
                    io.and_then(|io| dlock_core::report::connection_words(io, None))
                {
                    return words;
                }
                causes.push(cause.to_string());
                source = cause.source();
            }
            let behind = causes.join(": ");
            if behind.contains("h2 protocol error") || behind.contains("http2 error") {
                return "it does not answer as etcd does (gRPC over HTTP/2): is another kind of \
                        server listening there?"
                    .into();
            }
            let message = match causes.last() {
                Some(deepest) => {
                    let deepest = deepest
                        .split(" (os error")
                        .next()
                        .unwrap_or("")
                        .to_lowercase();
                    let said = s.message();
                    let text = if said == "transport error" || deepest.contains(said) {
                        deepest
                    } else {
                        format!("{said}: {deepest}")
                    };
                    dlock_core::lock::escaped(&text, 200)
                }
                None => dlock_core::lock::escaped(s.message(), 200),
            };
            match s.code() {
                // A server with auth on, asked without a user.
                _ if message.contains("user name is empty") => {
                    "not authorised: etcd asks for a user (give etcd://user:password@...)".into()
                }
                // A wrong password: say where it came from.
                _ if message.contains("invalid user ID or password") => {
                    format!(
                        "not authorised: {message}: {}",
                        dlock_core::url::credentials_hint()
                    )
                }
                Code::Unauthenticated | Code::PermissionDenied => format!(
                    "not authorised: {message} (dlock needs a user with read and write on the \
                     prefix /dlock/: etcd://user:password@...)"
                ),
                Code::Unavailable if message.is_empty() => "unavailable".into(),
                Code::Unavailable => format!("unavailable ({message})"),
                code if message.is_empty() => format!("error {}", code as i32),
                _ => message,
            }
        }
        Error::StreamEnded(what) => (*what).into(),
        Error::LeaseNotFound => "lease not found".into(),
        Error::Unexpected(what) => dlock_core::lock::escaped(what, 200),
        Error::Endpoint(what) => {
            format!("invalid address ({})", dlock_core::lock::escaped(what, 200))
        }
    }
}
