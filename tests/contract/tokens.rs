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

/// A holder that waited behind another is shown by `status` (text and `--json`) with the token
/// its command got, the one taken at its grant, not one from when it joined the line.
pub fn status_shows_the_token_a_holder_that_waited_got(t: &Target) {
    let first = Holding::start(t, &["waited"]);
    let (token_file, go) = (t.scratch.file("waited-token"), t.scratch.file("waited-go"));
    let script = format!(
        "echo $DLOCK_TOKEN > '{f}.tmp'; mv '{f}.tmp' '{f}'; i=0; \
         while [ ! -e '{go}' ] && [ $i -lt 12000 ]; do sleep 0.05; i=$((i+1)); done",
        f = token_file.display(),
        go = go.display()
    );
    let waiter = super::waiting(t, &["run", "-w", "2m", "waited", "--", "sh", "-c", &script]);
    assert!(first.let_go().success());
    wait_for_file(&token_file, super::T);
    let text = std::fs::read_to_string(&token_file).expect("the waiter's token");
    let token: u64 = text.trim().parse().expect("a token");
    let out = output(t.dlock(&["status", "--json", "waited"]));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    let holders = json["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{json}");
    assert_eq!(holders[0]["token"], token, "{json}");
    let out = output(t.dlock(&["status", "waited"]));
    let said = stdout(&out);
    assert!(
        said.contains(&format!(", token {token}")),
        "{token}: {said}"
    );
    std::fs::write(&go, "").expect("write the go file");
    let (status, said) = waiter.finish(super::T);
    assert_eq!(status, 0, "{said}");
}
