//! `--min-hold D` (and DLOCK_MIN_HOLD): the lock stays taken until D after it was acquired, by the
//! store's clock, although the command ended and dlock exited with its status at once; other runs
//! see it busy (75 with `-n`), waiters wait it out, `status`/`list` show `kept_until`, `release
//! --force` ends it, and the next holder's token is higher.

use std::process::Command;
use std::time::{Duration, Instant};

use super::T;
use crate::support::target::Target;
use crate::support::*;

/// The min-hold of the scenarios: short, so the suite stays fast, and long enough for a few runs.
const D: Duration = Duration::from_secs(2);
const D_TEXT: &str = "2s";

/// Store clocks count in milliseconds (ZooKeeper's, Redis's); this much rounding is allowed.
const ROUNDING: Duration = Duration::from_millis(20);

/// `run -n NAME` exits 75 while the lock is kept; `started` is before the holder acquired it, so
/// the lock is kept at least until `started + D` and the check must end before then to say so.
fn busy_before(t: &Target, name: &str, started: Instant) {
    busy_before_with(t, name, started, 1);
}

/// Whether a busy line counts holders beyond the one it names (`..., and 2 more`), not to be
/// confused with a min-hold's `kept 2s more`.
pub(crate) fn counts_more_holders(line: &str) -> bool {
    line.split(" and ").skip(1).any(|rest| {
        let mut words = rest.split_whitespace();
        words.next().is_some_and(|n| n.parse::<u32>().is_ok())
            && words.next().is_some_and(|w| w.starts_with("more"))
    })
}

/// `busy_before` for a lock `kept` holders keep (as `status` shows them): the busy line names one
/// and counts the rest.
fn busy_before_with(t: &Target, name: &str, started: Instant, kept: usize) {
    let out = output(t.dlock(&["run", "-n", name, "--", "true"]));
    assert!(
        Instant::now() < started + D,
        "the machine took over {D:?} for a few runs; cannot check that {name} stays busy"
    );
    assert_eq!(
        code(&out),
        75,
        "{name} kept by --min-hold: {}",
        stderr(&out)
    );
    // The busy line says why: the holder's command may be long gone.
    assert!(
        stderr(&out).contains(&format!("by --min-hold {D_TEXT}; its command ended")),
        "{}",
        stderr(&out)
    );
    // And it counts the holders `status` shows, no more.
    let more = format!(" and {} more", kept.saturating_sub(1));
    assert_eq!(
        counts_more_holders(&stderr(&out)),
        kept > 1,
        "{kept} holders: {}",
        stderr(&out)
    );
    assert!(
        kept <= 1 || stderr(&out).contains(&more),
        "{}",
        stderr(&out)
    );
}

/// Runs `run ARGS -- sh -c 'echo $DLOCK_TOKEN; exit 3'`: exits 3 with the command at once.
fn run_exiting_3(t: &Target, args: &[&str]) -> u64 {
    let started = Instant::now();
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", "echo $DLOCK_TOKEN; exit 3"]);
    let out = output(t.dlock(&all));
    assert_eq!(code(&out), 3, "the command's status: {}", stderr(&out));
    assert!(
        started.elapsed() < D,
        "dlock exits when its command does, not after the min-hold"
    );
    stdout(&out).trim().parse().expect("the command's token")
}

/// The token a `run -w 60 NAME` gets once the min-hold ran out, and that it ran no sooner than
/// `started + D`.
fn waiter_after(t: &Target, name: &str, started: Instant) -> u64 {
    waiter_after_hold(t, name, started + D)
}

/// The token a `run -w 60 NAME` gets, and that it ran no sooner than `kept_until`.
fn waiter_after_hold(t: &Target, name: &str, kept_until: Instant) -> u64 {
    let echo = ["sh", "-c", "echo $DLOCK_TOKEN"];
    let out = output(t.dlock(&[&["run", "-w", "60", name, "--"][..], &echo].concat()));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        Instant::now() + ROUNDING >= kept_until,
        "the waiter ran before the min-hold ended"
    );
    stdout(&out).trim().parse().expect("the waiter's token")
}

pub fn run_exits_at_once_and_the_lock_stays_busy_until_min_hold_after_acquisition(t: &Target) {
    let started = Instant::now();
    let token = run_exiting_3(t, &["--min-hold", D_TEXT, "mh/a"]);
    busy_before(t, "mh/a", started);
    let next = waiter_after(t, "mh/a", started);
    assert!(next > token, "token {next} after {token}");
    let out = output(t.dlock(&["run", "-n", "mh/a", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "free once the waiter is done: {}",
        stderr(&out)
    );
}

pub fn status_and_list_show_kept_until_and_why(t: &Target) {
    let started = Instant::now();
    let token = run_exiting_3(t, &["--min-hold", D_TEXT, "mh/b"]);
    let out = output(t.dlock(&["status", "mh/b"]));
    assert_eq!(code(&out), 0, "held: {}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("token {token}"))
            && text.contains("\n    kept ")
            && text.contains("by --min-hold 2s; its command ended"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&output(t.dlock(&["status", "--json", "mh/b"])))).unwrap();
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["holders"][0]["token"], token, "{json}");
    let kept = json["holders"][0]["kept_until"]
        .as_str()
        .expect("kept_until");
    let until = humantime::parse_rfc3339(kept).expect("RFC 3339");
    let since = json["holders"][0]["since"].as_str().expect("since");
    let since = humantime::parse_rfc3339(since).expect("RFC 3339");
    // Both to the second: the end is D after the acquisition, give or take a second's rounding.
    let span = until.duration_since(since).expect("kept_until after since");
    assert!(
        span >= D - Duration::from_secs(1) && span <= D + Duration::from_secs(1),
        "{json}"
    );
    let list: serde_json::Value =
        serde_json::from_str(&stdout(&output(t.dlock(&["list", "--json", "mh/"])))).unwrap();
    assert_eq!(list[0]["holders"][0]["kept_until"], kept, "{list}");
    let text = stdout(&output(t.dlock(&["list", "mh/"])));
    assert!(
        text.starts_with("mh/b\t") && text.contains(", kept "),
        "{text}"
    );
    busy_before(t, "mh/b", started);

    // Without --min-hold, kept_until is null.
    let holder = super::Holding::start(t, &["mh/c"]);
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&output(t.dlock(&["status", "--json", "mh/c"])))).unwrap();
    assert!(json["holders"][0]["kept_until"].is_null(), "{json}");
    assert!(holder.let_go().success());
}

/// Every reader shows one `kept_until`, however often and whenever it reads within the hold:
/// a store that tells only whole seconds left must not make it jump by one between reads.
pub fn kept_until_reads_the_same_every_time(t: &Target) {
    run_exiting_3(t, &["--min-hold", "1h", "mh/s"]);
    let kept_until = || {
        let out = output(t.dlock(&["status", "--json", "mh/s"]));
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        json["holders"][0]["kept_until"].clone()
    };
    let first = kept_until();
    assert!(first.is_string(), "kept_until: {first}");
    // Over a whole second of reads, so that a second's fraction cannot hide a jump.
    let began = Instant::now();
    let mut reads = 0;
    while began.elapsed() < Duration::from_millis(1100) && reads < 300 {
        assert_eq!(
            kept_until(),
            first,
            "read {reads} after {:?}",
            began.elapsed()
        );
        reads += 1;
    }
    assert!(reads >= 2, "only {reads} reads in a second");
    let out = output(t.dlock(&["release", "--force", "mh/s"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

pub fn release_force_ends_a_min_hold_at_once(t: &Target) {
    let token = run_exiting_3(t, &["--min-hold", "1h", "mh/d"]);
    let out = output(t.dlock(&["run", "-n", "mh/d", "--", "true"]));
    assert_eq!(code(&out), 75, "kept for an hour: {}", stderr(&out));
    let out = output(t.dlock(&["release", "--force", "mh/d"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(t.dlock(&["run", "-n", "mh/d", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(
        code(&out),
        0,
        "free after release --force: {}",
        stderr(&out)
    );
    let next: u64 = stdout(&out).trim().parse().unwrap();
    assert!(next > token, "token {next} after {token}");
}

pub fn hold_with_min_hold_stays_taken_after_release(t: &Target) {
    let started = Instant::now();
    let script = format!(
        "v=$({hold}) || exit 9; eval \"$v\"; echo $DLOCK_TOKEN; {release} || exit 8",
        hold = t.shell_words(&["hold", "--print-env", "--min-hold", D_TEXT, "mh/e"]),
        release = t.shell_words(&["release", "mh/e"]),
    );
    let out = output({
        let mut sh = program("sh");
        sh.args(["-c", &script]);
        sh
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token: u64 = stdout(&out).trim().parse().expect("the hold's token");
    busy_before(t, "mh/e", started);
    assert!(waiter_after(t, "mh/e", started) > token);
}

pub fn dlock_min_hold_from_the_environment_and_the_flag_beating_it(t: &Target) {
    let env = |cmd: &mut Command, value: &str| {
        cmd.env("DLOCK_MIN_HOLD", value);
    };
    let mut cmd = t.dlock(&["run", "mh/f", "--", "true"]);
    env(&mut cmd, "1h");
    assert_eq!(code(&output(cmd)), 0);
    let out = output(t.dlock(&["run", "-n", "mh/f", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "DLOCK_MIN_HOLD=1h keeps it: {}",
        stderr(&out)
    );
    assert_eq!(code(&output(t.dlock(&["release", "--force", "mh/f"]))), 0);

    let mut cmd = t.dlock(&["run", "--min-hold", "0", "mh/f", "--", "true"]);
    env(&mut cmd, "1h");
    assert_eq!(code(&output(cmd)), 0);
    let out = output(t.dlock(&["run", "-n", "mh/f", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "--min-hold 0 beats DLOCK_MIN_HOLD: {}",
        stderr(&out)
    );

    for bad in ["-1", "2y", "soon", "nan"] {
        let mut cmd = t.dlock(&["run", "mh/f", "--", "true"]);
        env(&mut cmd, bad);
        let out = output(cmd);
        assert_eq!(code(&out), 64, "DLOCK_MIN_HOLD={bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("DLOCK_MIN_HOLD"), "{}", stderr(&out));
        let out = output(t.dlock(&["run", "--min-hold", bad, "mh/f", "--", "true"]));
        assert_eq!(code(&out), 64, "--min-hold {bad}: {}", stderr(&out));
    }
}

/// A caller whose clock is an hour off: the holder's clock behind (an end it computed would have
/// passed already), the checker's ahead (it would judge the end passed). The server's clock alone
/// judges, so neither shortens the hold. Not run on the file backend (see `contract`'s table of
/// unsupported scenarios).
pub fn a_callers_wrong_clock_cannot_shorten_it(t: &Target) {
    // libfaketime reaches a dynamically linked dlock only: the plain build (a static one, from
    // scripts/static, would make this scenario pass without testing anything).
    assert!(
        crate::support::build::is_dynamic(std::path::Path::new(&dlock_bin())),
        "{} is static: faketime cannot shift its clock",
        dlock_bin()
    );
    let shifted = |offset: &str, args: &[&str]| {
        let mut cmd = with_clock(offset);
        cmd.args(&t.args)
            .args(args)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        output(cmd)
    };
    let started = Instant::now();
    let out = shifted("-1h", &["run", "--min-hold", D_TEXT, "mh/g", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = shifted("+1h", &["run", "-n", "mh/g", "--", "true"]);
    assert!(Instant::now() < started + D, "too slow to check");
    assert_eq!(
        code(&out),
        75,
        "an hour ahead, still busy: {}",
        stderr(&out)
    );
    busy_before(t, "mh/g", started);
    let out = shifted("+1h", &["run", "-w", "60", "mh/g", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        Instant::now() + ROUNDING >= started + D,
        "the waiter ran early"
    );
}

/// Why the file backend is exempt from the scenario above, checked rather than assumed: it has
/// no server, so the host's clock judges, and a holder an hour behind writes an end that has
/// passed already. Should the file backend ever judge otherwise, this fails and the row of the
/// table of unsupported scenarios goes.
pub fn a_callers_wrong_clock_does_shorten_it_on_the_file_backend(t: &Target) {
    assert!(
        crate::support::build::is_dynamic(std::path::Path::new(&dlock_bin())),
        "{} is static: faketime cannot shift its clock",
        dlock_bin()
    );
    let mut behind = with_clock("-1h");
    behind
        .args(&t.args)
        .args(["run", "--min-hold", "60s", "mh/g", "--", "true"])
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    let out = output(behind);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(t.dlock(&["run", "-n", "mh/g", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "the file backend kept a min-hold its holder's clock had ended: {}",
        stderr(&out)
    );
}

/// A caller whose clocks all run five times fast, the monotonic clock included: by them the
/// min-hold has run out when the holder releases, and at once for a checker and a waiter. The
/// store's clock alone judges, so none of them shortens it (nor deletes what keeps it for
/// everyone). Server backends only, as above. (Not faster: the caller's own timeouts shrink as
/// much, and a loaded machine answers an etcd call in more than a twentieth of its 5 s. Its
/// connect timeout is 25 s, 5 s of real time: at 1 s, the suite's OpenSearch node, busy while
/// another node started, once took longer.)
pub fn a_callers_fast_clock_cannot_shorten_it(t: &Target) {
    assert!(
        crate::support::build::is_dynamic(std::path::Path::new(&dlock_bin())),
        "{} is static: faketime cannot speed up its clock",
        dlock_bin()
    );
    let hold = Duration::from_secs(6);
    let fast = |args: &[&str]| {
        let mut cmd = with_clock("+0 x5");
        cmd.args(&t.args)
            .args(["--connect-timeout", "25s"])
            .args(args)
            .env_remove("FAKETIME_DONT_FAKE_MONOTONIC");
        output(cmd)
    };
    let started = Instant::now();
    // The command runs 1.5 s of real time (7.5 s on the holder's clock, past the min-hold),
    // outside faketime so that its sleep is a real one: by its own clock, the holder's release
    // finds the min-hold over.
    let out = fast(&[
        "run",
        "--min-hold",
        "6s",
        "mh/k",
        "--",
        "env",
        "-u",
        "LD_PRELOAD",
        "-u",
        "FAKETIME",
        "sleep",
        "1.5",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = fast(&["run", "-n", "mh/k", "--", "true"]);
    assert!(Instant::now() < started + hold, "too slow to check");
    assert_eq!(
        code(&out),
        75,
        "busy for a caller whose clock runs fast: {}",
        stderr(&out)
    );
    // Ten minutes on the waiter's clock, two of real time.
    let out = fast(&["run", "-w", "600", "mh/k", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        Instant::now() + ROUNDING >= started + hold,
        "the waiter whose clock runs fast got in after {:?} of {hold:?}",
        started.elapsed()
    );
}

pub fn limit_holders_keep_their_seats_and_shared_ones_still_join(t: &Target) {
    let started = Instant::now();
    let first = run_exiting_3(t, &["-l", "2", "--min-hold", D_TEXT, "mh/h"]);
    let second = run_exiting_3(t, &["-l", "2", "--min-hold", D_TEXT, "mh/h"]);
    assert!(second > first);
    let shared = output(t.dlock(&["run", "-n", "-s", "mh/h", "--", "true"]));
    let limit = output(t.dlock(&["run", "-n", "-l", "2", "mh/h", "--", "true"]));
    busy_before_with(t, "mh/h", started, 2);
    assert_eq!(
        code(&shared),
        0,
        "a reader takes no seat: {}",
        stderr(&shared)
    );
    assert_eq!(code(&limit), 75, "both seats kept: {}", stderr(&limit));
    let out = output(t.dlock(&["run", "-w", "60", "-l", "2", "mh/h", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        Instant::now() + ROUNDING >= started + D,
        "a seat was free early"
    );
}

pub fn a_command_longer_than_the_min_hold_keeps_the_lock_to_its_end_then_frees_it(t: &Target) {
    let started = Instant::now();
    // A lease of 2 s: the suite's OpenSearch node, busy while another node started, once let a
    // 1 s one run out before the check.
    let holder = super::Holding::start(t, &["--min-hold", "1", "--ttl", "2s", "mh/i"]);
    // Past the min-hold (and any store's rounding of it up to whole seconds): only the running
    // command holds the lock now. A fixed wait, as the time passing is the scenario's point.
    std::thread::sleep(
        (started + Duration::from_secs(3)).saturating_duration_since(Instant::now()),
    );
    let out = output(t.dlock(&["run", "-n", "mh/i", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "held while its command runs: {}",
        stderr(&out)
    );
    assert!(holder.let_go().success());
    let out = output(t.dlock(&["run", "-n", "mh/i", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "free once the command ended after the min-hold: {}",
        stderr(&out)
    );
}

pub fn a_holder_that_dies_keeps_the_lock_until_the_min_hold_ends(t: &Target) {
    // Long enough to outlast the dead holder's lease (1s, which etcd makes at least about 2s) by
    // far: the lock must be busy after the lease, and before the min-hold ends.
    let hold = Duration::from_secs(6);
    let started = Instant::now();
    let mut holder = super::Holding::start(t, &["--min-hold", "6", "--ttl", "1s", "mh/j"]);
    let token = holder.token();
    signal(holder.dlock.id(), libc::SIGKILL);
    wait_exit(&mut holder.dlock, T);
    // Past the dead holder's lease, within the min-hold: a fixed wait, as the time passing is the
    // scenario's point.
    std::thread::sleep(
        (started + Duration::from_secs(4)).saturating_duration_since(Instant::now()),
    );
    let out = output(t.dlock(&["run", "-n", "mh/j", "--", "true"]));
    assert!(Instant::now() < started + hold, "too slow to check");
    assert_eq!(
        code(&out),
        75,
        "kept after its holder died: {}",
        stderr(&out)
    );
    let next = waiter_after_hold(t, "mh/j", started + hold);
    assert!(next > token, "token {next} after {token}");
}
