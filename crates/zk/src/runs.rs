//! What the ensemble keeps of a lock's runs (lock/last_run.rs): two persistent nodes per lock,
//! `/dlock/.last-run/NAME` and `/dlock/.last-success/NAME`, one run record each. Not in the lock's
//! own directory: that is a container node the server deletes once it is empty (Curator makes it
//! one too), and its children are what Curator and kazoo queue by. No lock name maps to a child of
//! `/dlock` that starts with a dot (names escape a leading `.`), so `list` and the recipes never
//! take these for locks.
//!
//! Times are the ensemble's: each write stamps the node's mtime, which `read` puts in place of the
//! time the record says for its last event (the acquisition while a run lasts, its end once it has
//! ended); the text itself carries this client's reckoning of the ensemble's time. ZooKeeper has no
//! TTL nodes unless the server enables them, so `list` removes the records whose node was not
//! written for `RUN_RECORD_KEPT_FOR`, by their mtime and the ensemble's time.
//!
//! Every write here is best effort and bounded: a record that cannot be written (another
//! identity's node, something else in its place, a slow ensemble) never stops a lock being taken
//! or given up.

use dlock_core::error;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use zookeeper_client as zk;

use super::ensemble_clock::{ask_ensemble, EnsembleClock};
use super::naming::{lock_name_of, node_name};
use super::session::{is_connection_loss, Session};
use super::{CLEANUP_TIMEOUT, MAX_RETRIES};
use dlock_core::lock::last_run::RUN_RECORD_KEPT_FOR;
use dlock_core::lock::{Ending, LastRuns, LockName, LockRequest, Run, Token};

/// The directories of the two records, under `/dlock`.
const LAST_RUN: &str = ".last-run";
const LAST_SUCCESS: &str = ".last-success";

/// The two record nodes of one lock.
#[derive(Clone, Debug)]
pub(super) struct RunNodes {
    pub(super) last_run: String,
    pub(super) last_success: String,
}

impl RunNodes {
    pub(super) fn of(session: &Session, name: &LockName) -> RunNodes {
        let node = node_name(name);
        RunNodes {
            last_run: format!("{}/{LAST_RUN}/{node}", session.root),
            last_success: format!("{}/{LAST_SUCCESS}/{node}", session.root),
        }
    }
}

/// A held lock's run: the record, and the version of the last-run node the acquisition's write
/// gave it. The release writes the ending only over that version, so only into a record that is
/// still this run's and not ended (a later acquisition, or `release --force`, changes the version).
pub(super) struct OurRun {
    pub(super) nodes: RunNodes,
    run: Run,
    /// `None`: the acquisition could not write it; the release then writes no ending.
    pub(super) version: Option<i32>,
    /// The ensemble's time, in milliseconds, at `at` on this machine's monotonic clock.
    ensemble_ms: i64,
    at: Instant,
}

impl OurRun {
    /// The ensemble's time now, by this client's reckoning.
    fn now(&self) -> SystemTime {
        let since = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        time_of(self.ensemble_ms.saturating_add(since)).unwrap_or_else(SystemTime::now)
    }

    /// The record of this run ended as `ending`, now.
    pub(super) fn ended(&self, ending: Ending) -> Vec<u8> {
        self.run
            .clone()
            .ended(ending, self.now())
            .record()
            .into_bytes()
    }

    /// Ends the record as `ending` on its own (the lock found lost before its release), if it is
    /// still this run's. Best effort, bounded.
    pub(super) async fn end_now(&self, session: &Session, ending: Ending) {
        let (Some(version), Some(client)) = (self.version, session.client.as_ref()) else {
            return;
        };
        let write = client.set_data(&self.nodes.last_run, &self.ended(ending), Some(version));
        let _ = tokio::time::timeout(CLEANUP_TIMEOUT, write).await;
    }
}

fn time_of(ms: i64) -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).ok()?))
}

/// Writes the run `request` has just acquired (`token`) as the lock's last run, and makes sure the
/// last-success node exists for its release to write into: the two requests go out together, so
/// this is one round trip once the nodes exist.
pub(super) async fn started(
    session: &Session,
    request: &LockRequest,
    token: Token,
    clock: &EnsembleClock,
) -> OurRun {
    let nodes = RunNodes::of(session, &request.name);
    let ensemble_ms = clock.now_ms();
    let acquired = time_of(ensemble_ms).unwrap_or_else(SystemTime::now);
    let run = Run::started(&request.owner, token, request.message.as_deref(), acquired);
    let data = run.record().into_bytes();
    let client = session.client();
    let write = async {
        let set = client.set_data(&nodes.last_run, &data, None);
        let success = client.check_stat(&nodes.last_success);
        let (set, success) = tokio::join!(set, success);
        let stat = match set {
            Ok(stat) => Some(stat),
            Err(zk::Error::NoNode) => create(session, &nodes.last_run, &data).await,
            Err(_) => None,
        };
        if matches!(success, Ok(None)) {
            create(session, &nodes.last_success, &[]).await;
        }
        stat
    };
    let stat = tokio::time::timeout(CLEANUP_TIMEOUT, write)
        .await
        .ok()
        .flatten();
    let mut ours = OurRun {
        nodes,
        run,
        version: None,
        ensemble_ms,
        at: Instant::now(),
    };
    if let Some(stat) = stat {
        // The write's own stamp is the acquisition's time by the ensemble's clock.
        ours.run.acquired = time_of(stat.mtime).or(ours.run.acquired);
        ours.ensemble_ms = stat.mtime;
        ours.version = Some(stat.version);
    }
    ours
}

/// Creates the record node `path` holding `data`, and its directory if missing; over a node made
/// meanwhile by another, writes `data` into it. Its stat, or `None` if it cannot be written.
async fn create(session: &Session, path: &str, data: &[u8]) -> Option<zk::Stat> {
    let client = session.client();
    let record = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&session.acls.lock));
    // Each identity may make records of its own locks in the directory.
    let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&session.acls.root));
    let (parent, _) = path.rsplit_once('/')?;
    // Bounded: the directory is made at most once, then the node is made or found.
    for _ in 0..3 {
        match client.create(path, data, &record).await {
            Ok((stat, _)) if !stat.is_invalid() => return Some(stat),
            // A server before 3.5 returns no stat from create.
            Ok(_) => return client.check_stat(path).await.ok().flatten(),
            Err(zk::Error::NoNode) => match client.create(parent, &[], &dir).await {
                Ok(_) | Err(zk::Error::NodeExists) => continue,
                Err(_) => return None,
            },
            Err(zk::Error::NodeExists) => return client.set_data(path, data, None).await.ok(),
            Err(_) => return None,
        }
    }
    None
}

/// A record node's data as a run: none when it is empty (a last-success node made before any
/// success), else the record, read as untrusted text, with the node's mtime as the time of the
/// record's last event.
fn run_of(data: &[u8], stat: &zk::Stat) -> Option<Run> {
    if data.is_empty() {
        return None;
    }
    let mut run = Run::from_record(&String::from_utf8_lossy(data));
    if run.unreadable.is_none() {
        let stamp = time_of(stat.mtime);
        match run.ending {
            Some(_) => run.ended = stamp.or(run.ended),
            None => run.acquired = stamp.or(run.acquired),
        }
    }
    Some(run)
}

/// The lock's last run and last success, read in one multi-read.
pub(super) async fn read(session: &Session, name: &LockName) -> error::Result<LastRuns> {
    let nodes = RunNodes::of(session, name);
    let client = session.client();
    let mut tries = 0;
    let results = loop {
        let mut reader = client.new_multi_reader();
        for path in [&nodes.last_run, &nodes.last_success] {
            reader
                .add_get_data(path)
                .map_err(|e| session.fail(e, &format!("cannot read {path}")))?;
        }
        match reader.commit().await {
            Err(e) if is_connection_loss(&e) && tries < MAX_RETRIES => tries += 1,
            result => {
                break result.map_err(|e| {
                    session.fail(
                        e,
                        &format!("cannot read the last runs of lock {:?}", name.as_str()),
                    )
                })?
            }
        }
    };
    let mut read = results.into_iter().map(|result| match result {
        zk::MultiReadResult::Data { data, stat } => Some((data, stat)),
        _ => None,
    });
    let (last_run, last_success) = (read.next().flatten(), read.next().flatten());
    let same = matches!((&last_run, &last_success), (Some((a, _)), Some((b, _))) if a == b);
    let last_run = last_run.and_then(|(data, stat)| run_of(&data, &stat));
    let last_success = match same {
        // One run, written into both by its release: stamped once, as the last run.
        true => last_run.clone(),
        false => last_success.and_then(|(data, stat)| run_of(&data, &stat)),
    };
    Ok(LastRuns {
        last_run,
        last_success,
    })
}

/// The locks with a node in either records directory (for `list --runs`); a child that is no
/// lock's node name is left out.
pub(super) async fn names(session: &Session) -> error::Result<Vec<LockName>> {
    let mut names = Vec::new();
    for dir in [LAST_RUN, LAST_SUCCESS] {
        let children = session.children(&format!("{}/{dir}", session.root)).await?;
        names.extend(children.iter().filter_map(|node| lock_name_of(node)));
    }
    Ok(names)
}

/// The last-run record as `release --force` reads it: the run and the version to write over.
pub(super) async fn last_run(session: &Session, name: &LockName) -> Option<(Run, i32)> {
    let nodes = RunNodes::of(session, name);
    let (data, stat) = session.client().get_data(&nodes.last_run).await.ok()?;
    let run = run_of(&data, &stat)?;
    Some((run, stat.version))
}

/// Removes the records whose node was last written `RUN_RECORD_KEPT_FOR` ago or more by the
/// ensemble's time, each only at the version read, so that a record written meanwhile stays.
/// For `list`; best effort.
pub(super) async fn expire(session: &Session) {
    let client = session.client();
    let mut asked = Vec::new();
    for dir in [LAST_RUN, LAST_SUCCESS] {
        let dir = format!("{}/{dir}", session.root);
        let Ok(names) = client.list_children(&dir).await else {
            continue;
        };
        // Every request goes out before the first answer is awaited: one round trip for all.
        for name in names {
            let path = format!("{dir}/{name}");
            asked.push((client.check_stat(&path), path));
        }
    }
    let mut found = Vec::new();
    for (stat, path) in asked {
        if let Ok(Some(stat)) = stat.await {
            found.push((path, stat));
        }
    }
    if found.is_empty() {
        return;
    }
    let Ok(now) = ask_ensemble(session).await else {
        return;
    };
    for (path, stat) in found {
        if expired(stat.mtime, now.now_ms()) {
            let _ = client.delete(&path, Some(stat.version)).await;
        }
    }
}

/// Whether a record last written at `mtime` has been kept long enough by `now` (both ensemble
/// milliseconds).
fn expired(mtime: i64, now: i64) -> bool {
    let kept = i64::try_from(RUN_RECORD_KEPT_FOR.as_millis()).unwrap_or(i64::MAX);
    now.saturating_sub(mtime) >= kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mtime: i64) -> zk::Stat {
        zk::Stat {
            czxid: 1,
            mzxid: 2,
            pzxid: 1,
            ctime: 1_000,
            mtime,
            version: 1,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 0,
            num_children: 0,
        }
    }

    #[test]
    fn the_nodes_mtime_is_the_time_of_the_records_last_event() {
        let running = "run1 17 1000 - - 42 0123456789abcdef host";
        let run = run_of(running.as_bytes(), &stat(5_000)).unwrap();
        assert_eq!(run.acquired, time_of(5_000));
        assert_eq!(run.ended, None);
        let ended = "run1 17 1000 2000 exit:3 42 0123456789abcdef host";
        let run = run_of(ended.as_bytes(), &stat(7_000)).unwrap();
        assert_eq!((run.acquired, run.ended), (time_of(1_000), time_of(7_000)));
        assert_eq!(run.ending, Some(Ending::Exited(3)));
        assert_eq!(run_of(b"", &stat(7_000)), None);
        let garbage = run_of(b"\x1b[2J\xff", &stat(7_000)).unwrap();
        assert!(garbage.unreadable.is_some_and(|u| !u.contains('\x1b')));
    }

    /// A ZooKeeper server of this test's own on loopback (Debian's zookeeper), killed when dropped
    /// (and then its data directory removed).
    struct Zk(
        std::process::Child,
        u16,
        #[allow(dead_code)] tempfile::TempDir,
    );

    impl Zk {
        fn start() -> Zk {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let dir = tempfile::tempdir().expect("a data directory");
            let config = dir.path().join("zoo.cfg");
            std::fs::write(
                &config,
                format!(
                    "tickTime=100\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                     admin.enableServer=false\n",
                    dir.path().display()
                ),
            )
            .expect("zoo.cfg");
            let mut classpath = "/usr/share/java/zookeeper.jar".to_owned();
            if std::path::Path::new("/usr/share/java/slf4j-nop.jar").exists() {
                classpath.push_str(":/usr/share/java/slf4j-nop.jar");
            }
            let child = crate::test_programs::program("java")
                .args(["-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", &classpath])
                .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
                .arg(&config)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start ZooKeeper (Debian's zookeeper and a JRE)");
            Zk(child, port, dir)
        }

        fn backend(&self) -> super::super::ZkBackend {
            let config = dlock_core::backend::BackendConfig {
                urls: vec![format!("zk://127.0.0.1:{}", self.1)],
                connect_timeout: Duration::from_secs(60),
                create: false,
                replicas: 0,
                stop: Default::default(),
                trust_owners: vec![],
            };
            super::super::ZkBackend::open(&config).expect("open the backend")
        }
    }

    impl Drop for Zk {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn last_runs_reads_what_acquisitions_and_releases_wrote_stamped_by_the_ensemble() {
        use dlock_core::backend::{Attempt, Backend};
        use dlock_core::lock::{Mode, RunEnd};
        let zk = Zk::start();
        let backend = zk.backend();
        let lock = LockName::new("runs").unwrap();
        // The first call waits for the server (the connect timeout).
        assert_eq!(backend.last_runs(&lock).expect("read"), LastRuns::default());
        let request = LockRequest {
            name: lock.clone(),
            mode: Mode::Exclusive,
            ttl: Duration::from_secs(10),
            owner: "0123456789abcdef0123456789abcdef".into(),
            message: Some("m".into()),
            min_hold: None,
        };
        let Attempt::Acquired(lease) = backend.try_acquire(&request).expect("acquire") else {
            panic!("busy");
        };
        let token = lease.token();
        let runs = backend.last_runs(&lock).expect("read");
        let run = runs.last_run.expect("a last run");
        assert_eq!((run.token, run.ending), (Some(token), None), "{run:?}");
        assert_eq!(runs.last_success, None, "its node is there, empty");
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
        assert_eq!(runs.last_success, Some(run.clone()));
        // The times are the nodes' mtimes: read them raw.
        let session = backend.session(Duration::from_secs(10)).expect("session");
        let nodes = RunNodes::of(&session, &lock);
        let (_, stat) = session
            .runtime
            .block_on(session.client().get_data(&nodes.last_run))
            .expect("read");
        assert_eq!(run.ended, time_of(stat.mtime));

        // What another client wrote there is shown escaped, never trusted.
        session
            .runtime
            .block_on(
                session
                    .client()
                    .set_data(&nodes.last_run, b"run1 \x1b[2J", None),
            )
            .expect("write");
        let run = backend.last_runs(&lock).expect("read").last_run.unwrap();
        assert!(run
            .unreadable
            .is_some_and(|u| u.contains("run1") && !u.contains('\x1b')));

        // `list_runs`: the lock with its records, shown as `last_runs` shows them; a child of
        // the records' node that no lock's node is named is left out.
        let stray = format!("{}/{LAST_RUN}/%zz", session.root);
        session
            .runtime
            .block_on(session.client().create(
                &stray,
                b"run1",
                &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
            ))
            .expect("create");
        let listed = backend.list_runs("").expect("list").runs;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].0, lock);
        assert_eq!(listed[0].1, backend.last_runs(&lock).expect("read"));
        assert!(backend.list_runs("other").expect("list").runs.is_empty());
    }

    #[test]
    fn records_go_after_four_hundred_days_unwritten() {
        let day = 24 * 3600 * 1000;
        assert!(!expired(0, 399 * day));
        assert!(expired(0, 400 * day));
        assert!(!expired(i64::MAX, 0));
    }
}
