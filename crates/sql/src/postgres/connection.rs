//! One connection to the server, shared by the backend and its leases: connecting (TLS or not),
//! reconnecting after the server went away, every call bounded by a timeout, the notifications
//! that arrive on it, and failures turned into messages that name the server.
//!
//! tokio-postgres on a small runtime of dlock's own rather than the blocking `postgres` crate:
//! every call here needs a deadline (a paused server keeps the TCP connection open and answers
//! nothing; a renewal must give up in time to report the lease lost), and the blocking crate has
//! none per call. The runtime is single-threaded and runs only inside a call, as the blocking crate
//! would; between calls nothing is read, so a waiter's notifications wait in the socket.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dlock_core::error;
use dlock_core::error::FailAs;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, Client, Notification};

use super::address::{PgUrl, Tls};
use super::tls::client_config;
use super::wire;
use crate::fault::{connect_while_full, Budget};
use dlock_core::backend::stop::{Stop, INTERRUPTED, STOPPED};
use dlock_sys::blocking;

/// The tables and functions, `{p}` standing for the prefix.
const SCHEMA: &str = include_str!("schema.sql");

/// The advisory lock key that serialises creating the schema (any fixed number: "dlock" in ASCII).
const SCHEMA_LOCK_KEY: i64 = 0x0064_6c6f_636b;

/// A connection and what arrived on it.
pub struct Conn {
    runtime: blocking::Runtime,
    url: Arc<PgUrl>,
    connect_timeout: Duration,
    client: Option<Arc<Client>>,
    notes: Option<UnboundedReceiver<Notification>>,
    /// Why the connection's reader ended on a failure (a bound of `wire` crossed, a reset), which
    /// the client itself only reports as a closed connection.
    lost: Lost,
    /// Counts connections made: a listener listens again after a reconnect.
    pub generation: u64,
    /// Whether the schema was created by this dlock (then not tried twice).
    schema_made: bool,
    /// When to give up a connection being made.
    stop: Stop,
    /// The `generation` whose objects were found trusted (`guard::Guard`), and whether its
    /// functions were too (not only its tables).
    trusted: Option<(u64, bool)>,
    /// The schema of dlock's objects (`guard::Guard::schema`), found on the first connection and
    /// kept after a reconnect (its owner checked again there), and the last `generation` it was
    /// checked on.
    schema: Option<(u64, Schema)>,
}

pub type Shared = Arc<Mutex<Conn>>;

/// A schema's name as it is, and quoted as an identifier: every statement names dlock's objects
/// with the latter.
#[derive(Clone)]
pub struct Schema {
    pub name: String,
    pub quoted: String,
}

/// Where a connection's reader leaves the failure that ended it.
type Lost = Arc<Mutex<Option<String>>>;

/// The connection behind `shared`, also after a panic elsewhere while it was locked.
pub fn lock(shared: &Shared) -> MutexGuard<'_, Conn> {
    // A panic elsewhere leaves at worst a connection in an unknown state, which the next call
    // notices as any other failure.
    dlock_sys::sync::lock(shared)
}

/// Why a call failed; a refusal's code is the server's SQLSTATE.
pub type Fault = crate::Fault<String>;

/// An answer of another shape than `what` has.
pub fn odd(what: &str) -> Fault {
    Fault::Unreachable(format!("unexpected answer from the server ({what})"))
}

impl Fault {
    /// A table, column or function of dlock's that is not there yet (tables an older dlock made,
    /// before `--message` or `--min-hold`).
    pub(super) fn is_missing_schema(&self) -> bool {
        matches!(self, Fault::Refused { code, .. } if ["42P01", "42703", "42883"].contains(&code.as_str()))
    }

    /// The server's connection slots are all taken (too_many_connections: max_connections, or
    /// the slots left are reserved for superusers): busy, not unreachable.
    fn is_full(&self) -> bool {
        matches!(self, Fault::Refused { code, .. } if code == "53300")
    }
}

/// The one line for a library error: the server's own message, or how the connection failed,
/// without the library's wording of internals (`(os error 111)`).
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_owned();
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return describe_io(io);
        }
        if let Some(tls) = s.downcast_ref::<rustls::Error>() {
            return format!("TLS: {tls}");
        }
        source = s.source();
    }
    if e.is_closed() {
        return "the connection was closed".into();
    }
    e.to_string()
}

/// How a read, write or connect failed, as people say it.
fn describe_io(io: &std::io::Error) -> String {
    dlock_core::report::connection_failure(io, None)
}

/// Answers that mean "not now" rather than "no": the server is starting up, shutting down or in
/// recovery (57P03 cannot_connect_now), or ended the session as it stops or restarts (57P01
/// admin_shutdown, 57P02 crash_shutdown). An outage, waited through as one; a full server (53300)
/// is `Fault::Full`'s.
const NOT_NOW: [&str; 3] = ["57P01", "57P02", "57P03"];

fn fault(e: tokio_postgres::Error) -> Fault {
    match e.as_db_error() {
        Some(db) if NOT_NOW.contains(&db.code().code()) => Fault::Unreachable(db.message().into()),
        // Refusals that last (wrong password, no such database, no rights, a SQL error): the
        // connection works, and trying again would not help.
        Some(db) => {
            let code = db.code().code().to_owned();
            // 28P01 invalid_password, 28000 invalid_authorization_specification.
            let message = match code.as_str() {
                "28P01" | "28000" => {
                    format!("{}: {}", db.message(), dlock_core::url::credentials_hint())
                }
                _ => db.message().to_owned(),
            };
            Fault::Refused { code, message }
        }
        // The server asked for a password (the library says so only in these words), and the
        // URL has none: a refusal that lasts, not an outage.
        None if std::error::Error::source(&e)
            .is_some_and(|s| s.to_string() == "password missing") =>
        {
            Fault::Refused {
                code: "28000".into(),
                message: dlock_core::url::password_needed().into(),
            }
        }
        None => Fault::Unreachable(describe(&e)),
    }
}

/// Connects within `timeout` (TLS through `tls`, if given) on a socket of dlock's own that bounds
/// every message's length (wire.rs), and reads the connection's messages on a task of its own,
/// handing its notifications to `notes`.
async fn connect(
    config: &tokio_postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    timeout: Duration,
    notes: UnboundedSender<Notification>,
    lost: Lost,
) -> Result<Client, Fault> {
    let connecting = async {
        let socket = wire::dial(config)
            .await
            .map_err(|e| Fault::Unreachable(describe_io(&e)))?;
        let Some(mut tls) = tls else {
            let bounded = wire::Bounded::new(socket);
            let (client, connection) = config
                .connect_raw(bounded, tokio_postgres::NoTls)
                .await
                .map_err(fault)?;
            read_messages(connection, notes, lost);
            return Ok(client);
        };
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.as_str(),
            _ => "",
        };
        let tls = MakeTlsConnect::<tokio::net::TcpStream>::make_tls_connect(&mut tls, host)
            .map_err(|e| Fault::Unreachable(format!("TLS: {e}")))?;
        let (client, connection) = config
            .connect_raw(socket, wire::BoundedTls(tls))
            .await
            .map_err(fault)?;
        read_messages(connection, notes, lost);
        Ok(client)
    };
    tokio::time::timeout(timeout, connecting)
        .await
        .map_err(|_| Fault::Unreachable("no answer in time".into()))?
}

/// Reads `connection`'s messages on a task of its own, handing its notifications to `notes`, and
/// the failure that ends it, if one does, to `lost`.
fn read_messages<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    notes: UnboundedSender<Notification>,
    lost: Lost,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let _ = notes.send(n);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    *dlock_sys::sync::lock(&lost) = Some(describe(&e));
                    return;
                }
                None => return,
            }
        }
    });
}

impl Conn {
    pub fn new(url: Arc<PgUrl>, connect_timeout: Duration) -> error::Result<Conn> {
        let runtime = blocking::runtime(None)
            .map_err(|e| error!("cannot start the PostgreSQL client: {e}"))?;
        Ok(Conn {
            runtime,
            url,
            connect_timeout,
            client: None,
            notes: None,
            lost: Lost::default(),
            generation: 0,
            schema_made: false,
            stop: Stop::default(),
            trusted: None,
            schema: None,
        })
    }

    /// Gives up connecting as soon as `stop` says so, whatever is left of the connect timeout.
    pub fn stopping(mut self, stop: Stop) -> Conn {
        self.stop = stop;
        self
    }

    /// Whether the stop came (a call begun after it still runs to its end: see `call`).
    pub fn stopped(&self) -> bool {
        self.stop.requested()
    }

    pub fn url(&self) -> &PgUrl {
        &self.url
    }

    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Whether this connection found dlock's tables (`functions`: and functions) owned by roles
    /// it trusts (checked again after a reconnect, which may reach another server).
    pub fn trusted(&self, functions: bool) -> bool {
        matches!(self.trusted, Some((g, all)) if g == self.generation && (all || !functions))
    }

    pub fn mark_trusted(&mut self, functions: bool) {
        let all = functions || self.trusted(true);
        self.trusted = Some((self.generation, all));
    }

    /// The schema of dlock's objects, quoted, when it was checked on this connection.
    pub fn schema(&self) -> Option<&str> {
        match &self.schema {
            Some((g, schema)) if *g == self.generation => Some(&schema.quoted),
            _ => None,
        }
    }

    /// The schema found on an earlier connection (its name as it is), to be checked again.
    pub fn found_schema(&self) -> Option<&str> {
        self.schema.as_ref().map(|(_, s)| s.name.as_str())
    }

    pub fn set_schema(&mut self, schema: Schema) {
        self.schema = Some((self.generation, schema));
    }

    /// Connects if there is no open connection, within the connect timeout. A new connection has
    /// a new `generation`.
    pub fn ensure(&mut self) -> Result<(), Fault> {
        self.ensure_within(self.connect_timeout)
    }

    /// `ensure`, giving up after `most` (or the connect timeout, if sooner).
    fn ensure_within(&mut self, most: Duration) -> Result<(), Fault> {
        if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(());
        }
        self.client = None;
        self.notes = None;
        self.lost = Lost::default();
        let stop = self.stop.clone();
        let budget = Budget::connect_or_renewal(self.connect_timeout, most);
        let (client, rx) =
            connect_while_full(budget, &stop, "max_connections", Fault::is_full, |left| {
                self.connect_once(left)
            })?;
        self.client = Some(Arc::new(client));
        self.notes = Some(rx);
        self.generation += 1;
        Ok(())
    }

    /// One connection attempt, within `timeout`: the client, and where its notifications arrive.
    fn connect_once(
        &self,
        timeout: Duration,
    ) -> Result<(Client, UnboundedReceiver<Notification>), Fault> {
        let mut config = self.url.config.clone();
        config
            .connect_timeout(self.connect_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .tcp_user_timeout(self.connect_timeout.max(Duration::from_secs(1)));
        let (tx, rx) = unbounded_channel();
        let lost = self.lost.clone();
        let client = match self.url.tls {
            Tls::Off => {
                config.ssl_mode(tokio_postgres::config::SslMode::Disable);
                let connecting = connect(&config, None, timeout, tx, lost);
                self.runtime
                    .block_on(self.stop.unless(connecting))
                    .unwrap_or_else(|| Err(Fault::Unreachable(STOPPED.into())))?
            }
            tls => {
                config.ssl_mode(tokio_postgres::config::SslMode::Require);
                let rustls = client_config(&self.url, tls).map_err(Fault::Unreachable)?;
                let connector = tokio_postgres_rustls::MakeRustlsConnect::new(rustls);
                let connecting = connect(&config, Some(connector), timeout, tx, lost);
                self.runtime
                    .block_on(self.stop.unless(connecting))
                    .unwrap_or_else(|| Err(Fault::Unreachable(STOPPED.into())))?
            }
        };
        Ok((client, rx))
    }

    /// Runs `op` on the connection (connecting first if needed), for at most `budget` in all: a
    /// renewal that must reconnect gives up in time to say its lease is lost, not after the
    /// connect timeout. A connection that timed out is dropped: what it answers later belongs to
    /// nobody.
    pub fn call<T, F, Fut>(&mut self, budget: Duration, op: F) -> Result<T, Fault>
    where
        F: FnOnce(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let start = std::time::Instant::now();
        self.ensure_within(budget)?;
        let budget = budget.saturating_sub(start.elapsed());
        // The call owns a handle on the client, so its future needs no borrow of `self`.
        let Some(client) = self.client.clone() else {
            return Err(Fault::Unreachable("not connected".into()));
        };
        // A stop that comes while the call is under way abandons it (a server that drips its
        // answer must not hold a signal up until the budget ends); a call begun after a stop, as
        // the release of a lock granted meanwhile, runs to its end.
        let stop = match self.stop.requested() {
            true => Stop::default(),
            false => self.stop.clone(),
        };
        let answer = self
            .runtime
            .block_on(stop.unless(async { tokio::time::timeout(budget, op(client)).await }));
        let Some(answer) = answer else {
            self.client = None;
            return Err(Fault::Unreachable(INTERRUPTED.into()));
        };
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                let why = e.is_closed().then(|| self.why_lost()).flatten();
                let f = why.map_or_else(|| fault(e), Fault::Unreachable);
                if matches!(f, Fault::Unreachable(_)) {
                    self.client = None;
                }
                Err(f)
            }
            Err(_) => {
                self.client = None;
                Err(Fault::Unreachable(format!(
                    "no answer within {}",
                    dlock_core::text::duration(budget)
                )))
            }
        }
    }

    /// Why the connection's reader ended, if a failure ended it.
    fn why_lost(&self) -> Option<String> {
        dlock_sys::sync::lock(&self.lost).clone()
    }

    /// `call`, creating dlock's tables and functions first when the server says they are missing.
    pub fn call_creating<T, F, Fut>(&mut self, budget: Duration, op: F) -> Result<T, Fault>
    where
        F: Fn(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        match self.call(budget, &op) {
            Err(f) if f.is_missing_schema() && !self.schema_made => {
                self.create_schema(budget).map_err(Fault::Setup)?;
                self.call(budget, &op)
            }
            result => result,
        }
    }

    /// The error for a failed call, naming the server.
    pub fn error(&self, f: Fault) -> error::Error {
        f.into_error("postgres", &self.url.shown)
    }

    /// Creates the tables and functions (`schema.sql`), in one transaction under an advisory
    /// lock. A user without the right to gets the statement an administrator must run once.
    fn create_schema(&mut self, budget: Duration) -> error::Result<()> {
        // READ COMMITTED as every statement of dlock's (see `recipe::read_committed`): under
        // SERIALIZABLE, a dlock that waited for the advisory lock would go on with a snapshot
        // from before the tables were made.
        let Some(schema) = self.schema.as_ref().map(|(_, s)| s.quoted.clone()) else {
            return Err(error!(
                "postgres at {}: cannot create dlock's tables: no schema was found",
                self.url.shown
            ))
            .unavailable();
        };
        let sql = format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n\
             SELECT pg_catalog.pg_advisory_xact_lock({SCHEMA_LOCK_KEY});\n{}",
            crate::runs::fill(
                &SCHEMA
                    .replace("{p}", &self.url.prefix)
                    .replace("{s}", &schema)
            )
        );
        let result = self.call(budget, |c| async move { c.batch_execute(&sql).await });
        match result {
            Ok(()) => {
                self.schema_made = true;
                Ok(())
            }
            Err(Fault::Refused { code, message }) if code == "42501" => {
                let user = self
                    .call(budget, |c| async move {
                        c.query_one("SELECT pg_catalog.quote_ident(CURRENT_USER)", &[])
                            .await
                    })
                    .ok()
                    .and_then(|row| row.try_get::<_, String>(0).ok())
                    .unwrap_or_else(|| "<user>".into());
                let grant = format!("GRANT CREATE ON SCHEMA {schema} TO {user}");
                Err(error!(
                    "postgres at {}: cannot create dlock's tables ({p}locks, {p}tokens, {p}queue, \
                     {p}runs): {message}; an administrator must run once: {grant}",
                    self.url.shown,
                    p = self.url.prefix,
                ))
                .unavailable()
            }
            Err(f) => Err(self.error(f).context("cannot create dlock's tables")),
        }
    }

    /// Waits up to `most` for a notification; `Ok(None)` when none came. Fails when the
    /// connection is gone.
    pub fn next_note(&mut self, most: Duration) -> Result<Option<Notification>, Fault> {
        let Some(notes) = self.notes.as_mut() else {
            return Err(Fault::Unreachable("not connected".into()));
        };
        match self
            .runtime
            .block_on(async { tokio::time::timeout(most, notes.recv()).await })
        {
            Ok(Some(n)) => Ok(Some(n)),
            Ok(None) => {
                self.client = None;
                self.notes = None;
                Err(Fault::Unreachable("the connection was closed".into()))
            }
            Err(_) => {
                if self.client.as_ref().is_none_or(|c| c.is_closed()) {
                    self.client = None;
                    return Err(Fault::Unreachable("the connection was closed".into()));
                }
                Ok(None)
            }
        }
    }
}
