//! The last runs on PostgreSQL and MySQL, through the real binary: what each ending writes into
//! the stored records (read raw from `<prefix>runs` with psql and mariadb, in hexadecimal so that
//! a message's tab arrives as written), which writes never overwrite another run's record,
//! `--min-hold` kept or given up at once, hostile records (and rows `list --runs` leaves out),
//! and tables an older dlock made.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::mysql::server::MyServer;
use crate::postgres::server::PgServer;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Pg,
    My,
}

/// dlock on one SQL server's shared instance, with tables of the test's own.
struct Store {
    kind: Kind,
    url: String,
    prefix: String,
    dir: LockDir,
}

/// A stored run record, split into its fields (`Run::record`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    raw: String,
    token: u64,
    acquired: u64,
    ended: Option<u64>,
    ending: Option<String>,
    pid: u32,
    owner: String,
    host: String,
    message: Option<String>,
}

impl Rec {
    /// The record `raw`, which must be of dlock's text form.
    fn parse(raw: &str) -> Rec {
        let bad = || panic!("not a run record: {raw:?}");
        let fields: Vec<&str> = raw.splitn(8, ' ').collect();
        let [version, token, acquired, ended, ending, pid, owner, rest] = fields[..] else {
            bad()
        };
        assert_eq!(version, "run1", "{raw:?}");
        let (host, message) = match rest.split_once('\t') {
            Some((h, m)) => (h, Some(m.to_owned())),
            None => (rest, None),
        };
        let time = |t: &str| (t != "-").then(|| t.parse::<u64>().unwrap_or_else(|_| bad()));
        let rec = Rec {
            raw: raw.to_owned(),
            token: token.parse().unwrap_or_else(|_| bad()),
            acquired: acquired.parse().unwrap_or_else(|_| bad()),
            ended: time(ended),
            ending: (ending != "-").then(|| ending.to_owned()),
            pid: pid.parse().unwrap_or_else(|_| bad()),
            owner: owner.to_owned(),
            host: host.to_owned(),
            message,
        };
        assert_eq!(rec.ended.is_some(), rec.ending.is_some(), "{raw:?}");
        assert!(
            rec.owner.len() == 32 && rec.owner.bytes().all(|b| b.is_ascii_hexdigit()),
            "{raw:?}"
        );
        assert!(!rec.host.is_empty(), "{raw:?}");
        if let Some(ended) = rec.ended {
            assert!(ended >= rec.acquired, "ended before acquired: {raw:?}");
        }
        rec
    }

    fn ending(&self) -> Option<&str> {
        self.ending.as_deref()
    }
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

impl Store {
    fn pg(prefix: &str) -> Store {
        Store {
            kind: Kind::Pg,
            url: PgServer::shared_url(prefix),
            prefix: prefix.to_owned(),
            dir: LockDir::new(),
        }
    }

    fn my(prefix: &str) -> Store {
        Store {
            kind: Kind::My,
            url: MyServer::shared_url(prefix),
            prefix: prefix.to_owned(),
            dir: LockDir::new(),
        }
    }

    fn dlock(&self, args: &[&str]) -> Command {
        let backend = match self.kind {
            Kind::Pg => "postgres",
            Kind::My => "mysql",
        };
        let mut cmd = dlock();
        cmd.args(["--backend", backend, "--url", &self.url])
            .args(args)
            .current_dir(self.dir.path());
        cmd
    }

    /// Runs `sql` as the server's administrator; its output.
    fn sql(&self, sql: &str) -> String {
        match self.kind {
            Kind::Pg => PgServer::use_shared().psql(sql),
            Kind::My => MyServer::shared()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .sql(sql),
        }
    }

    /// The server's clock, in Unix milliseconds.
    fn now_ms(&self) -> u64 {
        let sql = match self.kind {
            Kind::Pg => "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            Kind::My => {
                "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000"
            }
        };
        self.sql(sql).parse().expect("a time")
    }

    /// The stored bytes of `column` (`last_run`, `last_success`) of `name`; `None`: no row or
    /// NULL.
    fn raw(&self, name: &str, column: &str) -> Option<Vec<u8>> {
        let p = &self.prefix;
        let sql = match self.kind {
            Kind::Pg => format!(
                "SELECT coalesce(encode(convert_to({column}, 'UTF8'), 'hex'), 'NULL') \
                 FROM {p}runs WHERE name = '{name}'"
            ),
            Kind::My => {
                format!("SELECT COALESCE(HEX({column}), 'NULL') FROM {p}runs WHERE name = '{name}'")
            }
        };
        match self.sql(&sql).as_str() {
            "" | "NULL" => None,
            hex => Some(unhex(hex)),
        }
    }

    /// The record in `column` of `name`, which must be one of dlock's.
    fn record(&self, name: &str, column: &str) -> Option<Rec> {
        self.raw(name, column)
            .map(|b| Rec::parse(&String::from_utf8(b).expect("UTF-8")))
    }

    fn last_run(&self, name: &str) -> Rec {
        self.record(name, "last_run")
            .unwrap_or_else(|| panic!("no last run of {name}"))
    }

    fn last_success(&self, name: &str) -> Option<Rec> {
        self.record(name, "last_success")
    }

    /// `dlock run FLAGS NAME -- sh -c '<touch TAG.in; hold until TAG.go>'` in the background,
    /// once its command runs.
    fn holder(&self, flags: &[&str], name: &str, tag: &str) -> Child {
        let script = format!(
            "touch {tag}.in; i=0; while [ ! -e {tag}.go ] && [ $i -lt 1200 ]; do sleep 0.05; \
             i=$((i+1)); done"
        );
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
        let child = self
            .dlock(&args)
            .stderr(Stdio::null())
            .spawn()
            .expect("start a holder");
        wait_for_file(&self.dir.file(&format!("{tag}.in")), T);
        child
    }

    fn let_go(&self, tag: &str) {
        std::fs::write(self.dir.file(&format!("{tag}.go")), "").unwrap();
    }

    /// `dlock ARGS` to its end: its pid and exit code.
    fn run(&self, args: &[&str]) -> (u32, i32) {
        let child = self
            .dlock(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        // Shown with a failing test's output.
        eprint!("{}", stderr(&out));
        (pid, code(&out))
    }
}

/// Each test once on PostgreSQL and once on MySQL, with tables of its own (`prefix`).
macro_rules! on_both {
    ($($test:ident: $prefix:literal),* $(,)?) => {
        mod postgres {
            $(
                #[test]
                fn $test() {
                    super::$test(&super::Store::pg($prefix));
                }
            )*
        }
        mod mysql {
            $(
                #[test]
                fn $test() {
                    super::$test(&super::Store::my($prefix));
                }
            )*
        }
    };
}

on_both!(
    each_ending_is_written_into_the_last_run_by_the_servers_clock: "t_lr_end_",
    a_lost_lock_is_written_lost: "t_lr_lost_",
    a_command_that_succeeds_after_its_lease_passed_ends_lost: "t_lr_late_",
    release_force_writes_forced_and_the_holders_own_release_leaves_it: "t_lr_force_",
    a_holder_killed_with_sigkill_leaves_its_run_not_ended: "t_lr_kill_",
    an_earlier_shared_holders_release_never_overwrites_a_later_run: "t_lr_shared_",
    hostile_records_never_stop_acquiring_or_releasing: "t_lr_evil_",
    a_min_hold_keeps_the_lock_past_the_ending_unless_nothing_ran: "t_lr_min_",
    tables_of_an_older_dlock_gain_the_records: "t_lr_old_",
    names_unwritten_for_400_days_lose_their_records_at_the_next_list: "t_lr_age_",
    a_success_dated_after_the_servers_time_is_unreadable_never_ok: "t_lr_future_",
    list_runs_says_it_stopped_at_ten_thousand_names_and_exits_1: "t_lr_many_",
);

fn each_ending_is_written_into_the_last_run_by_the_servers_clock(s: &Store) {
    let before = s.now_ms();
    let (pid, status) = s.run(&[
        "run",
        "--message",
        "nightly backup",
        "job",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    assert_eq!(status, 3);
    let after = s.now_ms();
    let failed = s.last_run("job");
    assert_eq!(failed.token, 1, "{failed:?}");
    assert_eq!(failed.ending(), Some("exit:3"), "{failed:?}");
    assert_eq!(failed.pid, pid, "{failed:?}");
    assert_eq!(
        failed.message.as_deref(),
        Some("nightly backup"),
        "{failed:?}"
    );
    let ended = failed.ended.unwrap();
    assert!(
        before <= failed.acquired && ended <= after,
        "{before} <= {failed:?} <= {after}"
    );
    assert_eq!(s.last_success("job"), None, "a failure is no success");

    let (pid, status) = s.run(&["run", "job", "--", "true"]);
    assert_eq!(status, 0);
    let ok = s.last_run("job");
    assert_eq!((ok.token, ok.pid, ok.ending()), (2, pid, Some("exit:0")));
    assert_eq!(ok.message, None, "{ok:?}");
    assert_ne!(ok.owner, failed.owner);
    assert_eq!(s.last_success("job"), Some(ok.clone()));

    let (_, status) = s.run(&["run", "job", "--", "sh", "-c", "kill -TERM $$"]);
    assert_ne!(status, 0);
    let killed = s.last_run("job");
    assert_eq!((killed.token, killed.ending()), (3, Some("signal:15")));
    assert_eq!(s.last_success("job"), Some(ok), "the last success stays");
}

fn a_lost_lock_is_written_lost(s: &Store) {
    let mut h = s.holder(&["--ttl", "1s"], "lost", "h");
    let started = s.last_run("lost");
    assert_eq!((started.token, started.ending()), (1, None), "{started:?}");
    s.sql(&format!(
        "DELETE FROM {}locks WHERE name = 'lost'",
        s.prefix
    ));
    assert_eq!(wait_exit(&mut h, T).code(), Some(79));
    let lost = s.last_run("lost");
    assert_eq!(lost.ending(), Some("lost"), "{lost:?}");
    assert_eq!(
        (lost.owner.as_str(), lost.acquired),
        (started.owner.as_str(), started.acquired)
    );
    assert_eq!(s.last_success("lost"), None);
}

/// The lease passes while dlock is stopped, and the command exits 0 before dlock runs again: its
/// release finds the lock lost (79), the run ends `lost`, and the last success stays what it was.
/// Once granted free (released in plain SQL), once after a wait (released by the function).
fn a_command_that_succeeds_after_its_lease_passed_ends_lost(s: &Store) {
    let lose = || {
        wait_until("the stopped holder's lease to pass", T, || {
            code(&output(s.dlock(&["status", "late"]))) == 1
        })
    };
    let run = s.dlock(&["run", "--ttl", "1s", "late"]);
    let (status, said) = succeed_after_a_silent_loss(run, s.dir.path(), lose);
    assert_eq!(status, 79, "{said}");
    assert!(
        said.contains("the lock was lost before the command ended"),
        "found by the release: {said}"
    );
    let lost = s.last_run("late");
    assert_eq!((lost.token, lost.ending()), (1, Some("lost")), "{lost:?}");
    assert_eq!(s.last_success("late"), None);
    let out = output(s.dlock(&["status", "late", "--ran-within", "1h"]));
    assert_eq!(code(&out), 2, "never succeeded: {}", stdout(&out));

    // The next run waits behind a holder, which succeeds, so that it is granted after a wait.
    let mut holder = s.holder(&[], "late", "h");
    let waited = std::thread::scope(|scope| {
        scope.spawn(|| {
            wait_until("the run to wait in line", T, || {
                let out = output(s.dlock(&["status", "--json", "late"]));
                let json: serde_json::Value =
                    serde_json::from_str(&stdout(&out)).unwrap_or_default();
                json["waiters"].as_array().is_some_and(|w| !w.is_empty())
            });
            s.let_go("h");
        });
        let run = s.dlock(&["run", "--ttl", "1s", "late"]);
        succeed_after_a_silent_loss(run, s.dir.path(), lose)
    });
    assert_eq!(wait_exit(&mut holder, T).code(), Some(0));
    assert_eq!(waited.0, 79, "{}", waited.1);
    let lost = s.last_run("late");
    assert_eq!((lost.token, lost.ending()), (3, Some("lost")), "{lost:?}");
    let success = s.last_success("late").expect("the holder's success");
    assert_eq!(
        (success.token, success.pid, success.ending()),
        (2, holder.id(), Some("exit:0")),
        "the holder's success stays the last"
    );
}

fn release_force_writes_forced_and_the_holders_own_release_leaves_it(s: &Store) {
    let mut h = s.holder(&["--ttl", "1s"], "stuck", "h");
    let out = output(s.dlock(&["release", "--force", "stuck"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let forced = s.last_run("stuck");
    assert_eq!((forced.token, forced.ending()), (1, Some("forced")));
    // The holder notices at its next renewal, and its release finds the record ended.
    assert_eq!(wait_exit(&mut h, T).code(), Some(79));
    assert_eq!(s.last_run("stuck"), forced, "forced stays forced");
    assert_eq!(s.last_success("stuck"), None);
}

fn a_holder_killed_with_sigkill_leaves_its_run_not_ended(s: &Store) {
    let mut h = s.holder(&["--ttl", "1s"], "killed", "h");
    let pid = h.id();
    signal(pid, libc::SIGKILL);
    let _ = wait_exit(&mut h, T);
    s.let_go("h");
    // Its lease passes; the record stays as the grant wrote it.
    wait_until("the lease to pass", T, || {
        code(&output(s.dlock(&["status", "killed"]))) == 1
    });
    let never = s.last_run("killed");
    assert_eq!(
        (never.token, never.pid, never.ended, never.ending()),
        (1, pid, None, None),
        "{never:?}"
    );
    // Breaking a lease that passed ends nobody's run.
    let _ = output(s.dlock(&["release", "--force", "killed"]));
    assert_eq!(s.last_run("killed"), never);
    let (_, status) = s.run(&["run", "killed", "--", "true"]);
    assert_eq!(status, 0);
    assert_eq!(s.last_run("killed").token, 2);
}

fn an_earlier_shared_holders_release_never_overwrites_a_later_run(s: &Store) {
    let mut a = s.holder(&["--shared"], "rw", "a");
    let mut b = s.holder(&["--shared"], "rw", "b");
    let later = s.last_run("rw");
    assert_eq!((later.token, later.pid, later.ending()), (2, b.id(), None));
    s.let_go("a");
    assert!(wait_exit(&mut a, T).success());
    assert_eq!(s.last_run("rw"), later, "a's release kept b's record");
    let a_ok = s.last_success("rw").expect("a's success");
    assert_eq!(
        (a_ok.token, a_ok.pid, a_ok.ending()),
        (1, a.id(), Some("exit:0"))
    );
    s.let_go("b");
    assert!(wait_exit(&mut b, T).success());
    let b_ok = s.last_run("rw");
    assert_eq!((b_ok.token, b_ok.ending()), (2, Some("exit:0")));
    assert_eq!(s.last_success("rw"), Some(b_ok));
}

fn hostile_records_never_stop_acquiring_or_releasing(s: &Store) {
    let p = &s.prefix;
    // A first run makes the tables.
    assert_eq!(s.run(&["run", "other", "--", "true"]).1, 0);
    let (garbage, long, now) = match s.kind {
        Kind::Pg => (r"E'\x1b[2Jrun1 1 1 - - 1 x'", "repeat('y', 5000)", "now()"),
        Kind::My => (
            "X'1b5b324aff0072756e31'",
            "REPEAT('y', 1000)",
            "UTC_TIMESTAMP(6)",
        ),
    };
    s.sql(&format!(
        "INSERT INTO {p}runs (name, last_run, last_success, written_at) \
         VALUES ('evil', {garbage}, {long}, {now})"
    ));
    // `list --runs` shows the garbage escaped, and leaves out a row whose name no lock has.
    let bad_name = match s.kind {
        Kind::Pg => r"E'bad\x07'",
        Kind::My => "X'62616407'",
    };
    s.sql(&format!(
        "INSERT INTO {p}runs (name, last_run, last_success, written_at) \
         VALUES ({bad_name}, {garbage}, NULL, {now})"
    ));
    let out = output(s.dlock(&["list", "--runs"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    let names: Vec<&str> = text
        .lines()
        .filter_map(|line| line.split_once('\t').map(|(name, _)| name))
        .collect();
    assert_eq!(names, ["evil", "other"], "{text}");
    assert!(
        text.contains("evil\tfree, last run unreadable record \""),
        "{text}"
    );
    let (_, status) = s.run(&["run", "evil", "--", "true"]);
    assert_eq!(status, 0, "acquired and released past garbage");
    let ok = s.last_run("evil");
    assert_eq!(ok.ending(), Some("exit:0"));
    assert_eq!(s.last_success("evil"), Some(ok));

    // Garbage written while a run holds the lock: its release still goes through, leaves the
    // garbage, and writes its success.
    let mut h = s.holder(&[], "evil", "h");
    s.sql(&format!(
        "UPDATE {p}runs SET last_run = {garbage}, last_success = {long} WHERE name = 'evil'"
    ));
    s.let_go("h");
    assert!(wait_exit(&mut h, T).success());
    assert!(
        s.raw("evil", "last_run").unwrap().starts_with(b"\x1b[2J"),
        "the garbage was left as it was"
    );
    let ok = s.last_success("evil").expect("the success");
    assert_eq!((ok.token, ok.pid, ok.ending()), (2, h.id(), Some("exit:0")));
    // Forcing a lock whose record is garbage breaks it all the same.
    let mut h = s.holder(&["--ttl", "1s"], "evil", "h2");
    s.sql(&format!(
        "UPDATE {p}runs SET last_run = {garbage} WHERE name = 'evil'"
    ));
    let out = output(s.dlock(&["release", "--force", "evil"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(wait_exit(&mut h, T).code(), Some(79));
}

fn a_min_hold_keeps_the_lock_past_the_ending_unless_nothing_ran(s: &Store) {
    let (_, status) = s.run(&[
        "run",
        "--min-hold",
        "60s",
        "kept",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    assert_eq!(status, 3);
    let out = output(s.dlock(&["run", "-n", "kept", "--", "true"]));
    assert_eq!(code(&out), 75, "kept by the min-hold: {}", stderr(&out));
    let ended = s.last_run("kept");
    assert_eq!(
        (ended.token, ended.ending()),
        (1, Some("exit:3")),
        "{ended:?}"
    );

    // With a second name busy, nothing runs: the first is given back at once, min-hold or not.
    let mut b = s.holder(&[], "b", "hb");
    let (_, status) = s.run(&["run", "-n", "--min-hold", "60s", "a", "b", "--", "true"]);
    assert_eq!(status, 75);
    let not_run = s.last_run("a");
    assert_eq!(not_run.ending(), Some("not-run"), "{not_run:?}");
    let out = output(s.dlock(&["run", "-n", "a", "--", "true"]));
    assert_eq!(code(&out), 0, "given back at once: {}", stderr(&out));
    s.let_go("hb");
    assert!(wait_exit(&mut b, T).success());
}

fn tables_of_an_older_dlock_gain_the_records(s: &Store) {
    let p = &s.prefix;
    // The tables as dlock made them before it kept its runs, with a counter at 41.
    match s.kind {
        Kind::Pg => s.sql(&format!(
            "CREATE TABLE {p}tokens (name text PRIMARY KEY, last_token bigint NOT NULL); \
             CREATE TABLE {p}locks (name text NOT NULL, owner text NOT NULL, mode text NOT NULL, \
               token bigint NOT NULL, since timestamptz NOT NULL, \
               expires_at timestamptz NOT NULL, pid bigint NOT NULL, host text NOT NULL, \
               kept_until timestamptz, kept_note text, message text, \
               PRIMARY KEY (name, owner)); \
             CREATE TABLE {p}queue (ticket bigserial PRIMARY KEY, name text NOT NULL, \
               owner text NOT NULL, mode text NOT NULL, alive_until timestamptz NOT NULL, \
               since timestamptz, pid bigint, host text, message text); \
             CREATE INDEX {p}queue_by_name ON {p}queue (name, ticket); \
             INSERT INTO {p}tokens VALUES ('old', 41)"
        )),
        Kind::My => s.sql(&format!(
            "CREATE TABLE {p}tokens (name VARBINARY(512) NOT NULL PRIMARY KEY, \
               last_token BIGINT NOT NULL) ENGINE = InnoDB; \
             CREATE TABLE {p}locks (name VARBINARY(512) NOT NULL, owner VARBINARY(64) NOT NULL, \
               mode VARBINARY(32) NOT NULL, token BIGINT NOT NULL, since DATETIME(6) NOT NULL, \
               expires_at DATETIME(6) NOT NULL, pid BIGINT NOT NULL, \
               host VARBINARY(255) NOT NULL, message VARBINARY(1024) NULL, \
               kept_until DATETIME(6) NULL, kept_note VARBINARY(64) NULL, \
               PRIMARY KEY (name, owner)) ENGINE = InnoDB; \
             CREATE TABLE {p}queue (ticket BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
               name VARBINARY(512) NOT NULL, owner VARBINARY(64) NOT NULL, \
               mode VARBINARY(32) NOT NULL, alive_until DATETIME(6) NOT NULL, \
               since DATETIME(6) NULL, pid BIGINT NULL, host VARBINARY(255) NULL, \
               message VARBINARY(1024) NULL, KEY {p}queue_by_name (name, ticket)) \
               ENGINE = InnoDB; \
             INSERT INTO {p}tokens VALUES ('old', 41)"
        )),
    };
    let (_, status) = s.run(&["run", "old", "--", "true"]);
    assert_eq!(status, 0);
    let ok = s.last_run("old");
    assert_eq!((ok.token, ok.ending()), (42, Some("exit:0")), "{ok:?}");
    assert_eq!(s.last_success("old"), Some(ok));
}

fn names_unwritten_for_400_days_lose_their_records_at_the_next_list(s: &Store) {
    let p = &s.prefix;
    for name in ["stale", "recent", "now"] {
        assert_eq!(s.run(&["run", name, "--", "true"]).1, 0);
    }
    let (stale, recent) = match s.kind {
        Kind::Pg => ("now() - interval '401 days'", "now() - interval '399 days'"),
        Kind::My => (
            "UTC_TIMESTAMP(6) - INTERVAL 401 DAY",
            "UTC_TIMESTAMP(6) - INTERVAL 399 DAY",
        ),
    };
    s.sql(&format!(
        "UPDATE {p}runs SET written_at = {stale} WHERE name = 'stale'; \
         UPDATE {p}runs SET written_at = {recent} WHERE name = 'recent'"
    ));
    assert_eq!(s.run(&["run", "now", "--", "true"]).1, 0);
    assert!(
        s.raw("stale", "last_run").is_some(),
        "a run deletes nothing"
    );
    // Not shown by `list --runs` before any list deletes it.
    let out = output(s.dlock(&["list", "--runs", "--json"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let names: Vec<&str> = listed
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(names, ["now", "recent"], "{listed:#}");
    let out = output(s.dlock(&["list"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(s.raw("stale", "last_run"), None, "deleted by the list");
    assert_eq!(s.last_run("recent").ending(), Some("exit:0"), "kept");
    assert_eq!(s.last_run("now").token, 2);
}

/// `status NAME --ran-within 1h`: its exit status and its line.
fn ran_within_1h(s: &Store, name: &str) -> (i32, String) {
    let out = output(s.dlock(&["status", name, "--ran-within", "1h"]));
    (code(&out), stdout(&out))
}

fn a_success_dated_after_the_servers_time_is_unreadable_never_ok(s: &Store) {
    assert_eq!(s.run(&["run", "future", "--", "true"]).1, 0);
    assert_eq!(ran_within_1h(s, "future").0, 0, "a success just now");
    for column in ["last_run", "last_success"] {
        let raw = String::from_utf8(s.raw("future", column).expect("a record")).expect("UTF-8");
        let later = run_records::dated_later(&raw, run_records::THIRTY_DAYS_MS);
        s.sql(&format!(
            "UPDATE {}runs SET {column} = '{later}' WHERE name = 'future'",
            s.prefix
        ));
    }
    let (status, line) = ran_within_1h(s, "future");
    assert_eq!(status, 3, "UNKNOWN: {line}");
    assert!(
        line.starts_with("UNKNOWN: future has an unreadable record of its last success")
            && line.contains("dated after"),
        "{line}"
    );
}

fn list_runs_says_it_stopped_at_ten_thousand_names_and_exits_1(s: &Store) {
    assert_eq!(s.run(&["run", "a", "--", "true"]).1, 0);
    let p = &s.prefix;
    let record = String::from_utf8(s.raw("a", "last_run").expect("a record")).expect("UTF-8");
    s.sql(&match s.kind {
        Kind::Pg => format!(
            "INSERT INTO {p}runs (name, last_run, written_at) \
             SELECT 'n' || lpad(i::text, 5, '0'), '{record}', clock_timestamp() \
             FROM generate_series(0, 10000) i"
        ),
        Kind::My => format!(
            "SET SESSION max_recursive_iterations = 20000; \
             INSERT INTO {p}runs (name, last_run, written_at) \
             WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 10000) \
             SELECT CONCAT('n', LPAD(i, 5, '0')), '{record}', UTC_TIMESTAMP(6) FROM s"
        ),
    });
    let out = output(s.dlock(&["list", "--runs", "n"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 10_000);
    assert!(
        stderr(&out).starts_with("dlock: list --runs stopped after the first 10000 names"),
        "{}",
        stderr(&out)
    );
}
