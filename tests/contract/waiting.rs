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

/// On a terminal one status line, redrawn in place and cut to the terminal's width (it never wraps
/// into a trail of lines), shows how long dlock has waited, how much of `--wait` is left, the holder
/// and, where the backend keeps a line (ZooKeeper), the place in it; it is erased before the next
/// message.
pub fn on_a_terminal_the_waiting_line_fits_the_width_and_is_erased(t: &Target) {
    let message = "x".repeat(120);
    let holder = Holding::start(t, &["--message", &message, "n"]);
    let waiter = t.shell_words(&["run", "-w", "2500ms", "n", "--", "true"]);
    let child = on_a_terminal(&format!("stty cols 100 && {waiter}"));
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    let drawn: Vec<&str> = screen
        .split("\r\x1b[K")
        .filter(|line| line.starts_with("dlock: waiting"))
        .collect();
    assert!(drawn.len() >= 2, "redrawn as the wait goes on: {screen:?}");
    for line in &drawn {
        assert!(
            line.chars().count() <= 99 && !line.contains('\n'),
            "fits 100 columns with one to spare: {line:?}"
        );
    }
    assert!(
        drawn[0].starts_with("dlock: waiting 0s for lock \"n\" (2s of --wait left"),
        "{:?}",
        drawn[0]
    );
    let held = drawn
        .iter()
        .find(|line| line.contains(", held"))
        .unwrap_or_else(|| panic!("the holder is shown: {screen:?}"));
    assert!(held.ends_with('…'), "a long line is cut: {held:?}");
    if t.caps().tells_the_place_in_line {
        assert!(
            drawn.iter().any(|line| line.contains(", next in")),
            "the place in line: {screen:?}"
        );
    }
    let last = drawn[drawn.len() - 1];
    assert!(
        last.starts_with("dlock: waiting 2s for lock \"n\" (0s of --wait left"),
        "{last:?}"
    );
    assert!(
        screen.contains("\r\x1b[Kdlock: gave up on lock \"n\""),
        "line erased first: {screen:?}"
    );
    assert!(holder.let_go().success());
}

/// In a CI log (stderr not a terminal) a wait says once who holds the lock and for how long it will
/// wait, then every `--progress-every` how long it has waited and how much of `--wait` is left;
/// `-q` silences it all.
pub fn in_a_log_a_wait_says_who_holds_then_how_long_it_has_waited(t: &Target) {
    let holder = Holding::start(t, &["log"]);
    let waiter = [
        "run",
        "-w",
        "2s",
        "--progress-every",
        "300ms",
        "log",
        "--",
        "true",
    ];
    let out = output(t.dlock(&waiter));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    let first = lines.first().copied().unwrap_or_default();
    assert!(
        first.starts_with("dlock: waiting for lock \"log\": held exclusive by ")
            && names_pid(first, holder.dlock.id())
            && first.ends_with("(giving up after 2s)"),
        "{err}"
    );
    let steady: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("dlock: still waiting for lock \"log\" after "))
        .collect();
    assert!(steady.len() >= 3, "a line every 300ms over 2s: {err}");
    assert!(
        steady.iter().all(|l| l.contains(" of --wait left")),
        "{err}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("dlock: gave up on lock \"log\"")),
        "{err}"
    );

    let mut quiet = vec!["-q"];
    quiet.extend_from_slice(&waiter);
    let out = output(t.dlock(&quiet));
    assert_eq!(code(&out), 75);
    assert_eq!(stderr(&out), "", "-q prints nothing but errors");
    assert!(holder.let_go().success());
}
