//! Several locks at once and tree locks (issue: all or nothing, canonical order, tree semantics).
//! Each scenario takes the backend arguments so it runs unchanged on every backend.

use std::process::{Child, Command};

use crate::support::redis_server::{Comeback, RedisServer};
use crate::support::target::Target;
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(120);

/// Two processes asking for {a,b} and {b,a} `rounds` times each, under contention, both finish.
pub fn opposite_orders_never_deadlock(t: &Target, rounds: usize) {
    let spawn = |names: [&str; 2]| -> Child {
        let run = t.shell_words(&["run", "--wait", "60s", names[0], names[1], "--", "true"]);
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for i in $(seq {rounds}); do {run} || exit $?; done"
            ))
            .spawn()
            .unwrap()
    };
    let mut ab = spawn(["a", "b"]);
    let mut ba = spawn(["b", "a"]);
    assert!(wait_exit(&mut ab, T).success());
    assert!(wait_exit(&mut ba, T).success());
}

/// One name of the set busy: whether dlock gives up at once, after --wait, or on a signal, it
/// holds none of the others afterwards.
pub fn a_busy_name_leaves_nothing_of_the_set_held(t: &Target) {
    let marker = t.scratch_file("holder-in");
    let mut holder = t
        .dlock(&[
            "run",
            "m",
            "--",
            "sh",
            "-c",
            &format!("touch {marker}; sleep 60"),
        ])
        .spawn()
        .unwrap();
    wait_for_file(std::path::Path::new(&marker), T);
    for wait in [&["-n"][..], &["-w", "300ms"][..]] {
        let out = output(t.dlock(&[&["run"][..], wait, &["l", "m", "n", "--", "true"]].concat()));
        assert_eq!(code(&out), 75, "{}", stderr(&out));
        for name in ["l", "n"] {
            let status = output(t.dlock(&["status", name]));
            assert_eq!(code(&status), 1, "{name} must be free: {}", stdout(&status));
        }
    }
    // A signal while waiting for m, with l already taken: l is let go too.
    let mut waiter = t
        .dlock(&["run", "l", "m", "n", "--", "true"])
        .spawn()
        .unwrap();
    wait_until("the waiter to hold l", T, || {
        code(&output(t.dlock(&["status", "l"]))) == 0
    });
    signal(waiter.id(), libc::SIGTERM);
    assert_eq!(wait_exit(&mut waiter, T).code(), Some(128 + libc::SIGTERM));
    for name in ["l", "n"] {
        let status = output(t.dlock(&["status", name]));
        assert_eq!(
            code(&status),
            1,
            "{name} must be free after the signal: {}",
            stdout(&status)
        );
    }
    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, T);
}

/// The child sees each lock and its token.
pub fn each_name_gets_its_own_token_variable(t: &Target) {
    let out = output(t.dlock(&[
        "run",
        "zeta",
        "alpha",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_LOCKS $DLOCK_NAME_1 $DLOCK_NAME_2 $DLOCK_TOKEN_1 $DLOCK_TOKEN_2",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(&words[..3], &["2", "alpha", "zeta"], "{text}");
    assert!(words[3].parse::<u64>().unwrap() > 0 && words[4].parse::<u64>().unwrap() > 0);
}

/// While dlock waits for a later name, the names it already holds are renewed: after several
/// leases' worth of waiting, the first name is still its own and the command runs.
pub fn held_names_stay_held_while_waiting_for_the_rest(t: &Target) {
    let stop = t.scratch_file("b.stop");
    let b_in = t.scratch_file("b.in");
    let mut b = t
        .dlock(&[
            "run",
            "b",
            "--",
            "sh",
            "-c",
            &format!("touch {b_in}; while [ ! -e {stop} ]; do sleep 0.02; done"),
        ])
        .spawn()
        .unwrap();
    wait_for_file(std::path::Path::new(&b_in), T);
    let ran = t.scratch_file("both");
    let mut both = t
        .dlock(&["run", "--ttl", "1s", "a", "b", "--", "touch", &ran])
        .spawn()
        .unwrap();
    wait_until("the waiter to hold a", T, || {
        code(&output(t.dlock(&["status", "a"]))) == 0
    });
    // Let three of its leases run out, had they not been renewed.
    std::thread::sleep(Duration::from_secs(3));
    let out = output(t.dlock(&["run", "-n", "a", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "a was let go while waiting for b: {}",
        stderr(&out)
    );
    std::fs::write(&stop, "").unwrap();
    assert!(wait_exit(&mut b, T).success());
    assert!(wait_exit(&mut both, T).success());
    assert!(std::path::Path::new(&ran).exists());
}

/// Holds `--tree PATH` in the background until the returned marker's twin `.stop` file appears.
fn hold_tree(t: &Target, tag: &str, path: &str, extra: &[&str]) -> (Child, String) {
    let log = t.scratch_file("log");
    let script = format!(
        "echo start {tag} >> {log}; touch {m}; while [ ! -e {m}.stop ]; do sleep 0.02; done; echo end {tag} >> {log}",
        m = t.scratch_file(tag)
    );
    let mut args = vec!["run", "--tree"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[path, "--", "sh", "-c", &script]);
    (t.dlock(&args).spawn().unwrap(), t.scratch_file(tag))
}

fn stop(child: &mut Child, marker: &str) {
    std::fs::write(format!("{marker}.stop"), "").unwrap();
    assert!(wait_exit(child, T).success());
}

/// Siblings under one directory run at the same time; an ancestor excludes its subtree both ways.
pub fn tree_siblings_run_together_and_ancestors_exclude_descendants(t: &Target) {
    let (mut a, ma) = hold_tree(t, "a", "/projects/site/a.txt", &[]);
    let (mut b, mb) = hold_tree(t, "b", "/projects/site//b.txt/", &[]);
    // Both siblings are inside at once: each waits for the stop file, so this proves overlap.
    wait_for_file(std::path::Path::new(&ma), T);
    wait_for_file(std::path::Path::new(&mb), T);

    // The ancestor cannot get in while work below runs...
    let out = output(t.dlock(&["run", "--tree", "-n", "/projects/site", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // ...but a reader of the subtree can.
    let out = output(t.dlock(&[
        "run",
        "--tree",
        "--shared",
        "-n",
        "/projects/site",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // A waiting ancestor gets in only after both siblings end.
    let (mut parent, mp) = hold_tree(t, "parent", "/projects/./site", &[]);
    stop(&mut a, &ma);
    stop(&mut b, &mb);
    wait_for_file(std::path::Path::new(&mp), T);
    // Work below now waits for the ancestor.
    let out = output(t.dlock(&["run", "--tree", "-n", "/projects/site/c.txt", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    stop(&mut parent, &mp);

    let log = std::fs::read_to_string(t.scratch_file("log")).unwrap();
    let order: Vec<&str> = log.lines().collect();
    let pos = |l: &str| {
        order
            .iter()
            .position(|x| *x == l)
            .unwrap_or_else(|| panic!("{l} in {log}"))
    };
    assert!(
        pos("start parent") > pos("end a") && pos("start parent") > pos("end b"),
        "{log}"
    );
    assert!(
        pos("start b") < pos("end a") && pos("start a") < pos("end b"),
        "siblings overlap: {log}"
    );
}

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

pub fn tree_paths_with_dotdot_are_refused(t: &Target) {
    let out = output(t.dlock(&["run", "--tree", "/projects/../etc", "--", "true"]));
    assert_eq!(code(&out), 64);
    assert!(stderr(&out).contains("`..`"), "{}", stderr(&out));
}

#[test]
fn file_opposite_orders_never_deadlock() {
    opposite_orders_never_deadlock(&Target::file_backend(), 300);
}

#[test]
fn file_a_busy_name_leaves_nothing_of_the_set_held() {
    a_busy_name_leaves_nothing_of_the_set_held(&Target::file_backend());
}

#[test]
fn file_each_name_gets_its_own_token_variable() {
    each_name_gets_its_own_token_variable(&Target::file_backend());
}

#[test]
fn file_tree_siblings_run_together_and_ancestors_exclude_descendants() {
    tree_siblings_run_together_and_ancestors_exclude_descendants(&Target::file_backend());
}

#[test]
fn file_one_wait_budget_covers_the_whole_set() {
    one_wait_budget_covers_the_whole_set(&Target::file_backend());
}

#[test]
fn redis_one_wait_budget_covers_the_whole_set() {
    one_wait_budget_covers_the_whole_set(&redis());
}

#[test]
fn file_tree_paths_with_dotdot_are_refused() {
    tree_paths_with_dotdot_are_refused(&Target::file_backend());
}

#[test]
fn zk_opposite_orders_never_deadlock() {
    opposite_orders_never_deadlock(&Target::zk_backend(), 100);
}

#[test]
fn zk_a_busy_name_leaves_nothing_of_the_set_held() {
    a_busy_name_leaves_nothing_of_the_set_held(&Target::zk_backend());
}

#[test]
fn zk_each_name_gets_its_own_token_variable() {
    each_name_gets_its_own_token_variable(&Target::zk_backend());
}

#[test]
fn zk_tree_siblings_run_together_and_ancestors_exclude_descendants() {
    tree_siblings_run_together_and_ancestors_exclude_descendants(&Target::zk_backend());
}

#[test]
fn file_held_names_stay_held_while_waiting_for_the_rest() {
    held_names_stay_held_while_waiting_for_the_rest(&Target::file_backend());
}

#[test]
fn zk_held_names_stay_held_while_waiting_for_the_rest() {
    held_names_stay_held_while_waiting_for_the_rest(&Target::zk_backend());
}

fn redis() -> Target {
    Target::redis(vec![RedisServer::start()], Comeback::KeepingData)
}

fn redlock() -> Target {
    Target::redis(
        (0..3).map(|_| RedisServer::start()).collect(),
        Comeback::KeepingData,
    )
}

#[test]
fn redis_opposite_orders_never_deadlock() {
    opposite_orders_never_deadlock(&redis(), 200);
}

#[test]
fn redlock_opposite_orders_never_deadlock() {
    opposite_orders_never_deadlock(&redlock(), 50);
}

#[test]
fn redis_a_busy_name_leaves_nothing_of_the_set_held() {
    a_busy_name_leaves_nothing_of_the_set_held(&redis());
}

#[test]
fn redis_each_name_gets_its_own_token_variable() {
    each_name_gets_its_own_token_variable(&redis());
}

#[test]
fn redis_tree_siblings_run_together_and_ancestors_exclude_descendants() {
    tree_siblings_run_together_and_ancestors_exclude_descendants(&redis());
}

#[test]
fn redis_held_names_stay_held_while_waiting_for_the_rest() {
    held_names_stay_held_while_waiting_for_the_rest(&redis());
}
