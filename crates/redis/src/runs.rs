//! What the servers keep of a lock's runs (`Backend::last_runs`): the last run and the last
//! success, read on every server that answers. With Redlock they may disagree (a server that missed
//! an acquisition, or its release, or lost its data): of each, the record with the highest token
//! wins, and at equal tokens one that has ended over one that has not (a server that missed the
//! release), then one that knows when the run began (a server that only heard of its success).
//! Servers that still had the lease at the release and servers that did not keep different
//! endings of one run (lock/last_run.rs): of the last runs that tie so, the ending most servers
//! keep wins, as the release's answer went by the majority, and a success of a run that ending
//! says did not succeed (a minority still held its lease) is not the last success.

use std::time::Duration;

use super::fault::first_fatal;
use super::keys::{self, Keys};
use super::quorum::on_all;
use super::scripts;
use super::RedisBackend;
use dlock_core::error;
use dlock_core::error::FailAs;
use dlock_core::lock::{LastRuns, LockName, Run};

impl RedisBackend {
    /// The last run and last success of `name`, merged over every server that answered.
    pub(super) fn read_last_runs(&self, name: &LockName) -> error::Result<LastRuns> {
        let mut servers = self.servers();
        let keys = Keys::on(name, self.sharded);
        let timeout = self.connect_timeout;
        let replies = on_all(&mut servers, |s| {
            s.at(&keys.base);
            s.call(timeout, |l| scripts::last_runs(&mut l.conn, &keys))
        });
        let (mut runs, mut successes, mut faults) = (Vec::new(), Vec::new(), Vec::new());
        for reply in replies {
            match reply {
                Ok(server) => {
                    // Each server's records are judged by the clock that dated them, its own.
                    let read = |raw: Option<String>| {
                        raw.as_deref()
                            .map(|raw| Run::from_record(raw).judged_at(server.now, Duration::ZERO))
                    };
                    runs.extend(read(server.last_run));
                    successes.extend(read(server.last_success));
                }
                Err(fault) => faults.push(fault),
            }
        }
        if faults.len() == servers.len() || first_fatal(&faults).is_some() {
            if let Some(fault) = first_fatal(&faults).or(faults.first()) {
                return Err(fault.to_error()).unavailable();
            }
        }
        let last_run = latest(runs);
        // A success of the run whose ending the servers' majority says was no success.
        let disowned = |success: &Run| {
            last_run.as_ref().is_some_and(|last| {
                last.unreadable.is_none()
                    && (&last.owner, last.token) == (&success.owner, success.token)
                    && last.ending.is_some_and(|ending| !ending.succeeded())
            })
        };
        successes.retain(|success| !disowned(success));
        Ok(LastRuns {
            last_run,
            last_success: latest(successes),
        })
    }
}

impl RedisBackend {
    /// The names with a last-run or last-success key under `prefix`, on every server that answers.
    pub(super) fn names_with_runs(&self, prefix: &str) -> error::Result<Vec<LockName>> {
        let found = self.scan_everywhere(&keys::runs_pattern(prefix))?;
        Ok(found
            .iter()
            .filter_map(|key| keys::name_of_runs_key(key, prefix))
            .collect())
    }
}

/// The record to show of those the servers keep of one kind (see the module's documentation);
/// one that cannot be read has no token and loses to any that can. Of those that tie, the ending
/// most of them keep; then the first server's.
fn latest(runs: Vec<Run>) -> Option<Run> {
    let rank = |run: &Run| (run.token, run.ended.is_some(), run.acquired.is_some());
    let best = runs.iter().map(rank).max()?;
    let tied: Vec<&Run> = runs.iter().filter(|run| rank(run) == best).collect();
    let votes = |run: &Run| tied.iter().filter(|r| r.ending == run.ending).count();
    tied.iter()
        .copied()
        .reduce(|best, run| if votes(run) > votes(best) { run } else { best })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlock_core::backend::Backend;

    const OWNER: &str = "0123456789abcdef0123456789abcdef";

    fn run(record: &str) -> Run {
        let run = Run::from_record(record);
        assert!(run.unreadable.is_none(), "{record}");
        run
    }

    #[test]
    fn the_highest_token_wins_then_an_ended_run_then_a_known_start() {
        let older_ended = run(&format!("run1 4 1000 2000 exit:0 7 {OWNER} a"));
        let newer = run(&format!("run1 5 3000 - - 8 {OWNER} b"));
        let newer_ended = run(&format!("run1 5 3000 4000 exit:3 8 {OWNER} b"));
        let newer_unknown_start = run(&format!("run1 5 - 4000 exit:3 8 {OWNER} b"));
        let garbage = Run::from_record("run1 99 \x1b");
        assert_eq!(
            latest(vec![older_ended.clone(), newer.clone(), garbage.clone()]),
            Some(newer.clone())
        );
        for order in [
            vec![newer.clone(), newer_ended.clone(), older_ended.clone()],
            vec![older_ended.clone(), newer_ended.clone(), newer.clone()],
            vec![
                newer_unknown_start.clone(),
                newer_ended.clone(),
                newer.clone(),
            ],
        ] {
            assert_eq!(latest(order), Some(newer_ended.clone()));
        }
        assert_eq!(latest(vec![garbage.clone()]), Some(garbage));
        assert_eq!(latest(vec![]), None);
    }

    #[test]
    fn of_one_runs_endings_the_one_most_servers_keep_wins() {
        let lost = run(&format!("run1 5 3000 4000 lost 8 {OWNER} b"));
        let ok = run(&format!("run1 5 3000 4000 exit:0 8 {OWNER} b"));
        assert_eq!(
            latest(vec![ok.clone(), lost.clone(), lost.clone()]),
            Some(lost.clone())
        );
        assert_eq!(
            latest(vec![lost.clone(), ok.clone(), ok.clone()]),
            Some(ok.clone())
        );
        assert_eq!(latest(vec![lost.clone(), ok.clone()]), Some(lost));
    }

    /// redis-servers of this test's own, killed when dropped.
    struct Servers(Vec<(std::process::Child, u16)>);

    impl Servers {
        fn start(count: usize) -> Servers {
            let servers = Servers(
                (0..count)
                    .map(|_| {
                        let port = std::net::TcpListener::bind("127.0.0.1:0")
                            .and_then(|l| l.local_addr())
                            .expect("a free port")
                            .port();
                        let child = crate::test_programs::program("redis-server")
                            .args(["--port", &port.to_string(), "--save", "", "--appendonly"])
                            .arg("no")
                            .stdout(std::process::Stdio::null())
                            .spawn()
                            .expect("start redis-server");
                        (child, port)
                    })
                    .collect(),
            );
            for i in 0..count {
                let started = std::time::Instant::now();
                while servers.connection(i).is_err() {
                    assert!(
                        started.elapsed().as_secs() < 20,
                        "redis-server did not start"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
            servers
        }

        fn url(&self, i: usize) -> String {
            format!("redis://127.0.0.1:{}", self.0[i].1)
        }

        fn connection(&self, i: usize) -> redis::RedisResult<redis::Connection> {
            let mut conn = redis::Client::open(self.url(i))?.get_connection()?;
            redis::cmd("PING").query::<()>(&mut conn)?;
            Ok(conn)
        }

        /// Runs `args` on server `i`.
        fn set(&self, i: usize, args: &[&str]) {
            let mut cmd = redis::cmd(args[0]);
            for arg in &args[1..] {
                cmd.arg(*arg);
            }
            let mut conn = self.connection(i).expect("connect");
            cmd.query::<()>(&mut conn).expect("write a record");
        }

        fn backend(&self) -> RedisBackend {
            let config = dlock_core::backend::BackendConfig {
                urls: (0..self.0.len()).map(|i| self.url(i)).collect(),
                connect_timeout: std::time::Duration::from_secs(5),
                create: false,
                replicas: 0,
                stop: Default::default(),
                trust_owners: vec![],
            };
            RedisBackend::open(&config).expect("open the backend")
        }
    }

    impl Drop for Servers {
        fn drop(&mut self) {
            for (child, _) in &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    #[test]
    fn redlock_reads_every_server_and_keeps_the_record_that_wins() {
        let servers = Servers::start(3);
        let name = LockName::new("r").unwrap();
        let (run, success) = ("dlock:{r}:last-run", "dlock:{r}:last-success");
        let older = format!("run1 4 1000 2000 exit:0 7 {OWNER} a");
        let not_ended = format!("run1 5 3000 - - 8 {OWNER} b");
        let ended = format!("run1 5 3000 4000 exit:3 8 {OWNER} b");
        servers.set(0, &["SET", run, &not_ended]);
        servers.set(0, &["SET", success, &older]);
        servers.set(1, &["SET", run, &ended]);
        servers.set(1, &["RPUSH", success, "another client's"]);
        servers.set(2, &["SET", run, &older]);
        let runs = servers.backend().last_runs(&name).expect("last runs");
        assert_eq!(runs.last_run, Some(Run::from_record(&ended)));
        assert_eq!(runs.last_success, Some(Run::from_record(&older)));

        // Only what cannot be read: shown escaped, as read.
        servers.set(0, &["SET", run, "run1 9 \x1b[31m"]);
        servers.set(0, &["DEL", success]);
        for i in [1, 2] {
            servers.set(i, &["DEL", run]);
        }
        let runs = servers.backend().last_runs(&name).expect("last runs");
        let shown = runs
            .last_run
            .and_then(|r| r.unreadable)
            .expect("unreadable");
        assert!(
            shown.contains("run1 9") && !shown.contains('\x1b'),
            "{shown:?}"
        );
        let shown = runs
            .last_success
            .and_then(|r| r.unreadable)
            .expect("unreadable");
        assert!(shown.contains("is not a string key"), "{shown:?}");
    }
}
