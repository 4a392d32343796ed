//! Fencing tokens: every acquisition of a name gets a token above every earlier one, also after a
//! holder was killed, and the command learns its lock from its environment.

use super::Holding;
use crate::support::target::Target;
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
