//! Exclusive, shared and `--limit N` holders: each mode admits exactly as many holders as it
//! should, contenders lose no update, and a release lets in whoever may go next.

use std::process::Child;

use super::{waiting, Holding, T};
use crate::support::target::Target;
use crate::support::*;

/// `count` shell loops, each running `dlock run MODE counter -- sh -c SCRIPT` `iterations` times.
fn contenders(
    t: &Target,
    count: usize,
    iterations: usize,
    mode: &[&str],
    script: &str,
) -> Vec<Child> {
    let mut args = vec!["run"];
    args.extend_from_slice(mode);
    args.extend_from_slice(&["counter", "--", "sh", "-c", script]);
    let run = t.shell_words(&args);
    (0..count)
        .map(|_| {
            program("sh")
                .arg("-c")
                .arg(format!(
                    "for i in $(seq {iterations}); do {run} || exit 1; done"
                ))
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Read-modify-write of a counter file under the lock, by 8 contenders x 10 runs (16 x 20 with
/// `DLOCK_LOAD=1`).
pub fn contenders_lose_no_update(t: &Target) {
    let (count, iterations) = (load(8, 16), load(10, 20));
    let counter = t.scratch_file("counter");
    std::fs::write(&counter, "0").unwrap();
    let rmw = format!("n=$(cat {counter}); echo $((n + 1)) > {counter}");
    for mut c in contenders(t, count, iterations, &[], &rmw) {
        assert!(wait_exit(&mut c, T).success());
    }
    let total = std::fs::read_to_string(&counter).unwrap();
    assert_eq!(total.trim(), (count * iterations).to_string());
}

/// Contenders whose critical section records how many are inside at once; returns the peak.
fn peak_concurrency(t: &Target, mode: &[&str], count: usize) -> usize {
    let inside = t.scratch_file("inside");
    std::fs::create_dir_all(&inside).unwrap();
    // Each holder drops a file named by its pid, counts the files, and waits a little for company.
    let section = format!(
        "touch {inside}/$$; ls {inside} | wc -l >> {inside}.peaks; sleep 0.2; rm {inside}/$$"
    );
    for mut c in contenders(t, count, 3, mode, &section) {
        assert!(wait_exit(&mut c, T).success());
    }
    let peaks = std::fs::read_to_string(format!("{inside}.peaks")).unwrap();
    peaks
        .lines()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap()
}

pub fn shared_holders_run_together(t: &Target) {
    assert!(peak_concurrency(t, &["--shared"], 6) >= 2);
}

pub fn limit_3_never_has_more_than_3_and_does_reach_3(t: &Target) {
    assert_eq!(peak_concurrency(t, &["--limit", "3"], 8), 3);
}

pub fn exclusive_holders_never_overlap(t: &Target) {
    assert_eq!(peak_concurrency(t, &[], 6), 1);
}

pub fn a_shared_holder_excludes_an_exclusive_one_and_admits_readers(t: &Target) {
    let r1 = Holding::start(t, &["--shared", "rw"]);
    let r2 = Holding::start(t, &["--shared", "rw"]);
    let out = output(t.dlock(&["status", "--json", "rw"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["holders"].as_array().unwrap().len(), 2, "{json}");
    let out = output(t.dlock(&["run", "-n", "rw", "--", "true"]));
    assert_eq!(code(&out), 75, "a writer waits for the readers");
    let out = output(t.dlock(&["run", "-n", "--shared", "rw", "--", "true"]));
    assert_eq!(code(&out), 0, "a third reader gets in: {}", stderr(&out));
    let out = output(t.dlock(&["run", "-n", "--limit", "1", "rw", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "a limit holder runs beside readers: {}",
        stderr(&out)
    );
    signal(r1.dlock.id(), libc::SIGTERM);
    assert_eq!(r1.finish().0.code(), Some(128 + libc::SIGTERM));
    assert!(r2.let_go().success());
}

pub fn limit_2_admits_two_holders_and_queues_the_third_until_a_seat_frees(t: &Target) {
    let a = Holding::start(t, &["--limit", "2", "pool"]);
    let b = Holding::start(t, &["--limit", "2", "pool"]);
    let out = output(t.dlock(&["run", "-n", "--limit", "2", "pool", "--", "true"]));
    assert_eq!(code(&out), 75, "no third seat");
    let out = output(t.dlock(&["run", "-n", "--shared", "pool", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "shared holders take no seat: {}",
        stderr(&out)
    );

    let third = t.scratch.file("c.ran");
    let c = waiting(
        t,
        &[
            "run",
            "--limit",
            "2",
            "pool",
            "--",
            "touch",
            third.to_str().unwrap(),
        ],
    );
    assert!(!third.exists());
    // Whichever holder leaves, the waiter gets its seat: here the later one, while the first
    // holds on.
    assert!(b.let_go().success());
    let (status, err) = c.finish(T);
    assert_eq!(status, 0, "{err}");
    assert!(third.exists());
    assert!(a.let_go().success());
}

pub fn a_release_hands_the_lock_to_all_the_readers_first_in_line_at_once(t: &Target) {
    // A reader's fallback re-check (Redis) would come only every 5s (the default ttl's third).
    let writer = Holding::start(t, &["rw"]);
    // Each reader marks that it is in, then waits (3s at most) for the other to be in too.
    let mut readers = Vec::new();
    for (me, other) in [("r1", "r2"), ("r2", "r1")] {
        let (mine, theirs) = (t.scratch.file(me), t.scratch.file(other));
        let script = format!(
            "touch {}; for i in $(seq 30); do [ -e {} ] && exit 0; sleep 0.1; done; exit 1",
            mine.display(),
            theirs.display()
        );
        readers.push(waiting(
            t,
            &["run", "--shared", "rw", "--", "sh", "-c", &script],
        ));
    }
    signal(writer.dlock.id(), libc::SIGTERM);
    writer.finish();
    for reader in readers {
        let (status, err) = reader.finish(T);
        assert_eq!(
            status, 0,
            "both readers must be in at once, granted by the writer's release: {err}"
        );
    }
}
