//! Concurrency groups: `run --supersede` (a newer `--supersede` waiter makes the older give up
//! with 80) and `run --cancel-in-progress` (a holder that said it too is terminated and exits 81,
//! `status` says by whom, and the asker runs next, ahead of an older waiter), with several names
//! all or none; and, on a store that keeps no group records yet, the options refused (64).

use std::path::Path;

use super::{Holding, T};
use crate::support::target::Target;
use crate::support::watched::Watched;
use crate::support::*;

/// A holder of `names` whose command notes SIGTERM in `TERM_FILE` and exits 3 on it; returns once
/// it runs.
fn trapping_holder(t: &Target, options: &[&str], names: &[&str], tag: &str) -> (Watched, String) {
    let (ready, termed) = (
        t.scratch_file(&format!("{tag}.ready")),
        t.scratch_file(&format!("{tag}.term")),
    );
    let script = format!(
        "trap 'echo TERM > {termed}; exit 3' TERM; touch {ready}; i=0; \
         while [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done"
    );
    let mut args = vec!["run"];
    args.extend_from_slice(options);
    args.extend_from_slice(names);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let holder = Watched::start(t.dlock(&args));
    wait_for_file(Path::new(&ready), T);
    (holder, termed)
}

/// `run OPTIONS NAMES -- sh -c 'echo TAG >> ORDER'`, once it waits.
fn appending(t: &Target, options: &[&str], names: &[&str], tag: &str, order: &str) -> Watched {
    let script = format!("echo {tag} >> {order}");
    let mut args = vec!["run"];
    args.extend_from_slice(options);
    args.extend_from_slice(names);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    asking(t, &args)
}

/// `dlock -v ARGS` in the background, returned once it waits or has asked a holder to end: a run
/// with --cancel-in-progress may get the lock before it says it waits, the holder ended so soon.
fn asking(t: &Target, args: &[&str]) -> Watched {
    let mut all = vec!["-v"];
    all.extend_from_slice(args);
    let mut asker = Watched::start(t.dlock(&all));
    asker.wait_for_line("a wait or a request", T, |l| {
        l.contains("waiting for lock") || l.contains("to end (--cancel-in-progress)")
    });
    asker
}

fn order_of(order: &str) -> String {
    std::fs::read_to_string(order).unwrap_or_default()
}

/// The first holds, the second waits with --supersede, the third arrives with --supersede: the
/// second exits 80 naming the third (its --message) and never runs; the third runs after the first.
pub fn a_newer_supersede_waiter_makes_the_older_give_up_with_80(t: &Target) {
    let order = t.scratch_file("order");
    let first = Holding::start(t, &["sup"]);
    let second = appending(
        t,
        &["--supersede", "--message", "second"],
        &["sup"],
        "2",
        &order,
    );
    let third = appending(
        t,
        &["--supersede", "--message", "third"],
        &["sup"],
        "3",
        &order,
    );
    let (code, said) = second.finish(T);
    assert_eq!(code, 80, "{said}");
    assert!(
        said.contains("superseded by") && said.contains("\"third\""),
        "{said}"
    );
    assert!(first.let_go().success());
    let (code, said) = third.finish(T);
    assert_eq!(code, 0, "{said}");
    assert_eq!(order_of(&order), "3\n");
}

/// The same with two names (from the environment, DLOCK_SUPERSEDE): a newer waiter for the set
/// replaces the older, and a waiter without the option is not touched.
pub fn supersede_with_several_names_and_a_plain_waiter_untouched(t: &Target) {
    let order = t.scratch_file("order");
    let first = Holding::start(t, &["sa", "sb"]);
    let plain = appending(t, &[], &["sa", "sb"], "plain", &order);
    let mut older = crate::support::watched::Watched::start({
        let script = format!("echo older >> {order}");
        let mut cmd = t.dlock(&["-v", "run", "sa", "sb", "--", "sh", "-c", &script]);
        cmd.env("DLOCK_SUPERSEDE", "1");
        cmd
    });
    older.wait_for("waiting for lock", T);
    let newer = appending(t, &["--supersede"], &["sa", "sb"], "newer", &order);
    let (code, said) = older.finish(T);
    assert_eq!(code, 80, "{said}");
    assert!(first.let_go().success());
    let (code, said) = newer.finish(T);
    assert_eq!(code, 0, "{said}");
    let (code, said) = plain.finish(T);
    assert_eq!(code, 0, "{said}");
    let ran = order_of(&order);
    assert!(
        ran.contains("plain") && ran.contains("newer") && !ran.contains("older"),
        "{ran}"
    );
}

/// A holder with --cancel-in-progress, an older waiter without it, then an asker with it: the
/// holder's command gets SIGTERM, its dlock exits 81 saying who cancelled it, `status` records
/// it, and the asker runs before the older waiter.
pub fn cancel_in_progress_ends_the_holder_and_the_asker_runs_next(t: &Target) {
    let order = t.scratch_file("order");
    let (holder, termed) = trapping_holder(
        t,
        &["--cancel-in-progress", "--message", "first"],
        &["cip"],
        "h",
    );
    let status = output(t.dlock(&["status", "cip"]));
    assert!(
        stdout(&status).contains("cancellable holder (--cancel-in-progress)"),
        "{}",
        stdout(&status)
    );
    let older = appending(t, &[], &["cip"], "older", &order);
    let asker = appending(
        t,
        &["--cancel-in-progress", "--message", "asker"],
        &["cip"],
        "asker",
        &order,
    );
    let (code, said) = holder.finish(T);
    assert_eq!(code, 81, "{said}");
    assert!(
        said.contains("cancelled by") && said.contains("\"asker\""),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(&termed).unwrap_or_default(),
        "TERM\n"
    );
    let (code, said) = asker.finish(T);
    assert_eq!(code, 0, "{said}");
    let (code, said) = older.finish(T);
    assert_eq!(code, 0, "{said}");
    assert_eq!(order_of(&order), "asker\nolder\n");
    let status = output(t.dlock(&["status", "--json", "cip"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    let last = &json["group"]["last_cancelled"];
    assert_eq!(last["holder"]["message"], "first", "{json}");
    assert_eq!(last["by"]["message"], "asker", "{json}");
    assert!(json["group"]["cancel"].is_null(), "{json}");
}

/// A holder without --cancel-in-progress is not cancelled: the asker says so once and waits, and
/// runs after the holder ends by itself.
pub fn a_holder_without_the_option_is_not_cancelled(t: &Target) {
    let order = t.scratch_file("order");
    let holder = Holding::start(t, &["nc"]);
    let mut asker = appending(t, &["--cancel-in-progress"], &["nc"], "asker", &order);
    asker.wait_for("did not say --cancel-in-progress", T);
    asker.sees_no_line_with("asked", std::time::Duration::from_millis(500));
    assert!(
        holder.let_go().success(),
        "the holder was not to be cancelled"
    );
    let (code, said) = asker.finish(T);
    assert_eq!(code, 0, "{said}");
    assert_eq!(order_of(&order), "asker\n");
}

/// A lock kept by --min-hold after its holder's command ended has nothing to cancel: an asker
/// says so and waits or fails as any run would (here 75 after --wait).
pub fn a_lock_kept_by_min_hold_after_its_command_has_nothing_to_cancel(t: &Target) {
    let out = output(t.dlock(&[
        "run",
        "--cancel-in-progress",
        "--min-hold",
        "60s",
        "kept",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(t.dlock(&[
        "run",
        "--cancel-in-progress",
        "--wait",
        "1s",
        "kept",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing to cancel"),
        "{}",
        stderr(&out)
    );
    let out = output(t.dlock(&["release", "--force", "kept"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Several names, all or none: with one holder cancellable and another not, nobody is asked; a
/// holder of both names that said it is cancelled once, and the asker gets both.
pub fn cancel_with_several_names_is_all_or_none(t: &Target) {
    let order = t.scratch_file("order");
    let (yes, _) = trapping_holder(t, &["--cancel-in-progress"], &["ma"], "yes");
    let no = Holding::start(t, &["mb"]);
    let mut asker = appending(t, &["--cancel-in-progress"], &["ma", "mb"], "one", &order);
    asker.wait_for("did not say --cancel-in-progress", T);
    assert!(no.let_go().success());
    // The cancellable holder of `ma` was not asked: it holds on until it is let go.
    let mut yes = yes;
    yes.sees_no_line_with("cancelled", std::time::Duration::from_millis(500));
    assert!(
        matches!(yes.child.try_wait(), Ok(None)),
        "the holder of ma ended"
    );
    // Let go as a user would stop it (not SIGKILL, whose lease the asker would then wait out).
    signal(yes.child.id(), libc::SIGTERM);
    let _ = yes.finish(T);
    let (code, said) = asker.finish(T);
    assert_eq!(code, 0, "{said}");

    let (both, _) = trapping_holder(t, &["--cancel-in-progress"], &["ma", "mb"], "both");
    let asker = appending(t, &["--cancel-in-progress"], &["ma", "mb"], "two", &order);
    let (code, said) = both.finish(T);
    assert_eq!(code, 81, "{said}");
    let (code, said) = asker.finish(T);
    assert_eq!(code, 0, "{said}");
    assert_eq!(order_of(&order), "one\ntwo\n");
}

/// A shared holder that said --cancel-in-progress is not in the way of a shared asker (which
/// runs beside it) but is cancelled by an exclusive one.
pub fn a_shared_holder_is_cancelled_only_by_an_exclusive_request(t: &Target) {
    let (holder, _) = trapping_holder(t, &["--shared", "--cancel-in-progress"], &["sh"], "sh");
    let out = output(t.dlock(&[
        "run",
        "--shared",
        "--cancel-in-progress",
        "sh",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let asker = asking(t, &["run", "--cancel-in-progress", "sh", "--", "true"]);
    let (code, said) = holder.finish(T);
    assert_eq!(code, 81, "{said}");
    let (code, said) = asker.finish(T);
    assert_eq!(code, 0, "{said}");
}

/// On a store that keeps no group records yet, either option is refused with 64 naming the store,
/// on the command line and from the environment, before anything is taken.
pub fn the_options_are_refused_where_the_store_keeps_no_groups(t: &Target) {
    for (option, variable) in [
        ("--supersede", "DLOCK_SUPERSEDE"),
        ("--cancel-in-progress", "DLOCK_CANCEL_IN_PROGRESS"),
    ] {
        let out = output(t.dlock(&["run", option, "rf", "--", "true"]));
        assert_eq!(code(&out), 64, "{}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains(option) && said.contains(&format!("the {} backend", t.backend())),
            "{said}"
        );
        let mut cmd = t.dlock(&["run", "rf", "--", "true"]);
        cmd.env(variable, "1");
        let out = output(cmd);
        assert_eq!(code(&out), 64, "{}", stderr(&out));
    }
    let status = output(t.dlock(&["status", "rf"]));
    assert_eq!(code(&status), 1, "nothing was taken: {}", stdout(&status));
}

/// Under load: runs with --cancel-in-progress (some with --supersede too) and plain runs, in loops
/// on one name, cancel and supersede each other, with requests and releases crossing: never two
/// holders at once, never a token twice, every run ends 0, 80 or 81. A first cancellable holder
/// stays until it is cancelled, so a cancel is certain to cross the loops whatever the timing.
pub fn crossing_requests_never_make_two_holders_or_repeat_a_token(t: &Target) {
    let (loops, rounds) = (load(4, 8), load(6, 12));
    let inside = t.scratch_file("inside");
    std::fs::create_dir_all(&inside).unwrap();
    let (tokens, codes) = (t.scratch_file("tokens"), t.scratch_file("codes"));
    // Each holder counts who is inside with it, notes its token, and stays a little; a cancelled
    // one leaves on SIGTERM.
    let section = format!(
        "trap 'rm -f {inside}/$$; exit 3' TERM; touch {inside}/$$; ls {inside} | wc -l >> \
         {inside}.peaks; echo $DLOCK_TOKEN >> {tokens}; sleep 0.2; rm -f {inside}/$$"
    );
    let kinds: [&[&str]; 3] = [
        &["--cancel-in-progress"],
        &["--cancel-in-progress", "--supersede"],
        &[],
    ];
    // Stays (at most a minute) until a newer --cancel-in-progress run cancels it.
    let ready = t.scratch_file("first.ready");
    let first_section = format!(
        "trap 'rm -f {inside}/$$; exit 3' TERM; touch {inside}/$$; ls {inside} | wc -l >> \
         {inside}.peaks; echo $DLOCK_TOKEN >> {tokens}; touch {ready}; i=0; \
         while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; rm -f {inside}/$$"
    );
    let first = Watched::start(t.dlock(&[
        "run",
        "--cancel-in-progress",
        "crossing",
        "--",
        "sh",
        "-c",
        &first_section,
    ]));
    wait_for_file(Path::new(&ready), T);
    let mut children: Vec<std::process::Child> = (0..loops)
        .map(|i| {
            let mut args = vec!["-q", "run"];
            args.extend_from_slice(kinds[i % kinds.len()]);
            args.extend_from_slice(&["crossing", "--", "sh", "-c", &section]);
            let run = t.shell_words(&args);
            program("sh")
                .arg("-c")
                .arg(format!(
                    "for i in $(seq {rounds}); do {run}; echo $? >> {codes}; done"
                ))
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        assert!(wait_exit(child, T).success());
    }
    let (code, said) = first.finish(T);
    assert_eq!(code, 81, "the first holder was not cancelled: {said}");
    let peaks = std::fs::read_to_string(format!("{inside}.peaks")).unwrap();
    let peak = peaks
        .lines()
        .filter_map(|l| l.trim().parse::<usize>().ok())
        .max();
    assert_eq!(peak, Some(1), "two holders at once: {peaks}");
    let tokens = std::fs::read_to_string(&tokens).unwrap();
    let mut seen: Vec<&str> = tokens.lines().collect();
    let count = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), count, "a token given twice: {tokens}");
    let codes = std::fs::read_to_string(&codes).unwrap();
    assert_eq!(codes.lines().count(), loops * rounds, "{codes}");
    assert!(
        codes.lines().all(|c| ["0", "80", "81"].contains(&c)),
        "{codes}"
    );
}

/// How soon a holder hears a request: the time from the asker's request (its `-v` line "asked
/// ... to end") to the SIGTERM its command gets, printed (`--nocapture`) for the README, five
/// times; bounded by a second here, generously for a loaded machine. Where the store tells of
/// changes, the holder's `-v` says it was told, in one round at least (a periodic read may find a
/// request before the word of it arrives, but not five times in five).
pub fn a_request_to_cancel_reaches_the_holder_soon(t: &Target) {
    let mut delays = Vec::new();
    let mut told = 0;
    for round in 0..5 {
        let termed = t.scratch_file(&format!("delay{round}.term"));
        let ready = t.scratch_file(&format!("delay{round}.ready"));
        let script = format!(
            "trap 'date +%s%N > {termed}; exit 3' TERM; touch {ready}; i=0; \
             while [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done"
        );
        let holder = Watched::start(t.dlock(&[
            "-v",
            "run",
            "--cancel-in-progress",
            "delay",
            "--",
            "sh",
            "-c",
            &script,
        ]));
        wait_for_file(Path::new(&ready), T);
        let asker = asking(t, &["run", "--cancel-in-progress", "delay", "--", "true"]);
        let (code, said) = holder.finish(T);
        assert_eq!(code, 81, "{said}");
        if said.contains("the store told of a change to the group records") {
            told += 1;
        } else {
            assert!(
                said.contains("a read of the group records found a request"),
                "{said}"
            );
        }
        let (code, said) = asker.finish(T);
        assert_eq!(code, 0, "{said}");
        let asked = said
            .lines()
            .find(|l| l.contains("to end (--cancel-in-progress)"))
            .and_then(|l| l.strip_prefix('[')?.split(']').next())
            .and_then(|stamp| humantime::parse_rfc3339(stamp).ok())
            .unwrap_or_else(|| panic!("no timestamped request in {said}"));
        let term: u64 = std::fs::read_to_string(&termed)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let term = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(term);
        // The stamp is to the millisecond: a delay under it reads as none.
        let delay = term.duration_since(asked).unwrap_or_default();
        delays.push(figures::ms(delay));
    }
    let median = figures::middle(delays.clone());
    println!(
        "cancel delay on {}: median {median:.0} ms of {delays:.0?}, told {told} times of 5",
        t.backend()
    );
    assert!(median < 1000.0, "{delays:?}");
    if t.tells_of_changes() {
        assert!(told > 0, "the store never told the holder: {delays:?}");
    } else {
        assert_eq!(told, 0, "a store that tells nothing told: {delays:?}");
    }
}
