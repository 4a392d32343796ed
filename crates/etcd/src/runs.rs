//! What etcd keeps of a lock's runs (lock/last_run.rs): two keys per lock beside its prefix,
//! `/dlock/NAME:last-run` and `/dlock/NAME:last-success`, one run record each, with no lease.
//! Beside the prefix, not under it: `etcdctl lock /dlock/NAME` takes every key under
//! `/dlock/NAME/` for a waiter. Under `/dlock/` all the same, so that a user whose role may touch
//! only `/dlock/` keeps its records; no lock's key is one of these (a lock's keys have a `/` after
//! the name), and `list` tells them apart.
//!
//! etcd tells no time of day, so the times are the writer's clock. An exclusive acquisition that
//! owns at once writes its run in the transaction that queues its key, in a transaction inside it
//! that writes only if no key was under the prefix before; the token (its key's create revision)
//! is not known before that transaction, so the record says 0 until the run ends, and the record
//! key's mod revision, the same transaction's, stands for it when read. Others write their run
//! right after they own the lock. A release, and `release --force`, write the ending in their own
//! transaction, over the record only when its mod revision is still the one the acquisition wrote
//! (still this run's, not ended). `list` removes records whose last event is
//! `RUN_RECORD_KEPT_FOR` old by its clock, at the mod revision it read.

use std::time::SystemTime;

use super::connection::{bounded, Connection, Fault, CALL_TIMEOUT};
use super::naming::{escaped_name, ROOT};
use super::rpc::{Compare, KeyValue, RangeRequest, RequestOp, TxnRequest};
use dlock_core::lock::last_run::{READER_CLOCK_SKEW, RUN_RECORD_KEPT_FOR};
use dlock_core::lock::{Ending, LastRuns, LockName, LockRequest, Run, Token};

const LAST_RUN: &str = ":last-run";
const LAST_SUCCESS: &str = ":last-success";

/// The two record keys of one lock.
#[derive(Clone, Debug)]
pub(super) struct RunKeys {
    pub(super) last_run: String,
    pub(super) last_success: String,
}

impl RunKeys {
    pub(super) fn of(name: &LockName) -> RunKeys {
        let name = escaped_name(name);
        RunKeys {
            last_run: format!("{ROOT}{name}{LAST_RUN}"),
            last_success: format!("{ROOT}{name}{LAST_SUCCESS}"),
        }
    }
}

/// Whether `key` is a record key of a lock, its runs' or its group's (for `list`).
pub(super) fn is_record(key: &[u8]) -> bool {
    record_name(key).is_some()
}

/// The lock whose record `key` is, if it is one (for `list --runs`).
pub(super) fn record_name(key: &[u8]) -> Option<LockName> {
    let rest = std::str::from_utf8(key.strip_prefix(ROOT.as_bytes())?).ok()?;
    let name = rest
        .strip_suffix(LAST_RUN)
        .or_else(|| rest.strip_suffix(LAST_SUCCESS))
        .or_else(|| rest.strip_suffix(super::group::GROUP))?;
    dlock_core::text::percent_decode(name)
        .and_then(|decoded| LockName::new(&decoded).ok())
        .filter(|lock| escaped_name(lock) == name)
}

/// A held lock's run: the record, and the mod revision of the last-run key its acquisition wrote
/// (`None`: not written, and the release then writes no ending into it).
pub(super) struct OurRun {
    keys: RunKeys,
    run: Run,
    revision: Option<i64>,
}

impl OurRun {
    /// The run `request` is acquiring, now; its token is filled in once known.
    pub(super) fn new(request: &LockRequest) -> OurRun {
        OurRun {
            keys: RunKeys::of(&request.name),
            run: Run::started(
                &request.owner,
                0,
                request.message.as_deref(),
                SystemTime::now(),
            ),
            revision: None,
        }
    }

    /// For the transaction that queues an exclusive key under `prefix`: the run, written as the
    /// last run only if no key was under the prefix (the key owns the lock at once). Then
    /// `written_with` the transaction's revision.
    pub(super) fn if_first(&self, prefix: &str) -> RequestOp {
        RequestOp::txn(TxnRequest::new(
            vec![Compare::none_under(prefix)],
            vec![RequestOp::put(
                self.keys.last_run.as_str(),
                self.run.record(),
                0,
            )],
        ))
    }

    /// Whether the acquisition wrote the run.
    pub(super) fn written(&self) -> bool {
        self.revision.is_some()
    }

    /// The run was written with the transaction that made its key (`token`) at that revision.
    pub(super) fn written_with(&mut self, token: i64) {
        self.run.token = Token::try_from(token).ok();
        self.revision = Some(token);
    }

    /// Writes the run as the last run once its key (`key`, `token`) owns the lock, if the key is
    /// still there. Best effort: a run not written is no reason to give the lock up.
    pub(super) async fn write(&mut self, conn: &Connection, key: &str, created: i64, token: i64) {
        self.run.token = Token::try_from(token).ok();
        self.run.acquired = Some(SystemTime::now());
        let txn = TxnRequest::new(
            vec![Compare::created_at(key, created)],
            vec![RequestOp::put(
                self.keys.last_run.as_str(),
                self.run.record(),
                0,
            )],
        );
        if let Ok(done) = bounded(CALL_TIMEOUT, conn.client().txn(txn)).await {
            if done.succeeded && done.revision() > 0 {
                self.revision = Some(done.revision());
            }
        }
    }

    /// What a release's transaction does beside its own work: when its key was still there
    /// (`ours`), the ending into the last run if that is still this run's record, and a success
    /// as the last success; when it was gone (`lost`), `lost` into the last run on the same terms.
    pub(super) fn ending(&self, ending: Ending) -> EndingOps {
        let now = SystemTime::now();
        let ended = self.run.clone().ended(ending, now).record();
        let mut ours = Vec::new();
        let mut lost = Vec::new();
        if let Some(revision) = self.revision {
            let over = |record: String| {
                RequestOp::txn(TxnRequest::new(
                    vec![Compare::modified_at(self.keys.last_run.as_str(), revision)],
                    vec![RequestOp::put(self.keys.last_run.as_str(), record, 0)],
                ))
            };
            ours.push(over(ended.clone()));
            lost.push(over(self.run.clone().ended(Ending::Lost, now).record()));
        }
        if ending.succeeded() {
            ours.push(RequestOp::put(self.keys.last_success.as_str(), ended, 0));
        }
        EndingOps { ours, lost }
    }
}

/// See `OurRun::ending`.
pub(super) struct EndingOps {
    pub(super) ours: Vec<RequestOp>,
    pub(super) lost: Vec<RequestOp>,
}

/// A record key's value as a run; while not ended, a token of 0 stands for the key's mod revision
/// (see the module's documentation).
fn run_of(kv: &KeyValue) -> Run {
    let mut run = Run::from_record(&String::from_utf8_lossy(&kv.value));
    if run.unreadable.is_none() && run.ending.is_none() && run.token == Some(0) {
        run.token = Token::try_from(kv.mod_revision).ok();
    }
    run
}

/// The lock's last run and last success, read in one transaction.
pub(super) async fn read(conn: &Connection, name: &LockName) -> Result<LastRuns, Fault> {
    let keys = RunKeys::of(name);
    let txn = TxnRequest::new(
        vec![],
        vec![
            RequestOp::range(RangeRequest::key(&keys.last_run)),
            RequestOp::range(RangeRequest::key(&keys.last_success)),
        ],
    );
    let read = bounded(CALL_TIMEOUT, conn.client().txn(txn)).await?;
    let mut runs = read.ranges().map(|range| range.kvs.first().map(run_of));
    // etcd tells no time of day: the records were dated by their writers' clocks, and are judged
    // by this host's.
    Ok(LastRuns {
        last_run: runs.next().flatten(),
        last_success: runs.next().flatten(),
    }
    .judged_at(SystemTime::now(), READER_CLOCK_SKEW))
}

/// For `release --force` of the holder whose key was created at `token` by `owner`: the operation
/// that writes `forced` into the last run if that is this holder's run, not ended, and unchanged
/// since `last_run` was read.
pub(super) fn forced(
    name: &LockName,
    last_run: Option<&KeyValue>,
    owner: &str,
    token: i64,
) -> Option<RequestOp> {
    let kv = last_run?;
    let mut run = run_of(kv);
    let token = Token::try_from(token).ok();
    if run.unreadable.is_some() || run.ending.is_some() || run.owner != owner || run.token != token
    {
        return None;
    }
    run.token = token;
    let record = run.ended(Ending::Forced, SystemTime::now()).record();
    let key = RunKeys::of(name).last_run;
    Some(RequestOp::txn(TxnRequest::new(
        vec![Compare::modified_at(key.as_str(), kv.mod_revision)],
        vec![RequestOp::put(key, record, 0)],
    )))
}

/// The last-run key of `name` as read now, if any.
pub(super) async fn last_run_kv(
    conn: &Connection,
    name: &LockName,
) -> Result<Option<KeyValue>, Fault> {
    let key = RunKeys::of(name).last_run;
    let read = bounded(CALL_TIMEOUT, conn.client().range(RangeRequest::key(&key))).await?;
    Ok(read.kvs.into_iter().next())
}

/// For `list`, among the keys it read: removes each record whose last event is
/// `RUN_RECORD_KEPT_FOR` old by this machine's clock, if it was not written since. Best effort.
pub(super) async fn expire(conn: &Connection, kvs: &[KeyValue]) {
    let now = SystemTime::now();
    for kv in kvs.iter().filter(|kv| is_record(&kv.key)) {
        let run = Run::from_record(&String::from_utf8_lossy(&kv.value));
        if !expired(&run, now) {
            continue;
        }
        let txn = TxnRequest::new(
            vec![Compare::modified_at(kv.key.clone(), kv.mod_revision)],
            vec![RequestOp::delete(kv.key.clone())],
        );
        let _ = bounded(CALL_TIMEOUT, conn.client().txn(txn)).await;
    }
}

/// Whether a record's last event was `RUN_RECORD_KEPT_FOR` ago or more by `now`; one that does not
/// read has no time, and stays.
fn expired(run: &Run, now: SystemTime) -> bool {
    let Some(last) = run.ended.or(run.acquired) else {
        return false;
    };
    now.duration_since(last)
        .is_ok_and(|age| age >= RUN_RECORD_KEPT_FOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    fn at(ms: u64) -> SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
    }

    #[test]
    fn record_keys_sit_beside_the_prefix_and_are_told_apart() {
        let keys = RunKeys::of(&name("a/b c"));
        assert_eq!(keys.last_run, "/dlock/a%2Fb%20c:last-run");
        assert_eq!(keys.last_success, "/dlock/a%2Fb%20c:last-success");
        assert!(!keys
            .last_run
            .starts_with(&super::super::naming::prefix(&name("a/b c"))));
        assert!(is_record(keys.last_run.as_bytes()));
        assert!(is_record(keys.last_success.as_bytes()));
        assert!(is_record(b"/dlock/x:last-run:last-run"), "lock x:last-run");
        assert!(!is_record(b"/dlock/x/1:last-run"));
        assert!(!is_record(b"/dlock/a%2fb:last-run"), "not dlock's spelling");
        assert!(!is_record(b"/dlock/:last-run"));
        assert!(!is_record(b"/dlock/x:last-runs"));
    }

    #[test]
    fn a_running_record_takes_its_token_from_the_keys_mod_revision() {
        let kv = |value: &str| KeyValue {
            key: b"/dlock/x:last-run".to_vec(),
            create_revision: 3,
            mod_revision: 9,
            value: value.as_bytes().to_vec(),
            lease: 0,
        };
        let owner = "0123456789abcdef0123456789abcdef";
        let running = run_of(&kv(&format!("run1 0 1000 - - 42 {owner} h")));
        assert_eq!(running.token, Some(9));
        let ended = run_of(&kv(&format!("run1 0 1000 2000 exit:0 42 {owner} h")));
        assert_eq!(ended.token, Some(0));
        let written = run_of(&kv(&format!("run1 5 1000 - - 42 {owner} h")));
        assert_eq!(written.token, Some(5));
        assert!(run_of(&kv("\u{1b}[2J")).unreadable.is_some());
        // `release --force` of the holder made at revision 9 by that owner.
        let running = kv(&format!("run1 0 1000 - - 42 {owner} h"));
        assert!(forced(&name("x"), Some(&running), owner, 9).is_some());
        assert!(forced(&name("x"), Some(&running), owner, 8).is_none());
        assert!(forced(
            &name("x"),
            Some(&running),
            "ffffffffffffffffffffffffffffffff",
            9
        )
        .is_none());
    }

    /// An etcd of this test's own on loopback, killed when dropped (and then its data directory
    /// removed).
    struct Etcd(
        std::process::Child,
        u16,
        #[allow(dead_code)] tempfile::TempDir,
    );

    impl Etcd {
        fn start() -> Etcd {
            let port = || {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .expect("a free port")
                    .port()
            };
            let (client, peer) = (port(), port());
            let dir = tempfile::tempdir().expect("a data directory");
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let child = crate::test_programs::program("etcd")
                .args(["--name", "t", "--data-dir"])
                .arg(dir.path())
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("t={peer_url}")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start etcd (Debian's etcd-server)");
            let etcd = Etcd(child, client, dir);
            // Serving once it answers a read.
            let started = std::time::Instant::now();
            while dlock_core::backend::Backend::last_runs(&etcd.backend(), &name("x")).is_err() {
                assert!(started.elapsed().as_secs() < 30, "etcd did not start");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            etcd
        }

        fn backend(&self) -> super::super::EtcdBackend {
            let config = dlock_core::backend::BackendConfig {
                urls: vec![format!("etcd://127.0.0.1:{}", self.1)],
                connect_timeout: std::time::Duration::from_secs(20),
                create: false,
                replicas: 0,
                stop: Default::default(),
                trust_owners: vec![],
            };
            super::super::EtcdBackend::open(&config).expect("open the backend")
        }
    }

    impl Drop for Etcd {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn last_runs_reads_what_acquisitions_and_releases_wrote() {
        use dlock_core::backend::{Attempt, Backend};
        use dlock_core::lock::{Mode, RunEnd};
        let etcd = Etcd::start();
        let backend = etcd.backend();
        let lock = name("runs");
        let request = LockRequest {
            name: lock.clone(),
            mode: Mode::Exclusive,
            ttl: std::time::Duration::from_secs(10),
            owner: "0123456789abcdef0123456789abcdef".into(),
            message: Some("m".into()),
            min_hold: None,
        };
        let take = || match backend.try_acquire(&request).expect("acquire") {
            Attempt::Acquired(lease) => lease,
            Attempt::Busy(_) => panic!("busy"),
        };
        assert_eq!(backend.last_runs(&lock).expect("read"), LastRuns::default());
        let lease = take();
        let token = lease.token();
        let runs = backend.last_runs(&lock).expect("read");
        let run = runs.last_run.expect("a last run");
        assert_eq!((run.token, run.ending), (Some(token), None), "{run:?}");
        assert_eq!(run.message.as_deref(), Some("m"));
        assert_eq!(runs.last_success, None);
        let end = RunEnd {
            ending: Ending::Exited(0),
            keep: true,
        };
        lease.release(&end).expect("release");
        let runs = backend.last_runs(&lock).expect("read");
        let run = runs.last_run.expect("a last run");
        assert_eq!(
            (run.token, run.ending),
            (Some(token), Some(Ending::Exited(0)))
        );
        assert_eq!(runs.last_success, Some(run));

        // What another client wrote there is shown escaped, never trusted.
        let conn = backend.connection().expect("connected");
        let keys = RunKeys::of(&lock);
        let forged = TxnRequest::new(
            vec![],
            vec![RequestOp::put(keys.last_run.as_str(), "run1 \u{1b}[2J", 0)],
        );
        conn.runtime()
            .block_on(conn.client().txn(forged))
            .expect("put");
        let run = backend.last_runs(&lock).expect("read").last_run.unwrap();
        assert!(run
            .unreadable
            .is_some_and(|u| u.contains("run1") && !u.contains('\u{1b}')));

        // `list_runs`: the lock with its records; one whose only record is 400 days old is
        // removed and not shown, and a key under another name's prefix is not this one's.
        let old = RunKeys::of(&name("runs-old"));
        let aged = format!("run1 1 1000 2000 exit:0 42 {} h", request.owner);
        let put = TxnRequest::new(
            vec![],
            vec![RequestOp::put(old.last_run.as_str(), aged.as_str(), 0)],
        );
        conn.runtime()
            .block_on(conn.client().txn(put))
            .expect("put");
        let listed = backend.list_runs("run").expect("list").runs;
        let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["runs"], "{listed:?}");
        assert!(listed[0]
            .1
            .last_run
            .as_ref()
            .is_some_and(|r| r.unreadable.is_some()));
        let gone = backend.last_runs(&name("runs-old")).expect("read");
        assert_eq!(gone, LastRuns::default(), "removed");
        assert!(backend.list_runs("other").expect("list").runs.is_empty());
    }

    #[test]
    fn records_go_after_four_hundred_days_without_an_event() {
        let day = 24 * 3600 * 1000;
        let owner = "0123456789abcdef0123456789abcdef";
        let run = Run::from_record(&format!("run1 1 {day} {} exit:0 42 {owner} h", 2 * day));
        assert!(!expired(&run, at(401 * day)));
        assert!(expired(&run, at(402 * day)));
        let running = Run::from_record(&format!("run1 1 {day} - - 42 {owner} h"));
        assert!(expired(&running, at(401 * day)));
        assert!(!expired(&Run::from_record("junk"), at(u64::MAX / 4)));
    }
}
