//! Fencing tokens: every acquisition of a name gets a token above every earlier one, also after a
//! holder was killed, and the command learns its lock from its environment.

use super::Holding;
use crate::support::target::Target;
use crate::support::watched::Watched;
use crate::support::*;

/// Three runs: the child sees NAME and the backend, and each token is above the last.
pub fn tokens_increase_and_the_child_learns_its_lock(t: &Target) {
    let mut last = 0u64;
    for _ in 0..3 {
        let out = output(t.dlock(&[
            "run",
            "env-test",
            "--",
            "sh",
            "-c",
            "echo \"$DLOCK_NAME|$DLOCK_BACKEND|$DLOCK_TOKEN\"",
        ]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let line = stdout(&out);
        let fields: Vec<&str> = line.trim().split('|').collect();
        assert_eq!(&fields[..2], &["env-test", t.backend()]);
        let token: u64 = fields[2].parse().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
}

fn token_of_a_run(t: &Target, name: &str) -> u64 {
    let out = output(t.dlock(&["run", name, "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().parse().unwrap()
}

pub fn tokens_keep_increasing_after_a_holder_is_killed(t: &Target) {
    let first = token_of_a_run(t, "n");
    // A short lease, so that a backend with leases frees the lock soon after the kill.
    let holder = Holding::start(t, &["--ttl", "1s", "n"]);
    let second = holder.token();
    signal(holder.dlock.id(), libc::SIGKILL);
    holder.finish();
    let third = token_of_a_run(t, "n");
    assert!(first < second && second < third, "{first} {second} {third}");
}

/// A token is taken when the lock is granted, not when the line is joined: a `--limit` seat waits
/// behind a seat holder; a `--shared` run then gets in at once beside the holder where the store
/// lets it pass the waiting seat (etcd, ZooKeeper; a store that serves its line strictly in order
/// refuses it, 75); then the waiting seat gets in. Its token is above every token handed out
/// before its grant, the shared run's included, so a resource fenced by the shared run's token
/// still admits the seat.
pub fn a_token_is_taken_at_the_grant_not_when_the_line_is_joined(t: &Target) {
    let first = Holding::start(t, &["-l", "1", "seats"]);
    let token_file = |who: &str| t.scratch.file(&format!("{who}-token"));
    let writes_token = |who: &str| format!("echo $DLOCK_TOKEN > '{}'", token_file(who).display());
    let read_token = |who: &str| -> u64 {
        let text = std::fs::read_to_string(token_file(who)).expect("a token file");
        text.trim().parse().expect("a token")
    };
    let seat_writes = writes_token("seat");
    let mut waiter = Watched::start(t.dlock(&[
        "run",
        "-l",
        "1",
        "-w",
        "2m",
        "seats",
        "--",
        "sh",
        "-c",
        &seat_writes,
    ]));
    waiter.wait_for("waiting", super::T);
    let shared_writes = writes_token("shared");
    let shared = output(t.dlock(&["run", "-s", "-n", "seats", "--", "sh", "-c", &shared_writes]));
    let passed = match code(&shared) {
        0 => Some(read_token("shared")),
        75 => None,
        other => panic!("the shared run: {other} {}", stderr(&shared)),
    };
    let first_token = first.token();
    first.let_go();
    let (status, said) = waiter.finish(super::T);
    assert_eq!(status, 0, "{said}");
    let seat = read_token("seat");
    assert!(
        seat > first_token,
        "the seat got {seat} after {first_token}"
    );
    if let Some(shared) = passed {
        assert!(
            seat > shared,
            "the waiting seat got {seat}, below the shared run's {shared}, granted before it"
        );
    }
}
