//! Waiting: `--wait` is one budget for the whole set of names, a release lets the next waiter in
//! at once, and on a terminal one line shows whom dlock waits for.

use std::process::Child;
use std::time::Duration;

use super::{waiting, Holding, T};
use crate::support::target::Target;
use crate::support::*;

/// `--wait` is one budget for the whole set, not one per name: with `a` freed after 1.5s and `b`
/// held throughout, `--wait 2s` gives up about 2s after the start (one budget per name would wait
/// 1.5s for `a` and then 2s more for `b`), and holds nothing afterwards.
pub fn one_wait_budget_covers_the_whole_set(t: &Target) {
    let start_holder = |name: &str, work: &str| -> (Child, String) {
        let ready = t.scratch_file(&format!("{name}-ready"));
        let script = format!("touch {ready}; {work}");
        let child = t
            .dlock(&["run", name, "--", "sh", "-c", &script])
            .spawn()
            .unwrap();
        (child, ready)
    };
    let (mut a, ready_a) = start_holder("a", "sleep 1.5");
    let (mut b, ready_b) = start_holder("b", "exec sleep 60");
    wait_for_file(std::path::Path::new(&ready_a), T);
    wait_for_file(std::path::Path::new(&ready_b), T);
    let started = std::time::Instant::now();
    let out = output(t.dlock(&["run", "--wait", "2s", "a", "b", "--", "true"]));
    let took = started.elapsed();
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(3),
        "gave up after {took:?}, not at the set's one 2s deadline"
    );
    assert!(wait_exit(&mut a, T).success());
    let status = output(t.dlock(&["status", "a"]));
    assert_eq!(code(&status), 1, "a must be free: {}", stdout(&status));
    signal(b.id(), libc::SIGTERM);
    wait_exit(&mut b, T);
}

pub fn a_release_wakes_the_next_waiter_at_once(t: &Target) {
    let holder = Holding::start(t, &["wake"]);
    let next = t.scratch.file("next");
    // With a 30s lease a waiter's fallback re-check (Redis) comes only every 10s.
    let waiter = waiting(
        t,
        &[
            "run",
            "--ttl",
            "30s",
            "wake",
            "--",
            "touch",
            next.to_str().unwrap(),
        ],
    );
    signal(holder.dlock.id(), libc::SIGTERM);
    holder.finish();
    let released = std::time::Instant::now();
    wait_for_file(&next, T);
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the waiter started {took:?} after the release"
    );
    let (status, err) = waiter.finish(T);
    assert_eq!(status, 0, "{err}");
}

pub fn on_a_terminal_the_waiting_line_shows_the_holder_and_is_erased(t: &Target) {
    let holder = Holding::start(t, &["n"]);
    let child = on_a_terminal(&t.shell_words(&["run", "-w", "1500ms", "n", "--", "true"]));
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("\r\x1b[Kdlock: waiting 1s for lock \"n\", held by "),
        "{screen:?}"
    );
    assert!(
        screen.contains(&format!("pid {}", holder.dlock.id())),
        "{screen:?}"
    );
    assert!(
        screen.contains("\r\x1b[Kdlock: gave up on lock \"n\""),
        "line erased first: {screen:?}"
    );
    assert!(holder.let_go().success());
}
