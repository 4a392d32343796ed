//! One connection to the server, shared by the backend and its leases: connecting (TLS or not),
//! reconnecting after the server went away, every call bounded by the connection's read and write
//! timeouts, dlock's tables made on first use, and failures turned into messages that name the
//! server.
//!
//! The synchronous `mysql` crate: dlock's calls are sequential on the supervisor's thread, and the
//! crate's per-connection read and write timeouts bound each of them (set when it connects, to a
//! fifth of the ttl at most). A renewal is further bounded by what is left of its lease
//! (`within`), so that it gives up in time to stop the command before the server frees the lock.

use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dlock_core::error;
use dlock_core::error::FailAs;
use mysql::prelude::Queryable;

use super::address::{MyUrl, Tls};
use super::dial::{connect_within, NotMade};
use crate::fault::{connect_while_full, Budget};
use dlock_core::backend::stop::{Stop, INTERRUPTED};
use dlock_core::backend::watch::{Cut, Socket, Watched, MAX_GROWTH};
use dlock_core::report::{connection_failure, connection_words};
use dlock_sys::blocking;

/// The longest packet dlock takes from a server (the client's `max_allowed_packet`, also its
/// default before it is set): the codec checks every length read against it before it allocates.
const MAX_PACKET: usize = 4 << 20;

/// The tables and procedures, `{p}` standing for the prefix, statements separated by `;;` lines.
const SCHEMA: &str = include_str!("schema.sql");

/// Longest a call may wait for an answer (the read timeout), whatever the connect timeout.
const MAX_CALL: Duration = Duration::from_secs(10);
/// How long after a call's read timeout the watch cuts it (the read timeout ends a silent call).
const WATCH_SLACK: Duration = Duration::from_millis(100);
/// How long creating the schema may wait for each statement.
const SCHEMA_CALL: Duration = Duration::from_secs(30);
/// Shortest read timeout: below it a loaded server's answers would look like outages.
const MIN_CALL: Duration = Duration::from_millis(200);

/// MySQL's codes for what dlock's first call meets before its tables exist (or while they are
/// an older dlock's, without a column added since), and for a refusal of the right to create them.
const NO_SUCH_TABLE: u16 = 1146;
const NO_SUCH_PROCEDURE: u16 = 1305;
const NO_SUCH_COLUMN: u16 = 1054;
const PROCEDURE_EXISTS: u16 = 1304;
const DENIED: [u16; 4] = [1044, 1142, 1227, 1370];
/// Too many connections (to the server; of this user).
const FULL: [u16; 2] = [1040, 1203];
/// A deadlock or lock wait timeout: the transaction was rolled back and may be tried again.
const ROLLED_BACK: [u16; 2] = [1213, 1205];

/// A connection and its settings.
pub struct Conn {
    url: Arc<MyUrl>,
    connect_timeout: Duration,
    /// The read and write timeout of connections made from now on.
    call_timeout: Duration,
    conn: Option<mysql::Conn>,
    /// The connection's socket, for the watch over each call (`backend::watch`), when found.
    socket: Option<Socket>,
    /// Counts connections made: lock keys held by an older one are gone.
    pub generation: u64,
    /// Whether the schema was created by this dlock (then not tried twice).
    schema_made: bool,
    /// A renewal is under way (see `renewing`): a reconnect must end in time to report the lease
    /// lost.
    renewing: bool,
    /// When to give up a connection being made.
    stop: Stop,
    /// The `generation` whose objects were found trusted (`recipe::Recipe::run`).
    trusted: Option<u64>,
}

pub type Shared = Arc<Mutex<Conn>>;

/// The connection behind `shared`, also after a panic elsewhere while it was locked.
pub fn lock(shared: &Shared) -> MutexGuard<'_, Conn> {
    // A panic elsewhere leaves at worst a connection in an unknown state, which the next call
    // notices as any other failure.
    dlock_sys::sync::lock(shared)
}

/// Runs `op` on the connection behind `shared` on a thread of its own and waits `within` at most
/// for its answer: a renewal must end by its lease's deadline, and the connection's read timeout
/// (a fifth of the ttl) bounds each read, not the time left. A call given up on ends on its
/// thread by that timeout, which drops its connection; meanwhile the connection is busy, and a
/// new call fails at once rather than queue behind it.
pub fn within<T: Send + 'static>(
    shared: &Shared,
    within: Duration,
    op: impl FnOnce(&mut Conn) -> Result<T, Fault> + Send + 'static,
) -> Result<T, Fault> {
    if matches!(shared.try_lock(), Err(std::sync::TryLockError::WouldBlock)) {
        return Err(Fault::Unreachable(
            "the last call still waits for its answer".into(),
        ));
    }
    let (tx, rx) = mpsc::sync_channel(1);
    let conn = shared.clone();
    // Signals are the supervisor's: never this thread's.
    blocking::thread("dlock-mysql-call", move || {
        // Nobody waits any more: the answer is dropped.
        let _ = tx.send(op(&mut lock(&conn)));
    })
    .map_err(|e| Fault::Unreachable(format!("cannot start a thread for the call: {e}")))?;
    match rx.recv_timeout(within) {
        Ok(answer) => answer,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(Fault::Unreachable(format!(
            "no answer within {}",
            dlock_core::text::duration(within)
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err(Fault::Unreachable("the calling thread failed".into()))
        }
    }
}

/// Why a call failed; a refusal's code is the server's error number.
pub type Fault = crate::Fault<u16>;

impl Fault {
    /// The user lacks a right the statement needs.
    pub fn is_denied(&self) -> bool {
        matches!(self, Fault::Refused { code, .. } if DENIED.contains(code))
    }

    /// The server's connections are all taken (max_connections, or the user's
    /// max_user_connections): busy, not unreachable.
    fn is_full(&self) -> bool {
        matches!(self, Fault::Refused { code, .. } if FULL.contains(code))
    }

    pub(super) fn is_missing_schema(&self) -> bool {
        matches!(self, Fault::Refused { code, .. } if [NO_SUCH_TABLE, NO_SUCH_PROCEDURE, NO_SUCH_COLUMN].contains(code))
    }
}

/// A library error as a fault, in one line without the library's wording of internals.
pub(super) fn fault(e: mysql::Error) -> Fault {
    use mysql::{DriverError, Error};
    use mysql_common::proto::codec::error::PacketCodecError;
    match e {
        // 1045: access denied (a wrong user or password).
        Error::MySqlError(e) if e.code == 1045 => Fault::Refused {
            code: e.code,
            message: format!("{}: {}", e.message, dlock_core::url::credentials_hint()),
        },
        Error::MySqlError(e) => Fault::Refused {
            code: e.code,
            message: e.message,
        },
        Error::IoError(io) => Fault::Unreachable(io_failure(&io)),
        Error::DriverError(DriverError::ConnectTimeout) => {
            Fault::Unreachable("no answer in time".into())
        }
        Error::DriverError(DriverError::TlsNotSupported) => {
            Fault::Unreachable("the server does not offer TLS".into())
        }
        Error::DriverError(DriverError::CouldNotConnect(Some((_, message, kind)))) => {
            let io = std::io::Error::new(kind, message);
            Fault::Unreachable(connection_failure(&io, None))
        }
        // A length above max_allowed_packet, which the codec checks before it allocates.
        Error::CodecError(PacketCodecError::PacketTooLarge) => Fault::Unreachable(format!(
            "the server announced a packet of more than {} MiB; is it MySQL?",
            MAX_PACKET >> 20
        )),
        Error::TlsError(e) => Fault::Unreachable(format!("TLS: {e}")),
        Error::DriverError(e) => Fault::Unreachable(e.to_string()),
        // A read or write that failed inside the packet codec.
        Error::CodecError(c) => Fault::Unreachable(
            std::error::Error::source(&c)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .map_or_else(|| "the connection broke".into(), io_failure),
        ),
        Error::UrlError(e) => Fault::Unreachable(e.to_string()),
        Error::FromValueError(_) | Error::FromRowError(_) => {
            Fault::Unreachable("unexpected answer from the server".into())
        }
    }
}

/// How a read or write failed, as people say it.
fn io_failure(io: &std::io::Error) -> String {
    connection_words(io, None).unwrap_or_else(|| match io.get_ref() {
        // A TLS failure comes wrapped in an I/O error: its own message, which names the cause;
        // so does the client's own wording of a broken connection ("server disconnected").
        Some(inner) if inner.is::<rustls::Error>() => format!("TLS: {inner}"),
        Some(inner) => inner.to_string(),
        None => connection_failure(io, None),
    })
}

impl Conn {
    pub fn new(url: Arc<MyUrl>, connect_timeout: Duration) -> Conn {
        Conn {
            url,
            connect_timeout,
            call_timeout: connect_timeout.clamp(MIN_CALL, MAX_CALL),
            conn: None,
            socket: None,
            generation: 0,
            schema_made: false,
            renewing: false,
            stop: Stop::default(),
            trusted: None,
        }
    }

    /// Gives up connecting as soon as `stop` says so, whatever is left of the connect timeout.
    pub fn stopping(mut self, stop: Stop) -> Conn {
        self.stop = stop;
        self
    }

    /// Another connection to the same server, for waits on lock keys alone: each of its calls
    /// may wait up to `longest` (until the next re-check) and then as long as this connection's
    /// calls wait for an answer.
    pub fn for_waits(&self, longest: Duration) -> Conn {
        Conn {
            call_timeout: longest + self.call_timeout,
            stop: self.stop.clone(),
            ..Conn::new(self.url.clone(), self.connect_timeout)
        }
    }

    pub fn url(&self) -> &MyUrl {
        &self.url
    }

    /// Whether this connection found dlock's routines and triggers defined by accounts
    /// it trusts (checked again after a reconnect, which may reach another server).
    pub fn trusted(&self) -> bool {
        self.trusted == Some(self.generation)
    }

    pub fn mark_trusted(&mut self) {
        self.trusted = Some(self.generation);
    }

    /// The server's id of this connection's session (connecting first if needed), for `KILL`.
    pub fn session_id(&mut self) -> Result<u32, Fault> {
        self.ensure()?;
        self.conn
            .as_ref()
            .map(mysql::Conn::connection_id)
            .ok_or_else(|| Fault::Unreachable("not connected".into()))
    }

    /// `renew` on this connection as a renewal: a reconnect it needs is bounded by the call
    /// timeout, not the connect timeout.
    pub fn renewing<T>(&mut self, renew: impl FnOnce(&mut Conn) -> T) -> T {
        self.renewing = true;
        let result = renew(self);
        self.renewing = false;
        result
    }

    /// Bounds every call of connections made from now on by a fifth of `ttl` (a renewal must give
    /// up in time to report its lease lost).
    pub fn fit_ttl(&mut self, ttl: Duration) {
        self.call_timeout = self.call_timeout.min((ttl / 5).max(MIN_CALL));
    }

    /// Connects if there is no open connection. A new connection has a new `generation`.
    pub fn ensure(&mut self) -> Result<(), Fault> {
        if self.conn.is_some() {
            return Ok(());
        }
        let before = Socket::open_now();
        let conn = self.connect_patiently(self.call_timeout)?;
        self.socket = Socket::opened_since(&before, self.url.port);
        self.conn = Some(conn);
        self.generation += 1;
        Ok(())
    }

    /// A new connection whose calls wait `call_timeout` at most, tried again while the server's
    /// connections are all taken: within the whole connect timeout, but for a renewal within
    /// `call_timeout`, if sooner (a renewal that reconnects must give up in time to report its
    /// lease lost).
    fn connect_patiently(&self, call_timeout: Duration) -> Result<mysql::Conn, Fault> {
        let opts = self.opts(call_timeout)?;
        let budget = if self.renewing {
            Budget::connect_or_renewal(self.connect_timeout, call_timeout)
        } else {
            Budget::connect_timeout(self.connect_timeout)
        };
        connect_while_full(
            budget,
            &self.stop,
            "max_connections",
            Fault::is_full,
            |budget| {
                connect_within(opts.clone(), budget, &self.stop).map_err(|e| match e {
                    NotMade::Client(e) => fault(e),
                    NotMade::GaveUp(why) => Fault::Unreachable(why),
                })
            },
        )
    }

    /// The client's settings for a connection whose calls wait `call_timeout` at most.
    fn opts(&self, call_timeout: Duration) -> Result<mysql::OptsBuilder, Fault> {
        let url = &self.url;
        let mut opts = mysql::OptsBuilder::new()
            .ip_or_hostname(Some(url.host.clone()))
            .tcp_port(url.port)
            .user(url.user.clone())
            .pass(url.password.clone())
            .db_name(Some(url.database.clone()))
            .prefer_socket(false)
            .tcp_nodelay(true)
            .tcp_connect_timeout(Some(self.connect_timeout))
            .read_timeout(Some(call_timeout))
            .write_timeout(Some(call_timeout))
            .tcp_keepalive_time_ms(Some(10_000))
            // Known, so the client does not ask for it on every connection.
            .max_allowed_packet(Some(MAX_PACKET));
        if url.tls != Tls::Off {
            let mut ssl =
                mysql::SslOpts::default().with_danger_skip_domain_validation(url.tls == Tls::Chain);
            let ca = url.ssl_ca.clone().or_else(|| {
                std::env::var("SSL_CERT_FILE")
                    .ok()
                    .filter(|f| !f.is_empty())
            });
            if let Some(ca) = ca {
                if std::fs::metadata(&ca).is_err() {
                    return Err(Fault::Unreachable(format!(
                        "cannot read the CA file {ca:?}"
                    )));
                }
                ssl = ssl.with_root_cert_path(Some(std::path::PathBuf::from(ca)));
            }
            opts = opts.ssl_opts(Some(ssl));
        }
        Ok(opts)
    }

    /// Runs `op` on the connection, connecting first if needed; a deadlock the server rolled
    /// back is tried again (twice). A connection that failed or timed out is dropped: what it
    /// answers later belongs to nobody.
    pub fn call<T>(
        &mut self,
        mut op: impl FnMut(&mut mysql::Conn) -> mysql::Result<T>,
    ) -> Result<T, Fault> {
        let mut tries = 0;
        loop {
            self.ensure()?;
            let Some(conn) = self.conn.as_mut() else {
                return Err(Fault::Unreachable("not connected".into()));
            };
            // The client's read timeout starts again with each byte, and it reads on after a
            // signal: the watch ends a call dripped or streamed past its budget, or on a stop.
            let until = Instant::now() + self.call_timeout + WATCH_SLACK;
            let watched = self
                .socket
                .as_ref()
                .and_then(|s| Watched::start(s, until, &self.stop));
            let answer = op(conn).map_err(fault);
            if let Some(cut) = watched.as_ref().and_then(Watched::cut) {
                self.conn = None;
                return Err(Fault::Unreachable(match cut {
                    Cut::Late => format!(
                        "no answer within {}",
                        dlock_core::text::duration(self.call_timeout)
                    ),
                    Cut::Stopped => INTERRUPTED.into(),
                    Cut::Memory => format!(
                        "the server's answer grew dlock by more than {} MiB; is it MySQL?",
                        MAX_GROWTH >> 20
                    ),
                }));
            }
            match answer {
                Ok(value) => return Ok(value),
                Err(Fault::Refused { code, .. }) if ROLLED_BACK.contains(&code) && tries < 2 => {
                    tries += 1;
                }
                Err(f) => {
                    if matches!(f, Fault::Unreachable(_)) {
                        self.conn = None;
                    }
                    return Err(f);
                }
            }
        }
    }

    /// `call`, creating dlock's tables and procedures first when the server says they are missing.
    pub fn call_creating<T>(
        &mut self,
        mut op: impl FnMut(&mut mysql::Conn) -> mysql::Result<T>,
    ) -> Result<T, Fault> {
        match self.call(&mut op) {
            Err(f) if f.is_missing_schema() && !self.schema_made => {
                // Let go of this connection while the schema is made on one of its own: a herd
                // of first runs on a server with few connection slots would otherwise each hold
                // one while waiting for a second, until none is left for anyone. Nothing of
                // dlock's is held on it yet (its tables are not there); a renewal after a
                // reconnection takes its lock key again.
                self.conn = None;
                self.create_schema().map_err(Fault::Setup)?;
                self.call(op)
            }
            result => result,
        }
    }

    /// The error for a failed call, naming the server, tagged backend-unavailable.
    pub fn error(&self, f: Fault) -> error::Error {
        f.into_error("mysql", &self.url.shown)
    }

    /// Creates the tables and procedures (`schema.sql`) under a named lock. A user without the
    /// right to gets the statement an administrator must run once.
    fn create_schema(&mut self) -> error::Result<()> {
        let prefix = self.url.prefix.clone();
        let schema = crate::runs::fill(&SCHEMA.replace("{p}", &prefix));
        let key = format!("{prefix}schema");
        let wait = self.connect_timeout.as_secs().max(1);
        // On a connection of its own: DDL may take longer than a fifth of a lease.
        let result = self
            .connect_patiently(self.connect_timeout.max(SCHEMA_CALL))
            .and_then(|mut c| create(&mut c, &key, wait, &schema).map_err(fault));
        match result {
            Ok(()) => {
                self.schema_made = true;
                Ok(())
            }
            Err(Fault::Refused { code, message }) if DENIED.contains(&code) => {
                // Tables an older dlock made gain a column: that needs ALTER too.
                let rights = if message.starts_with("ALTER") {
                    "CREATE, CREATE ROUTINE, ALTER"
                } else {
                    "CREATE, CREATE ROUTINE"
                };
                let database = self.url.database.replace('`', "``");
                let user = self
                    .call(|c| c.query_first::<mysql::Row, _>("SELECT CURRENT_USER()"))
                    .ok()
                    .flatten()
                    .and_then(|row| mysql::from_row_opt::<String>(row).ok())
                    .and_then(|u| {
                        let (name, host) = u.rsplit_once('@')?;
                        Some(format!("'{name}'@'{host}'"))
                    })
                    .unwrap_or_else(|| "<user>".into());
                Err(error!(
                    "mysql at {}: cannot create dlock's tables and procedures ({prefix}locks, \
                     {prefix}tokens, {prefix}queue, {prefix}runs, {prefix}acquire_v6...): \
                     {message}; an \
                     administrator must run once: GRANT {rights} ON `{database}`.* TO {user}",
                    self.url.shown,
                ))
                .unavailable()
            }
            Err(f) => Err(self.error(f).context("cannot create dlock's tables")),
        }
    }
}

/// Runs the schema's statements under the named lock `key` (waiting `wait` seconds for it); a
/// procedure that exists already is kept.
fn create(c: &mut mysql::Conn, key: &str, wait: u64, schema: &str) -> mysql::Result<()> {
    c.exec_drop("DO GET_LOCK(?, ?)", (key, wait))?;
    for statement in schema.split("\n;;\n") {
        match c.query_drop(statement) {
            Err(mysql::Error::MySqlError(e)) if e.code == PROCEDURE_EXISTS => {}
            other => other?,
        }
    }
    // The session ends with the connection, and its named lock with it.
    Ok(())
}
