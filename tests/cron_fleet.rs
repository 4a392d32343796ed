//! The README's cron fleet, as five hosts run it: every host fires `dlock run -n --min-hold 24h
//! --release-on-failure nightly -- job` every ten minutes (here: rounds, the five of a round
//! started at once). The job fails the first time it runs anywhere: the failure gives the lock up
//! at once, a later firing on any host runs it again, and once it has succeeded every firing of
//! the day finds the lock kept and runs nothing. Never two runs at once; `status --ran-within`
//! says CRITICAL before the success and OK after it. On Redis and PostgreSQL.

use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::target::Target;
use crate::support::*;

/// Firings of the five hosts, at most: the job has run and succeeded long before.
const ROUNDS: usize = 6;
const HOSTS: usize = 5;

/// The job: notes its start and end in `log` with its host, fails if no run failed before it
/// (`failed` is the mark of that first failure), and finds out if another run overlaps it (the
/// `running` directory exists only while a run is in its body).
fn job(log: &str, failed: &str, running: &str) -> String {
    format!(
        "mkdir '{running}' 2>/dev/null || {{ echo \"overlap $HOST\" >> '{log}'; exit 9; }}; \
         echo \"start $HOST\" >> '{log}'; \
         if [ -e '{failed}' ]; then code=0; else : > '{failed}'; code=1; fi; \
         sleep 0.2; echo \"end $HOST $code\" >> '{log}'; rmdir '{running}'; exit $code"
    )
}

fn fire(t: &Target, host: usize, job: &str) -> Child {
    t.dlock(&[
        "run",
        "-n",
        "--min-hold",
        "24h",
        "--release-on-failure",
        "nightly",
        "--",
        "sh",
        "-c",
        job,
    ])
    .env("HOST", format!("host-{host}"))
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

fn ran_within(t: &Target) -> (i32, String) {
    let out = output(t.dlock(&["status", "nightly", "--ran-within", "1h"]));
    (code(&out), stdout(&out))
}

fn the_nightly_job_runs_once_a_day_and_a_failure_is_retried(t: &Target) {
    let scratch = tempfile::tempdir().unwrap();
    let path = |n: &str| scratch.path().join(n).display().to_string();
    let (log, failed, running) = (path("log"), path("failed"), path("running"));
    let job = job(&log, &failed, &running);
    let (status, said) = ran_within(t);
    assert_eq!(status, 2, "no success on record yet: {said}");
    let mut succeeded_in = None;
    for round in 0..ROUNDS {
        let firings: Vec<Child> = (0..HOSTS).map(|h| fire(t, h, &job)).collect();
        let mut codes = Vec::new();
        for mut firing in firings {
            let status = wait_exit(&mut firing, Duration::from_secs(60));
            let mut err = String::new();
            std::io::Read::read_to_string(firing.stderr.as_mut().unwrap(), &mut err).unwrap();
            codes.push((status.code(), err));
        }
        for (code, err) in &codes {
            // Ran and failed (1), ran and succeeded (0), or found the lock busy (75).
            assert!(
                matches!(code, Some(0 | 1 | 75)),
                "round {round}: {code:?} {err}"
            );
        }
        let successes = codes.iter().filter(|(c, _)| *c == Some(0)).count();
        match succeeded_in {
            None if successes == 1 => succeeded_in = Some(round),
            None => assert_eq!(successes, 0, "round {round}: {codes:?}"),
            // Once the job succeeded, the day is taken: every later firing runs nothing.
            Some(_) => assert!(
                codes.iter().all(|(c, _)| *c == Some(75)),
                "round {round} after the success: {codes:?}"
            ),
        }
        if succeeded_in.is_some_and(|s| round >= s + 2) {
            break;
        }
    }
    assert!(succeeded_in.is_some(), "the job never succeeded");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains("overlap"), "two runs at once:\n{log}");
    let ends: Vec<&str> = log.lines().filter(|l| l.starts_with("end ")).collect();
    // The first run failed, the next succeeded, and none ran after it.
    assert_eq!(ends.len(), 2, "{log}");
    assert!(ends[0].ends_with(" 1") && ends[1].ends_with(" 0"), "{log}");
    let (status, said) = ran_within(t);
    assert_eq!(status, 0, "{said}");
    assert!(said.starts_with("OK: nightly last succeeded "), "{said}");
}

#[cfg(feature = "redis")]
#[test]
fn on_redis() {
    the_nightly_job_runs_once_a_day_and_a_failure_is_retried(&Target::suite_redis());
}

#[cfg(feature = "postgres")]
#[test]
fn on_postgres() {
    the_nightly_job_runs_once_a_day_and_a_failure_is_retried(&Target::suite_postgres());
}
