//! A master found through Redis Sentinel: `redis+sentinel://[user:password@]host:port[,host:port…]
//! /MASTER[/db][?sentinel_password=P&replicas=N]`. The user and password are the data nodes'; the
//! sentinels' own password, if they have one, is a query parameter. The master's address is asked of the
//! sentinels (`SENTINEL GET-MASTER-ADDR-BY-NAME`) on every new connection, so a connection that
//! broke or met a demoted master (READONLY) is reopened to whichever node the sentinels now name.

use std::time::{Duration, Instant};

use dlock_core::error;
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use super::fault::{Fault, FaultKind};
use super::link::Link;
use super::replication;
use super::server::{once_more_if_dropped, Server};
use dlock_core::backend::stop::Stop;
use dlock_core::backend::watch::{Cut, Socket, Watched};
use dlock_core::text::percent_decode;
use dlock_core::url::redact;
use dlock_sys::blocking::Alarm;

pub(super) const SCHEME: &str = "redis+sentinel://";

/// A master the sentinels name: the connection to whichever node they name, and how to ask them.
pub(super) struct SentinelMaster {
    /// The node the sentinels named last, and the connection to it.
    pub(super) server: Server,
    /// Who names the master each new connection goes to.
    sentinels: Sentinels,
    /// The settings (credentials, db, TCP) that connection is opened with.
    settings: ConnectionInfo,
    /// The node the sentinels named last, and when they were asked.
    master: Option<((String, u16), Instant)>,
}

/// How long a sentinel that answers nothing may hold up the question at least, before the next
/// one is asked (each gets a share of the connect timeout, but no less than this).
const LEAST_PER_SENTINEL: Duration = Duration::from_millis(200);

/// The sentinels that name the master, and how to ask them.
pub(super) struct Sentinels {
    /// The master's name as the sentinels know it.
    pub(super) master: String,
    /// `host:port` of each sentinel, in the order given.
    addrs: Vec<(String, u16)>,
    password: Option<String>,
    /// The data nodes' password (the URL's, or the password file's), for sentinels that ask for
    /// one when the URL names no `sentinel_password`: a nested dlock gets the password file but
    /// never the URL's `sentinel_password` (see cli/place.rs).
    data_password: Option<String>,
}

/// A sentinel URL taken apart: the sentinels, and a plain `redis://` URL for the data nodes with
/// a placeholder address, which the master's replaces on each connection.
pub(super) struct Parsed {
    pub(super) sentinels: Sentinels,
    pub(super) data_url: String,
    /// `redis+sentinel://host:port,.../MASTER[/db]`, without credentials.
    pub(super) location: String,
    /// `?replicas=N`, if given (see `replication`).
    pub(super) replicas: Option<u32>,
}

fn usage(message: String) -> error::Error {
    error::Error::usage(message)
}

/// Takes a `redis+sentinel://` URL apart, or says what is wrong with it (a usage error).
pub(super) fn parse(url: &str) -> error::Result<Parsed> {
    let shown = redact(url);
    let rest = url
        .strip_prefix(SCHEME)
        .ok_or_else(|| usage(format!("{shown:?} is not a redis+sentinel:// URL")))?;
    // The credentials run to the last `@`: one with `/`, `?` or `#` before it would split the URL
    // inside the password, and a part of the password would then be named as a host or a master.
    if let Some(at) = rest.rfind('@') {
        if rest[..at].contains(['/', '?', '#']) {
            return Err(usage(format!(
                "malformed redis URL {shown:?}: write `/`, `?`, `#` and `@` in a user name or \
                 password as %2F, %3F, %23 and %40"
            )));
        }
    }
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    if rest.contains('#') {
        return Err(usage(format!(
            "malformed redis URL {shown:?}: write `#` in a password as %23"
        )));
    }
    let (authority, path) = rest.split_once('/').ok_or_else(|| {
        usage(format!(
            "redis sentinel URL {shown:?} names no master: use {SCHEME}host:port,host:port/MASTER"
        ))
    })?;
    if path.contains('@') {
        return Err(usage(format!(
            "malformed redis URL {shown:?}: write `/`, `?`, `#` and `@` in a user name or \
             password as %2F, %3F, %23 and %40"
        )));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let addrs = hosts
        .split(',')
        .map(|h| {
            host_port(h).ok_or_else(|| {
                usage(format!(
                    "redis sentinel URL {shown:?}: {h:?} is not host:port"
                ))
            })
        })
        .collect::<error::Result<Vec<_>>>()?;
    let (master, db) = match path.split_once('/') {
        Some((master, db)) => (master, Some(db)),
        None => (path, None),
    };
    let master = percent_decode(master)
        .filter(|m| !m.is_empty() && !m.chars().any(char::is_control))
        .ok_or_else(|| {
            usage(format!(
                "redis sentinel URL {shown:?} names no readable master"
            ))
        })?;
    let db = match db {
        None | Some("") => 0,
        Some(db) => db.parse::<u32>().map_err(|_| {
            usage(format!(
                "redis sentinel URL {shown:?}: {db:?} is not a database number"
            ))
        })?,
    };
    let mut password = None;
    let mut replicas = None;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("sentinel_password", value)) => {
                password = Some(percent_decode(value).ok_or_else(|| {
                    usage(format!(
                        "redis sentinel URL {shown:?}: unreadable sentinel_password"
                    ))
                })?)
            }
            Some((replication::PARAMETER, _)) if replicas.is_none() => {
                replicas = replication::in_query(pair, &shown)?;
            }
            _ => {
                return Err(usage(format!(
                    "redis sentinel URL {shown:?}: the query parameters are sentinel_password \
                     and replicas, once each"
                )))
            }
        }
    }
    let hosts_shown: Vec<String> = addrs.iter().map(|(h, p)| show_addr(h, *p)).collect();
    let db_shown = if db == 0 {
        String::new()
    } else {
        format!("/{db}")
    };
    let location = format!(
        "{SCHEME}{}/{}{db_shown}",
        hosts_shown.join(","),
        shown_master(&master)
    );
    let credentials = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let data_password = userinfo
        .and_then(|u| u.split_once(':'))
        .and_then(|(_, p)| percent_decode(p))
        .filter(|p| !p.is_empty());
    Ok(Parsed {
        sentinels: Sentinels {
            master,
            addrs,
            password,
            data_password,
        },
        data_url: format!("redis://{credentials}127.0.0.1:6379/{db}"),
        location,
        replicas,
    })
}

/// A master name as the location shows it: printable, at most 100 characters.
fn shown_master(master: &str) -> String {
    dlock_core::lock::escaped(master, 100)
}

/// `host:port` or `[v6]:port`.
fn host_port(text: &str) -> Option<(String, u16)> {
    let server = dlock_core::url::server(text, None).ok()?;
    valid_host(&server.host).then_some((server.host, server.port))
}

/// A host name, an IPv4 or an IPv6 address (without brackets).
fn valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:".contains(c))
}

fn show_addr(host: &str, port: u16) -> String {
    let host = host.to_owned();
    dlock_core::url::Server { host, port }.to_string()
}

impl Sentinels {
    /// The sentinels, as messages name them.
    fn shown(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(|(h, p)| show_addr(h, *p)).collect();
        addrs.join(",")
    }

    /// The sentinel asked first is asked last from now on.
    fn pass_over_first(&mut self) {
        self.addrs.rotate_left(1);
    }

    /// Asks the sentinels in turn for the master's address, within `timeout` in all. A sentinel
    /// that answers becomes the first asked next time. `template`: the data nodes' settings,
    /// whose TCP settings the question uses too.
    pub(super) fn master_addr(
        &mut self,
        template: &ConnectionInfo,
        timeout: Duration,
        stop: &Stop,
    ) -> Result<(String, u16), Fault> {
        let until = Instant::now() + timeout;
        let mut failures: Vec<String> = Vec::new();
        let mut unknown = false;
        for i in 0..self.addrs.len() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let share = left
                .checked_div(u32::try_from(self.addrs.len() - i).unwrap_or(u32::MAX))
                .unwrap_or(left)
                .max(LEAST_PER_SENTINEL)
                .min(left);
            let (host, port) = self.addrs[i].clone();
            let shown = show_addr(&host, port);
            match self.ask(template, &host, port, share, stop) {
                Ok(Some(found)) => {
                    self.addrs[..=i].rotate_right(1);
                    return Ok(found);
                }
                Ok(None) => unknown = true,
                Err(e) => {
                    let fault =
                        Fault::classify(&format!("sentinel {shown}"), &e, share, stop.requested());
                    if fault.is_fatal() {
                        return Err(fault);
                    }
                    failures.push(format!("{shown}: {}", fault.detail()));
                }
            }
        }
        let master = shown_master(&self.master);
        if unknown {
            return Err(Fault::new(
                &self.shown(),
                FaultKind::NoMaster,
                format!("monitor no master named {master:?}"),
            ));
        }
        if failures.is_empty() {
            failures.push(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            ));
        }
        Err(Fault::new(
            &format!("any sentinel of {master:?}"),
            FaultKind::Down,
            failures.join("; "),
        ))
    }

    /// One sentinel's answer: the master's address, or `None` when it monitors no such master.
    /// A sentinel that wants a password the URL does not give (no `sentinel_password`) is asked
    /// again with the data nodes' password, which is then used for every sentinel.
    fn ask(
        &mut self,
        template: &ConnectionInfo,
        host: &str,
        port: u16,
        timeout: Duration,
        stop: &Stop,
    ) -> redis::RedisResult<Option<(String, u16)>> {
        let password = self.password.as_deref();
        match self.ask_with(password, template, (host, port), timeout, stop) {
            Err(e) if password.is_none() && self.data_password.is_some() && wants_password(&e) => {
                let data = self.data_password.as_deref();
                let reply = self.ask_with(data, template, (host, port), timeout, stop)?;
                self.password = self.data_password.clone();
                Ok(reply)
            }
            reply => reply,
        }
    }

    /// `ask`, authenticating with `password` if any. The answer is watched as a data node's are
    /// (`watch`): a sentinel that answers without end is cut off at the budget, at a stop signal,
    /// or once dlock's memory grew too much.
    fn ask_with(
        &self,
        password: Option<&str>,
        template: &ConnectionInfo,
        (host, port): (&str, u16),
        timeout: Duration,
        stop: &Stop,
    ) -> redis::RedisResult<Option<(String, u16)>> {
        let until = Instant::now() + timeout + Duration::from_millis(20);
        let _alarm = Alarm::at(until);
        let mut settings = redis::RedisConnectionInfo::default()
            .set_skip_set_lib_name()
            .set_protocol(ProtocolVersion::RESP2);
        if let Some(password) = password {
            settings = settings.set_password(password);
        }
        let info = template
            .clone()
            .set_addr(ConnectionAddr::Tcp(host.to_owned(), port))
            .set_redis_settings(settings)
            .into_connection_info()?;
        let before = Socket::open_now();
        let mut conn = redis::Client::open(info)?.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        let socket = Socket::opened_since(&before, port);
        let watched = socket.as_ref().and_then(|s| Watched::start(s, until, stop));
        let reply = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master)
            .query::<Option<(String, u16)>>(&mut conn);
        if let Some(cut) = watched.as_ref().and_then(Watched::cut) {
            return Err(cut_error(cut));
        }
        let reply = reply?;
        // The answer names where dlock connects next, and what its messages show: a host name or
        // an address, nothing else.
        match reply {
            Some((host, _)) if !valid_host(&host) => Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "the sentinel named the master by an address that is not a host name or IP",
            ))),
            reply => Ok(reply),
        }
    }
}

/// The error of a question the watch cut short, as `Fault::classify` describes it.
fn cut_error(cut: Cut) -> redis::RedisError {
    match cut {
        Cut::Late => std::io::Error::from(std::io::ErrorKind::TimedOut).into(),
        Cut::Stopped => std::io::Error::from(std::io::ErrorKind::Interrupted).into(),
        // No sentinel answers that: dlock's question has a two-element answer.
        Cut::Memory => redis::RedisError::from((redis::ErrorKind::Parse, "an answer without end")),
    }
}

/// Whether a sentinel refused a question for want of a password.
fn wants_password(e: &redis::RedisError) -> bool {
    e.code() == Some("NOAUTH") || e.kind() == redis::ErrorKind::AuthenticationFailed
}

/// How often a holder asks the sentinels whether its master is still the master.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

impl SentinelMaster {
    /// A `redis+sentinel://` URL (no connection yet); `replicas` unless it says `?replicas=`.
    pub(super) fn parse(url: &str, replicas: u32) -> error::Result<SentinelMaster> {
        let parsed = parse(url)?;
        let replicas = parsed.replicas.unwrap_or(replicas);
        let mut server = Server::parse_plain(&parsed.data_url, &redact(url), replicas)?;
        server.addr = format!("master {:?}", parsed.sentinels.master);
        server.location = parsed.location;
        server.behind_sentinel = true;
        let settings = server.client.get_connection_info().clone();
        Ok(SentinelMaster {
            server,
            sentinels: parsed.sentinels,
            settings,
            master: None,
        })
    }

    /// Asks the sentinels where the master is now and points the client there.
    fn find_master(&mut self, timeout: Duration) -> Result<(), Fault> {
        let (host, port) =
            self.sentinels
                .master_addr(&self.settings, timeout, &self.server.stop)?;
        self.master = Some(((host.clone(), port), Instant::now()));
        self.server.addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let info = self
            .settings
            .clone()
            .set_addr(ConnectionAddr::Tcp(host, port));
        self.server.client = Client::open(info).map_err(|e| self.server.classify(&e, timeout))?;
        Ok(())
    }

    /// Connects within `timeout` to the node the sentinels name now: asking them and connecting
    /// share it, and it bounds the first reply on the new connection (and the permission check of
    /// an ACL user), however slowly the server answers. A node that cannot be reached sends the
    /// question on to the next sentinel, each asked once: a sentinel can name a node long gone (one
    /// whose failover never ended names the replica it promoted, if that died meanwhile).
    pub(super) fn connect(&mut self, timeout: Duration) -> Result<(), Fault> {
        let until = Instant::now() + timeout;
        let left = || {
            until
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        };
        let mut others = self.sentinels.addrs.len().saturating_sub(1);
        loop {
            self.find_master(left())?;
            match self.server.open(until, left()) {
                Ok(()) => break,
                Err(fault) if !fault.is_fatal() && others > 0 && Instant::now() < until => {
                    others -= 1;
                    self.sentinels.pass_over_first();
                }
                Err(fault) => return Err(fault),
            }
        }
        let timeout = left();
        let Some(user) = self.server.acl_user.clone() else {
            return Ok(());
        };
        let missing = self.call(timeout, self.server.permissions_check())?;
        self.server.permitted(&user, missing)
    }

    /// Runs `f` on the connection (reconnecting first if it broke): see `Server::call_once`. A
    /// master that failed over (the connection broke, or the node is now a replica) is looked up
    /// again and `f` run once more there, within what is left of `timeout` (see `Server::call`).
    pub(super) fn call<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, Fault> {
        let had_link = self.server.is_connected();
        once_more_if_dropped(timeout, had_link, |left| self.call_once(left, &mut f))
    }

    /// `Server::call_once`, connecting first (by way of the sentinels) when not connected.
    fn call_once<T>(
        &mut self,
        timeout: Duration,
        f: &mut impl FnMut(&mut Link) -> redis::RedisResult<T>,
    ) -> Result<T, (Fault, bool)> {
        if !self.server.is_connected() {
            self.connect(timeout.max(Duration::from_millis(1)))
                .map_err(|fault| (fault, false))?;
        }
        self.server.call_once(timeout, f)
    }

    /// Whether the sentinels now name another node than the one this connection goes to, asked
    /// at most every `LOOK_AGAIN` unless `now`. A forced failover leaves the old master running,
    /// and taking writes, for seconds before the sentinels make it a replica (and close its
    /// connections): a holder that kept renewing there would renew a lease that no longer counts.
    /// When it moved, the connection is dropped, so the next call goes to the new master. A lookup
    /// that fails changes nothing.
    pub(super) fn master_moved(&mut self, timeout: Duration, now: bool) -> bool {
        let Some((addr, asked)) = self.master.as_mut() else {
            return false;
        };
        if self.server.link.is_none() || (!now && asked.elapsed() < LOOK_AGAIN) {
            return false;
        }
        *asked = Instant::now();
        match self
            .sentinels
            .master_addr(&self.settings, timeout, &self.server.stop)
        {
            Ok(found) if found != *addr => {
                self.server.link = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_sentinels_master_and_db() {
        let p = parse(
            "redis+sentinel://u:pw@127.0.0.1:26379,[::1]:26380/main/2?sentinel_password=s%40x&replicas=2",
        )
        .unwrap();
        assert_eq!(p.replicas, Some(2));
        assert_eq!(
            p.location,
            "redis+sentinel://127.0.0.1:26379,[::1]:26380/main/2"
        );
        assert_eq!(p.sentinels.master, "main");
        assert_eq!(p.sentinels.password.as_deref(), Some("s@x"));
        assert_eq!(p.sentinels.data_password.as_deref(), Some("pw"));
        assert_eq!(p.data_url, "redis://u:pw@127.0.0.1:6379/2");
        for bad in [
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1/main",
            "redis+sentinel://::1:26379/main",
            "redis+sentinel://[::1]/main",
            "redis+sentinel://127.0.0.1:26379/main/x",
            "redis+sentinel://127.0.0.1:26379/main?password=x",
            "redis+sentinel://127.0.0.1:26379/main?replicas=1&replicas=2",
            "redis+sentinel://127.0.0.1:26379/main?replicas=two",
            "redis+sentinel://a:b@c@127.0.0.1:1/main/@",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_password_with_a_slash_and_a_question_mark_is_refused_without_showing_it() {
        let e = parse("redis+sentinel://:SECRET/?@127.0.0.1:1")
            .err()
            .expect("refused");
        assert!(!format!("{e:#}").contains("SECRET"), "{e:#}");
    }

    proptest::proptest! {
        /// Passwords anywhere: no refusal and no location shows them.
        #[test]
        fn no_message_shows_a_password(url in dlock_core::url::with_password()) {
            let url = url.replacen("redis://", SCHEME, 1);
            let shown = match parse(&url) {
                Ok(p) => p.location,
                Err(e) => format!("{e:#}"),
            };
            proptest::prop_assert!(!shown.contains("SECRET"), "{} gave {}", url, shown);
        }
    }
}
