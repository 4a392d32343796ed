//! A holder cut off from its server (its relay frozen: a partition as the holder sees it) stops
//! its command before the server can give the lock to anyone else, on every network store: the
//! waiter's command, reaching the server directly, finds the holder's command already dead when
//! it starts.

use std::time::Duration;

use super::T;
use crate::support::relay::Relay;
use crate::support::target::Target;
use crate::support::watched::Watched;
use crate::support::*;

/// The lease: short, so that a round is quick and the margins are thin.
const TTL: &str = "2s";
/// Where in the renewal cycle the cut falls, after the holder's command has started: right
/// after the acquisition (as good as a renewal), and later into the first third of the lease.
/// The fault's timing, not a synchronisation: the rounds go through these in turn.
const CUT_AFTER: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(200),
    Duration::from_millis(450),
    Duration::from_millis(600),
];

/// How long after the waiter's run the holder may still be exiting: it stopped its command
/// before the waiter got in, and has nothing left to wait for (a cut-off `--cancel-in-progress`
/// holder once took 9 s, waiting on a read of its group records).
const EXIT_AFTER_THE_WAITER: Duration = Duration::from_secs(4);

/// `t`'s arguments with its server reached through `relay` instead.
fn through(t: &Target, relay: &Relay) -> Vec<String> {
    let server = format!("127.0.0.1:{}", t.ports[0]);
    let relayed = format!("127.0.0.1:{}", relay.port());
    let args: Vec<String> = t
        .args
        .iter()
        .map(|a| a.replace(&server, &relayed))
        .collect();
    assert_ne!(args, t.args, "the target names its server at {server}");
    args
}

/// Rounds of: a holder through a relay (with `holder_options` to `run`), the relay frozen, a
/// waiter straight to the server; the waiter's command reads the state of the holder's command as
/// it starts.
fn a_cut_off_holder_stops_its_command_before_a_waiter_starts(t: &Target, holder_options: &[&str]) {
    let relay = Relay::start(([127, 0, 0, 1], t.ports[0]).into());
    let relayed = through(t, &relay);
    for round in 0..load(3, 20) {
        let name = format!("cut{round}");
        let pid_file = t.scratch.file(&format!("{name}.pid"));
        let seen = t.scratch.file(&format!("{name}.seen"));
        let mut holder = dlock();
        holder
            .args(&relayed)
            .args(["-v", "run", "--ttl", TTL])
            .args(holder_options)
            .args([&name, "--"]);
        holder.args([
            "sh",
            "-c",
            &format!("echo $$ > '{}'; exec sleep 120", pid_file.display()),
        ]);
        let holder = Watched::start(holder);
        let command = read_pid(&pid_file);
        // The fault's timing within the lease (see CUT_AFTER).
        std::thread::sleep(CUT_AFTER[round % CUT_AFTER.len()]);
        relay.freeze();
        // The holder's command's state as the waiter's begins: Z (a zombie not yet reaped) or
        // none at all once it is dead.
        let look = format!(
            "s=$(sed -e 's/^.*) //' -e 's/ .*//' /proc/{command}/stat 2>/dev/null); \
             echo \"${{s:-gone}}\" > '{}'",
            seen.display()
        );
        // The waiter's own lease is not what is tested: a long one, so that a loaded machine
        // cannot make it lose it (79) between its grant and its release.
        let waiter = output_within(
            t.dlock(&[
                "run", "--ttl", "30s", "-w", "60s", &name, "--", "sh", "-c", &look,
            ]),
            T,
        );
        // The waiter got in after the holder's lease ended, when the holder had stopped its
        // command and was exiting: nothing it does on the way out (a read of its group records
        // hung on the cut) may wait on the server it cannot reach.
        let waited_for_the_holder = std::time::Instant::now();
        let (held, holder_err) = holder.finish(T);
        let exiting = waited_for_the_holder.elapsed();
        relay.thaw();
        let state = std::fs::read_to_string(&seen).unwrap_or_default();
        assert_eq!(code(&waiter), 0, "the waiter: {}", stderr(&waiter));
        assert!(
            matches!(state.trim(), "Z" | "X" | "gone"),
            "round {round} (cut {:?} after the start): the holder's command was still running \
             (state {:?}) when the waiter's started; the holder (exit {held}) said:\n{holder_err}",
            CUT_AFTER[round % CUT_AFTER.len()],
            state.trim()
        );
        assert_eq!(held, 79, "the cut-off holder lost its lock:\n{holder_err}");
        assert!(
            exiting < EXIT_AFTER_THE_WAITER,
            "round {round}: the cut-off holder exited {exiting:?} after the waiter's run (it said:\n\
             {holder_err})"
        );
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_cut_off_redis_holder_stops_its_command_before_a_waiter_starts() {
    a_cut_off_holder_stops_its_command_before_a_waiter_starts(&Target::suite_redis(), &[]);
}

#[cfg(feature = "zk")]
#[test]
fn a_cut_off_zookeeper_holder_stops_its_command_before_a_waiter_starts() {
    a_cut_off_holder_stops_its_command_before_a_waiter_starts(&Target::suite_zk(), &[]);
}

#[cfg(feature = "etcd")]
#[test]
fn a_cut_off_etcd_holder_stops_its_command_before_a_waiter_starts() {
    a_cut_off_holder_stops_its_command_before_a_waiter_starts(&Target::suite_etcd(), &[]);
}

#[cfg(feature = "postgres")]
#[test]
fn a_cut_off_postgres_holder_stops_its_command_before_a_waiter_starts() {
    a_cut_off_holder_stops_its_command_before_a_waiter_starts(&Target::suite_postgres(), &[]);
}

#[cfg(feature = "mysql")]
#[test]
fn a_cut_off_mysql_holder_stops_its_command_before_a_waiter_starts() {
    a_cut_off_holder_stops_its_command_before_a_waiter_starts(&Target::suite_mysql(), &[]);
}

// A holder that may be cancelled reads its group records while it holds: a read that hangs on the
// cut must not keep dlock from stopping the command when the lease runs out.
macro_rules! cut_off_cancellable {
    ($($feature:literal $test:ident $target:ident;)*) => {$(
        #[cfg(feature = $feature)]
        #[test]
        fn $test() {
            a_cut_off_holder_stops_its_command_before_a_waiter_starts(
                &Target::$target(),
                &["--cancel-in-progress"],
            );
        }
    )*};
}

cut_off_cancellable! {
    "redis" a_cut_off_cancellable_redis_holder_stops_its_command_before_a_waiter_starts suite_redis;
    "zk" a_cut_off_cancellable_zookeeper_holder_stops_its_command_before_a_waiter_starts suite_zk;
    "etcd" a_cut_off_cancellable_etcd_holder_stops_its_command_before_a_waiter_starts suite_etcd;
    "postgres" a_cut_off_cancellable_postgres_holder_stops_its_command_before_a_waiter_starts
        suite_postgres;
    "mysql" a_cut_off_cancellable_mysql_holder_stops_its_command_before_a_waiter_starts
        suite_mysql;
}

/// A holder stopped (SIGSTOP) while cut off, past its lease; its command ends meanwhile, and dlock
/// goes on only then: it sees the end before any renewal, and its release cannot reach the server.
/// Nothing shows the command held the lock to its end, so dlock says the lock was lost (79) rather
/// than pass on the command's success.
fn a_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss(t: &Target) {
    let relay = Relay::start(([127, 0, 0, 1], t.ports[0]).into());
    let mut run = dlock();
    run.args(through(t, &relay))
        .args(["-v", "run", "--ttl", TTL, "vouch"]);
    let ttl = humantime::parse_duration(TTL).expect("TTL");
    let (status, said) = succeed_after_a_silent_loss(run, t.scratch.path(), || {
        relay.freeze();
        // Past the lease by the server's clock: the fault's timing, not a synchronisation.
        std::thread::sleep(ttl + Duration::from_millis(500));
    });
    relay.thaw();
    assert_eq!(status, 79, "dlock said:\n{said}");
    assert!(
        said.contains("the lock was lost before the command ended"),
        "dlock said:\n{said}"
    );
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss() {
    a_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss(&Target::suite_redis());
}

#[cfg(feature = "zk")]
#[test]
fn a_zookeeper_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss() {
    a_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss(&Target::suite_zk());
}

#[cfg(feature = "etcd")]
#[test]
fn an_etcd_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss() {
    a_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss(&Target::suite_etcd());
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss() {
    a_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss(&Target::suite_postgres());
}

#[cfg(feature = "mysql")]
#[test]
fn a_mysql_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss() {
    a_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss(&Target::suite_mysql());
}

#[cfg(feature = "elasticsearch")]
#[test]
fn an_elasticsearch_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss() {
    a_release_that_cannot_vouch_for_a_run_past_its_lease_is_a_loss(&Target::suite_elasticsearch());
}
