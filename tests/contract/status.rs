//! What dlock tells about locks: `status` and `list` (text and JSON) show the holder,
//! `release --force` breaks its lock and its run ends with 79, and `-v` logs a run's life.

use std::time::{Duration, Instant};

use super::Holding;
use crate::support::target::Target;
use crate::support::*;

pub fn status_list_and_forced_release_end_the_holders_run_with_79(t: &Target) {
    let out = output(t.dlock(&["status", "jobs/a"]));
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("jobs/a: free"), "{}", stdout(&out));

    // A lease that a loaded machine cannot make lapse (a renewal every second) between the looks
    // below: the loss this test is about is the forced release's.
    let holder = Holding::start(t, &["--ttl", "3s", "--kill-after", "1s", "jobs/a"]);
    let dlock_pid = holder.dlock.id();
    let out = output(t.dlock(&["status", "jobs/a"]));
    assert_eq!(code(&out), 0);
    assert!(names_pid(&stdout(&out), dlock_pid), "{}", stdout(&out));
    let quiet = output(t.dlock(&["-q", "status", "jobs/a"]));
    assert_eq!(
        (code(&quiet), stdout(&quiet).as_str()),
        (0, ""),
        "`if dlock -q status NAME` works"
    );
    let out = output(t.dlock(&["list"]));
    assert!(
        stdout(&out).starts_with("jobs/a\texclusive by "),
        "{}",
        stdout(&out)
    );
    assert_eq!(stdout(&output(t.dlock(&["list", "other"]))), "");
    let out = output(t.dlock(&["list", "--json", "jobs/"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1, "{json}");
    assert_eq!(json[0]["holders"][0]["pid"], dlock_pid);

    let out = output(t.dlock(&["release", "jobs/a"]));
    assert_eq!(
        code(&out),
        1,
        "without --force only this shell's own hold is released"
    );
    let out = output(t.dlock(&["release", "--force", "jobs/a"]));
    let broken = Instant::now();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("released jobs/a\texclusive by")
            && names_pid(&stdout(&out), dlock_pid),
        "{}",
        stdout(&out)
    );
    // The holder notices (the file backend at its next check, every ttl/3) and stops its command
    // with the lost code, within the lease and --kill-after.
    let command = holder.command();
    let token = holder.token();
    let reason = t.caps().loss_reason;
    let (status, err) = holder.finish();
    let took = broken.elapsed();
    assert_eq!(status.code(), Some(79), "{err}");
    assert!(
        err.contains("lost the lock") && err.contains(reason),
        "expected a loss saying {reason:?}:\n{err}"
    );
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} to end after the lock was broken"
    );
    assert!(!alive(command), "the command must not outlive the lock");

    assert_eq!(code(&output(t.dlock(&["status", "jobs/a"]))), 1);
    assert_eq!(
        code(&output(t.dlock(&["release", "--force", "jobs/a"]))),
        1,
        "nothing left to release"
    );
    // Tokens keep growing after a forced release.
    let out = output(t.dlock(&["run", "jobs/a", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    let next: u64 = stdout(&out).trim().parse().unwrap();
    if t.tokens_count_acquisitions() {
        assert_eq!(next, 2);
    } else {
        assert!(next > token, "{next} after {token}");
    }
}

pub fn verbose_reports_waiting_acquired_renewed_and_exited_with_timestamps(t: &Target) {
    // A renewal a third of the lease in (1.3 s), well before the command ends (2.5 s): a lease of
    // 4 s, which a loaded machine renews in time. Shorter ones were lost: 600 ms once, and 1.5 s
    // once on the suite's OpenSearch node, which took 969 ms to grant it while a second node
    // started beside it.
    let out = output(t.dlock(&[
        "-v",
        "run",
        "--ttl",
        "4s",
        "n",
        "--",
        "sh",
        "-c",
        "sleep 2.5; exit 3",
    ]));
    let err = stderr(&out);
    assert_eq!(code(&out), 3, "{err}");
    let token = if t.tokens_count_acquisitions() {
        "with token 1"
    } else {
        "with token "
    };
    for needle in [
        "acquired \"n\" after",
        token,
        "renewed \"n\"",
        "command exited with status 3",
        "released \"n\"",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from {err}");
    }
    assert!(
        err.lines()
            .all(|l| l.starts_with("[20") && l.contains("Z] dlock: ")),
        "{err}"
    );
}
