//! Several names at once: all or nothing, taken in one order so that no two runs deadlock, each
//! with its own token, and the ones already held kept while waiting for the rest.

use super::{Holding, T};
use crate::support::target::Target;
use crate::support::watched::Watched;
use crate::support::*;
use std::process::Child;

/// Two processes asking for {a,b} and {b,a} many times each (300 rounds on the file backend,
/// fewer where a run costs more), under contention, both finish.
pub fn opposite_orders_never_deadlock(t: &Target) {
    let rounds = t.rounds(load(100, 300));
    let spawn = |names: [&str; 2]| -> Child {
        let run = t.shell_words(&["run", "--wait", "60s", names[0], names[1], "--", "true"]);
        program("sh")
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
    let holder = Holding::start(t, &["m"]);
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
    assert!(holder.let_go().success());
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

/// While dlock waits for a later name, the names it already holds are renewed: after more than a
/// lease's worth of waiting, the first name is still its own and the command runs.
pub fn held_names_stay_held_while_waiting_for_the_rest(t: &Target) {
    let b = Holding::start(t, &["b"]);
    let ran = t.scratch_file("both");
    // (A 2 s lease, not less: a Redlock renewal gives each server a tenth of the lease, which a
    // loaded 2-core machine misses at 1 s.)
    let mut both =
        Watched::start(t.dlock(&["-v", "run", "--ttl", "2s", "a", "b", "--", "touch", &ran]));
    wait_until("the waiter to hold a", T, || {
        code(&output(t.dlock(&["status", "a"]))) == 0
    });
    // Five renewals of a, a third of the lease apart: by the last, the lease a was taken with
    // has run out, had it not been renewed.
    both.wait_for_more("renewed \"a\"", 5, T);
    let out = output(t.dlock(&["run", "-n", "a", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "a was let go while waiting for b: {}",
        stderr(&out)
    );
    assert!(b.let_go().success());
    let (status, err) = both.finish(T);
    assert_eq!(status, 0, "{err}");
    assert!(std::path::Path::new(&ran).exists());
}
