//! What a store keeps of a lock's runs, as `status --json` shows it: the last run (running, ended
//! and how, or never ended once its holder is gone) and the last success; `run
//! --release-on-failure` with `--min-hold`; and `status --ran-within`'s exit statuses 0 to 3.

use std::process::{Command, Stdio};

use serde_json::Value;

use super::{Holding, T};
use crate::support::target::Target;
use crate::support::*;

/// `status NAME --json`: the whole answer.
fn status_json(t: &Target, name: &str) -> Value {
    let out = output(t.dlock(&["status", name, "--json"]));
    assert!(
        matches!(code(&out), 0 | 1),
        "status {name}: {}",
        stderr(&out)
    );
    assert_eq!(stderr(&out), "", "status {name} says nothing on stderr");
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// `status NAME --json`'s `last_run` and `last_success`.
fn runs(t: &Target, name: &str) -> (Value, Value) {
    let json = status_json(t, name);
    (json["last_run"].clone(), json["last_success"].clone())
}

/// `run NAME -- sh -c SCRIPT` (after `flags`), where SCRIPT also prints the token: the exit
/// status and the token.
fn run(t: &Target, flags: &[&str], name: &str, script: &str) -> (i32, u64) {
    let script = format!("echo $DLOCK_TOKEN; {script}");
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let out = output(t.dlock(&args));
    let token = stdout(&out)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no token: {}", stderr(&out)));
    (code(&out), token)
}

/// `dlock` on `t`'s backend at a place where its store is not: a closed port on loopback (a
/// missing directory for the file backend), giving up after a second.
/// The port refuses for as long as the returned socket lives.
fn store_down(t: &Target) -> (Command, std::os::fd::OwnedFd) {
    let (held, port) = refusing_port();
    let url = (t.caps().unreachable_url)(t, port);
    let mut down = dlock();
    down.args([
        "--backend",
        t.backend(),
        "--url",
        &url,
        "--connect-timeout",
        "1s",
    ]);
    (down, held)
}

/// A run's record ended as `ending` (`exit:0`), and took the lock with `token`.
fn assert_ended(run: &Value, ending: &str, token: u64) {
    assert_eq!(run["ending"], ending, "{run:#}");
    assert_eq!(run["token"], token, "{run:#}");
    assert_eq!(run["running"], false, "{run:#}");
    let (acquired, ended) = (run["acquired"].as_str(), run["ended"].as_str());
    assert!(
        acquired.is_some() && ended.is_some() && acquired <= ended,
        "{run:#}"
    );
    assert!(run["host"].is_string() && run["pid"].is_u64(), "{run:#}");
}

pub fn a_run_is_running_while_it_holds_then_ended_and_the_last_success(t: &Target) {
    let (last, success) = runs(t, "lr/ok");
    assert!(
        last.is_null() && success.is_null(),
        "never run: {last} {success}"
    );
    let holder = Holding::start(t, &["--message", "nightly backup", "lr/ok"]);
    let (last, _) = runs(t, "lr/ok");
    assert_eq!(last["running"], true, "{last:#}");
    assert!(
        last["ended"].is_null() && last["ending"].is_null(),
        "{last:#}"
    );
    assert_eq!(last["token"], holder.token(), "{last:#}");
    assert_eq!(last["message"], "nightly backup", "{last:#}");
    let token = holder.token();
    assert_eq!(holder.let_go().code(), Some(0));
    let (last, success) = runs(t, "lr/ok");
    assert_ended(&last, "exit:0", token);
    assert_eq!(
        last, success,
        "a success is the last run and the last success"
    );
    let text = stdout(&output(t.dlock(&["status", "lr/ok"])));
    assert!(
        text.contains("  last run: ") && text.contains(", exit 0, token "),
        "{text}"
    );
    assert!(!text.contains("last success:"), "the same run: {text}");
}

pub fn a_failed_run_is_the_last_run_and_the_success_before_it_stays(t: &Target) {
    let (status, ok) = run(t, &[], "lr/fail", "true");
    assert_eq!(status, 0);
    let (status, failed) = run(t, &[], "lr/fail", "exit 3");
    assert_eq!(status, 3);
    let (last, success) = runs(t, "lr/fail");
    assert_ended(&last, "exit:3", failed);
    assert_ended(&success, "exit:0", ok);
    let text = stdout(&output(t.dlock(&["status", "lr/fail"])));
    assert!(
        text.contains(", exit 3, token ") && text.contains("  last success: "),
        "{text}"
    );
}

pub fn a_run_ended_by_a_signal_records_the_signal(t: &Target) {
    let holder = Holding::start(t, &["lr/signal"]);
    let token = holder.token();
    // Forwarded to the command's group: the shell ends by it.
    signal(holder.dlock.id(), libc::SIGTERM);
    let (status, _) = holder.finish();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let (last, success) = runs(t, "lr/signal");
    assert_ended(&last, &format!("signal:{}", libc::SIGTERM), token);
    assert!(success.is_null(), "{success:#}");
}

pub fn a_run_forced_away_records_forced(t: &Target) {
    let holder = Holding::start(t, &["--ttl", "1s", "lr/forced"]);
    let token = holder.token();
    let out = output(t.dlock(&["release", "--force", "lr/forced"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (status, err) = holder.finish();
    assert_eq!(status.code(), Some(79), "{err}");
    let (last, success) = runs(t, "lr/forced");
    assert_ended(&last, "forced", token);
    assert!(success.is_null(), "{success:#}");
}

/// dlock is stopped while its command runs, the lock is broken and another run takes it and
/// succeeds; when the first dlock runs again it finds its lock lost (79), and writes nothing over
/// the later run's record.
pub fn a_run_that_lost_its_lock_leaves_the_later_runs_record_alone(t: &Target) {
    let holder = Holding::start(t, &["--ttl", "1s", "lr/lost"]);
    signal(holder.dlock.id(), libc::SIGSTOP);
    let out = output(t.dlock(&["release", "--force", "lr/lost"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (status, later) = run(t, &["-n"], "lr/lost", "true");
    assert_eq!(status, 0, "another run takes the lock");
    signal(holder.dlock.id(), libc::SIGCONT);
    let (status, err) = holder.finish();
    assert_eq!(status.code(), Some(79), "{err}");
    let (last, success) = runs(t, "lr/lost");
    assert_ended(&last, "exit:0", later);
    assert_ended(&success, "exit:0", later);
}

pub fn a_holder_killed_with_sigkill_never_ended_once_its_lease_passed(t: &Target) {
    let mut holder = Holding::start(t, &["--ttl", "1s", "lr/killed"]);
    let token = holder.token();
    signal(holder.dlock.id(), libc::SIGKILL);
    wait_exit(&mut holder.dlock, T);
    wait_until("the killed holder's lease to pass", T, || {
        code(&output(t.dlock(&["status", "lr/killed"]))) == 1
    });
    let (last, success) = runs(t, "lr/killed");
    assert_eq!(last["token"], token, "{last:#}");
    assert!(
        last["ended"].is_null() && last["ending"].is_null(),
        "{last:#}"
    );
    assert_eq!(last["running"], false, "{last:#}");
    assert!(success.is_null(), "{success:#}");
    let text = stdout(&output(t.dlock(&["status", "lr/killed"])));
    assert!(text.contains(", never ended, token "), "{text}");
}

/// `sh -c SCRIPT`, its dlock lines given the target's arguments: its status.
fn shell(t: &Target, script: &str) -> i32 {
    let script = script.replace("dlock ", &format!("{} ", t.shell_words(&[])));
    let status = program("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .status()
        .expect("run sh");
    status.code().expect("sh exits")
}

pub fn a_hold_released_succeeds_and_one_whose_shell_exits_does_not(t: &Target) {
    let status = shell(
        t,
        "dlock hold -n lr/hold-released || exit $?; dlock release lr/hold-released",
    );
    assert_eq!(status, 0);
    let (last, success) = runs(t, "lr/hold-released");
    assert_eq!(last["ending"], "released", "{last:#}");
    assert_eq!(last, success, "a released hold is a success");

    let status = shell(t, "dlock hold -n lr/hold-exited || exit $?; exit 0");
    assert_eq!(status, 0);
    wait_until("the keeper to see its shell gone", T, || {
        runs(t, "lr/hold-exited").0["ending"] == "shell-exited"
    });
    let (last, success) = runs(t, "lr/hold-exited");
    assert!(last["ended"].is_string(), "{last:#}");
    assert!(success.is_null(), "{success:#}");
}

pub fn release_on_failure_frees_a_min_hold_lock_after_a_failure_only(t: &Target) {
    let keep = ["-n", "--min-hold", "60s", "--release-on-failure"];
    let (status, failed) = run(t, &keep, "lr/rof", "exit 3");
    assert_eq!(status, 3);
    let (status, next) = run(t, &["-n"], "lr/rof", "true");
    assert_eq!(status, 0, "a failure frees the lock at once");
    assert!(next > failed);
    let (status, ok) = run(t, &keep, "lr/rof", "true");
    assert_eq!(status, 0);
    let out = output(t.dlock(&["run", "-n", "lr/rof", "--", "true"]));
    assert_eq!(code(&out), 75, "a success keeps it: {}", stderr(&out));
    let out = output(t.dlock(&["list", "lr/rof", "--json"]));
    let list: Value = serde_json::from_str(&stdout(&out)).expect("list JSON");
    assert_eq!(list[0]["name"], "lr/rof", "{list:#}");
    assert_ended(&list[0]["last_run"], "exit:0", ok);
    assert_ended(&list[0]["last_success"], "exit:0", ok);
    // The variable says the same as the flag.
    let out = output(t.dlock(&["release", "--force", "lr/rof"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (status, _) = run(t, &["-n", "--min-hold", "60s"], "lr/rof-env", "exit 3");
    assert_eq!(status, 3);
    let out = output(t.dlock(&["run", "-n", "lr/rof-env", "--", "true"]));
    assert_eq!(code(&out), 75, "without it a failure keeps the lock");
    let out = output(t.dlock(&["release", "--force", "lr/rof-env"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut env_run = t.dlock(&[
        "run",
        "-n",
        "--min-hold",
        "60s",
        "lr/rof-env",
        "--",
        "false",
    ]);
    env_run.env("DLOCK_RELEASE_ON_FAILURE", "1");
    assert_eq!(code(&output(env_run)), 1);
    let out = output(t.dlock(&["run", "-n", "lr/rof-env", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "DLOCK_RELEASE_ON_FAILURE=1: {}",
        stderr(&out)
    );
}

/// `status NAME --ran-within WITHIN` (after `args`): its exit status and its one line.
fn ran_within(mut dlock: Command, name: &str, within: &str) -> (i32, String) {
    dlock.args(["status", name, "--ran-within", within]);
    let out = output(dlock);
    let line = stdout(&out);
    assert_eq!(
        line.lines().count(),
        1,
        "one line: {line:?} {}",
        stderr(&out)
    );
    (code(&out), line.trim_end().to_owned())
}

pub fn ran_within_is_0_ok_1_too_long_ago_2_never_succeeded(t: &Target) {
    let (status, line) = ran_within(t.dlock(&[]), "lr/check", "1h");
    assert_eq!(status, 2, "{line}");
    assert!(
        line.starts_with("CRITICAL: lr/check has never succeeded"),
        "{line}"
    );
    let (status, _) = run(t, &[], "lr/check", "exit 3");
    assert_eq!(status, 3);
    let (status, line) = ran_within(t.dlock(&[]), "lr/check", "1h");
    assert_eq!(status, 2, "{line}");
    assert!(line.contains("exit 3"), "the last run says why: {line}");
    let (status, _) = run(t, &[], "lr/check", "true");
    assert_eq!(status, 0);
    let (status, line) = ran_within(t.dlock(&[]), "lr/check", "1h");
    assert_eq!(status, 0, "{line}");
    assert!(line.starts_with("OK: lr/check last succeeded "), "{line}");
    assert!(line.contains(" ago on "), "{line}");
    // A later failure does not hide the success.
    let (status, _) = run(t, &[], "lr/check", "exit 3");
    assert_eq!(status, 3);
    assert_eq!(ran_within(t.dlock(&[]), "lr/check", "1h").0, 0);
    wait_until("the success to be over a second old", T, || {
        ran_within(t.dlock(&[]), "lr/check", "1s").0 == 1
    });
    let (_, line) = ran_within(t.dlock(&[]), "lr/check", "1s");
    assert!(
        line.starts_with("WARNING: lr/check last succeeded ") && line.ends_with("more than 1s ago"),
        "{line}"
    );
}

pub fn ran_within_is_3_unknown_when_the_store_cannot_be_reached(t: &Target) {
    let (down, _refusing) = store_down(t);
    let (status, line) = ran_within(down, "lr/down", "1h");
    assert_eq!(status, 3, "{line}");
    assert!(line.starts_with("UNKNOWN: lr/down: "), "{line}");
}

/// A run by a host whose clock is 30 days ahead: a store with a clock dates it by its own, and
/// its success is recent; on one without (the file backend, etcd: the writer's clock dated it),
/// the reader finds it dated after its time now, unreadable (3), never a success within 1h.
pub fn a_run_by_a_clock_30_days_ahead_is_never_a_recent_success(t: &Target) {
    let mut ahead = with_clock("+30d");
    ahead.args(&t.args).args(["run", "lr/ahead", "--", "true"]);
    let out = output(ahead);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (status, line) = ran_within(t.dlock(&[]), "lr/ahead", "1h");
    if t.caps().dates_runs_by_its_clock {
        assert_eq!(status, 0, "dated by the store's clock: {line}")
    } else {
        assert_eq!(status, 3, "UNKNOWN: {line}");
        assert!(
            line.starts_with("UNKNOWN: lr/ahead has an unreadable record of its last success")
                && line.contains("dated after"),
            "{line}"
        );
    }
}

/// dlock is stopped while its command runs, until its lock is gone (the lease passed; on the file
/// backend, whose lock has no lease, its lock file removed); then the command exits 0 and dlock
/// goes on: it learns of the loss from its release, exits 79, and the run is recorded lost, with
/// no success: a run that did not hold its lock to its end is none, whatever its command said.
pub fn a_run_that_lost_its_lock_before_its_command_succeeded_ends_lost(t: &Target) {
    let scratch = tempfile::tempdir().unwrap();
    let location = status_json(t, "lr/silent")["location"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = t.dlock(&["run", "--ttl", "1s", "lr/silent"]);
    let (status, said) = succeed_after_a_silent_loss(run, scratch.path(), || {
        if t.caps().locks_are_files {
            std::fs::remove_file(&location).unwrap()
        } else {
            wait_until("the stopped holder's lease to pass", T, || {
                code(&output(t.dlock(&["status", "lr/silent"]))) == 1
            })
        }
    });
    assert_eq!(status, 79, "{said}");
    assert!(
        said.contains("the lock was lost before the command ended"),
        "found by the release: {said}"
    );
    let (last, success) = runs(t, "lr/silent");
    if t.caps().records_a_run_lost_with_its_lease {
        assert_eq!(last["ending"], "lost", "{last:#}");
    } else {
        // The session expired with the lease, and a session that is over writes nothing: the run
        // reads as never ended.
        assert!(last["ending"].is_null(), "{last:#}");
        assert_eq!(last["running"], false, "{last:#}");
    }
    assert!(success.is_null(), "{success:#}");
    let out = output(t.dlock(&["status", "lr/silent", "--ran-within", "1h"]));
    assert_eq!(code(&out), 2, "never succeeded: {}", stdout(&out));
}

/// `list --runs PREFIX --json`: the names and their records.
fn list_runs_json(t: &Target, prefix: &str) -> Vec<Value> {
    let out = output(t.dlock(&["list", "--runs", prefix, "--json"]));
    assert_eq!(code(&out), 0, "list --runs --json: {}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "",
        "list --runs --json says nothing on stderr"
    );
    let json: Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    json.as_array()
        .unwrap_or_else(|| panic!("an array: {json:#}"))
        .clone()
}

/// `list --runs` shows every lock with a record, held or free, by name, in `status`'s words: one
/// that succeeded, one that failed after a success (both shown), one held now (running); a prefix
/// picks among them, and a name never run, or run under another prefix, is not shown. A store
/// that cannot be reached is 69.
pub fn list_runs_shows_every_lock_that_ran_held_or_free_and_how_each_ended(t: &Target) {
    let (status, ok) = run(t, &[], "lrl/ok", "true");
    assert_eq!(status, 0);
    let (status, succeeded) = run(t, &[], "lrl/failed", "true");
    assert_eq!(status, 0);
    let (status, failed) = run(t, &[], "lrl/failed", "exit 3");
    assert_eq!(status, 3);
    let (status, _) = run(t, &[], "lrl-elsewhere", "true");
    assert_eq!(status, 0);
    // Asked about, never run: no record.
    assert_eq!(code(&output(t.dlock(&["status", "lrl/never"]))), 1);
    let holder = Holding::start(t, &["lrl/held"]);
    let held = holder.token();

    let out = output(t.dlock(&["list", "--runs", "lrl/"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "nothing on stderr");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "three locks ran: {text}");
    let (failed_line, held_line, ok_line) = (lines[0], lines[1], lines[2]);
    assert!(
        failed_line.starts_with("lrl/failed\tfree, last run ")
            && failed_line.contains(&format!(", exit 3, token {failed}; last success "))
            && failed_line.ends_with(&format!(", exit 0, token {succeeded}")),
        "{text}"
    );
    assert!(
        held_line.starts_with("lrl/held\theld, last run ")
            && held_line.contains(", running since ")
            && held_line.ends_with(&format!(", token {held}")),
        "{text}"
    );
    assert_eq!(
        ok_line
            .strip_prefix("lrl/ok\tfree, last run ")
            .map(|rest| rest.ends_with(&format!(", exit 0, token {ok}"))),
        Some(true),
        "one line, the success being the last run: {text}"
    );

    let all = list_runs_json(t, "lrl/");
    let names: Vec<&str> = all.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(names, ["lrl/failed", "lrl/held", "lrl/ok"], "{all:#?}");
    assert_ended(&all[0]["last_run"], "exit:3", failed);
    assert_ended(&all[0]["last_success"], "exit:0", succeeded);
    assert_eq!(all[1]["last_run"]["running"], true, "{:#}", all[1]);
    assert_eq!(all[1]["last_run"]["token"], held, "{:#}", all[1]);
    assert!(all[1]["last_success"].is_null(), "{:#}", all[1]);
    assert_ended(&all[2]["last_run"], "exit:0", ok);
    assert_eq!(all[2]["last_run"], all[2]["last_success"], "{:#}", all[2]);
    // The same fields as `status --json`'s.
    let (last, success) = runs(t, "lrl/failed");
    assert_eq!(
        (&all[0]["last_run"], &all[0]["last_success"]),
        (&last, &success)
    );

    let only = list_runs_json(t, "lrl/f");
    let names: Vec<&str> = only.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(names, ["lrl/failed"], "{only:#?}");
    assert_eq!(list_runs_json(t, "lrl/never"), Vec::<Value>::new());
    let wider = list_runs_json(t, "lrl");
    assert!(
        wider.iter().any(|l| l["name"] == "lrl-elsewhere") && wider.len() == 4,
        "{wider:#?}"
    );

    assert_eq!(holder.let_go().code(), Some(0));
    let after = list_runs_json(t, "lrl/held");
    assert_ended(&after[0]["last_run"], "exit:0", held);

    let (mut down, _refusing) = store_down(t);
    down.args(["list", "--runs"]);
    let down = output(down);
    assert_eq!(code(&down), 69, "{}", stderr(&down));
}
