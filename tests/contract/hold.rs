//! `dlock hold NAME` in a shell script: the lock is held from `hold` until the script's shell
//! ends (also by SIGKILL) or it runs `dlock release NAME`; others are kept out meanwhile; the
//! variables it prints for `eval` carry the lock's token; a lost lock sends the shell SIGTERM and
//! makes its `dlock release` exit 79.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::T;
use crate::support::target::Target;
use crate::support::*;

/// How soon after the script's shell ends its lock must be free: its keeper, woken by the shell's
/// pidfd, releases at once, which takes one round trip (tens of milliseconds on a loaded machine
/// with a JVM's server; a lease would take seconds); ten times that.
const RELEASED_WITHIN: Duration = Duration::from_secs(1);

/// A shell script that takes `hold ARGS` first thing (`v=$(dlock hold --print-env ...) || exit $?;
/// eval "$v"`), records its
/// pid and token in `in`, runs `then`, and waits (a minute at most) for the test's `go` file.
struct Script {
    sh: Child,
    dir: PathBuf,
}

impl Script {
    fn start(t: &Target, tag: &str, hold: &[&str], then: &str) -> Script {
        let dir = t.scratch.file(tag);
        std::fs::create_dir_all(&dir).expect("script's directory");
        let mut words = vec!["hold", "--print-env"];
        words.extend_from_slice(hold);
        let script = format!(
            "cd '{dir}' || exit 99\n\
             v=$({hold}) || exit $?; eval \"$v\"\n\
             echo \"$$ $DLOCK_TOKEN\" > in.tmp; mv in.tmp in\n\
             {then}\n\
             i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
            dir = dir.display(),
            hold = t.shell_words(&words),
        );
        let sh = program("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("err")).expect("script's stderr"))
            .spawn()
            .expect("start sh");
        let script = Script { sh, dir };
        script.wait_for("in");
        script
    }

    fn wait_for(&self, file: &str) {
        wait_for_file(&self.dir.join(file), T);
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    fn token(&self) -> u64 {
        let text = self.read("in");
        text.split_whitespace()
            .nth(1)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no token in {text:?}; stderr: {}", self.read("err")))
    }

    fn go(&self) {
        std::fs::write(self.dir.join("go"), "").expect("write go");
    }

    /// Waits for the shell to end; returns when the test saw it end.
    fn ended(&mut self) -> Instant {
        wait_exit(&mut self.sh, T);
        Instant::now()
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("go"), "");
        if let Ok(None) = self.sh.try_wait() {
            let _ = self.sh.kill();
            let _ = self.sh.wait();
        }
        // Its keeper releases the hold once it sees the shell gone, writing into the lock
        // directory, which the test removes after this.
        let _ = wait_for_keepers_of(self.sh.id(), T);
    }
}

fn busy(t: &Target, name: &str) -> i32 {
    code(&output(t.dlock(&["run", "-n", name, "--", "true"])))
}

/// Within `RELEASED_WITHIN` of the shell's end, the lock is free for another `run -n`.
fn free_soon_after(t: &Target, name: &str, ended: Instant) {
    let mut out = output(t.dlock(&["run", "-n", name, "--", "true"]));
    while code(&out) != 0 && ended.elapsed() < RELEASED_WITHIN {
        out = output(t.dlock(&["run", "-n", name, "--", "true"]));
    }
    assert_eq!(
        code(&out),
        0,
        "{name} still held {RELEASED_WITHIN:?} after the script ended: {}",
        stderr(&out)
    );
}

pub fn a_held_lock_keeps_others_out_until_the_script_ends_and_carries_its_token(t: &Target) {
    let mut script = Script::start(t, "hold-a", &["-n", "hold/a"], "");
    assert_eq!(busy(t, "hold/a"), 75, "held while the script runs");
    let out = output(t.dlock(&["status", "--json", "hold/a"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(
        json["holders"][0]["token"],
        script.token(),
        "the printed DLOCK_TOKEN is the lock's: {json}"
    );
    assert_eq!(busy(t, "hold/a"), 75, "still held");
    script.go();
    let ended = script.ended();
    free_soon_after(t, "hold/a", ended);
}

pub fn sigkill_of_the_script_frees_its_hold(t: &Target) {
    let mut script = Script::start(t, "hold-k", &["hold/k"], "");
    assert_eq!(busy(t, "hold/k"), 75);
    signal(script.sh.id(), libc::SIGKILL);
    let ended = script.ended();
    free_soon_after(t, "hold/k", ended);
}

pub fn release_gives_the_hold_up_early_and_a_second_release_exits_1(t: &Target) {
    let release = t.shell_words(&["release", "hold/r"]);
    let script = Script::start(
        t,
        "hold-r",
        &["hold/r"],
        &format!(
            "while [ ! -e go1 ]; do sleep 0.05; done\n\
             {release}; echo $? > rel1.tmp; mv rel1.tmp rel1\n\
             {release} 2> rel2.err; echo $? > rel2.tmp; mv rel2.tmp rel2"
        ),
    );
    assert_eq!(busy(t, "hold/r"), 75);
    std::fs::write(script.dir.join("go1"), "").expect("go1");
    script.wait_for("rel2");
    assert_eq!(script.read("rel1").trim(), "0", "{}", script.read("err"));
    assert_eq!(script.read("rel2").trim(), "1");
    // The lock is free: --force would release nothing, so it is not suggested.
    let err = script.read("rel2.err");
    assert!(
        err.contains("nobody holds it") && !err.contains("--force"),
        "{err}"
    );
    assert_eq!(busy(t, "hold/r"), 0, "free while the script still runs");
}

pub fn release_without_a_hold_exits_1_and_points_to_force(t: &Target) {
    let holder = super::Holding::start(t, &["hold/n"]);
    let out = output(t.dlock(&["release", "hold/n"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("release --force hold/n"),
        "{}",
        stderr(&out)
    );
    assert_eq!(busy(t, "hold/n"), 75, "another's lock is left alone");
    holder.let_go();
}

pub fn a_lost_hold_sends_the_shell_sigterm_and_release_then_exits_79(t: &Target) {
    let release = t.shell_words(&["release", "hold/l"]);
    let script = Script::start(
        t,
        "hold-l",
        &["--ttl", "1s", "hold/l"],
        &format!("trap '{release}; echo $? > rel.tmp; mv rel.tmp rel; exit 0' TERM"),
    );
    let out = output(t.dlock(&["release", "--force", "hold/l"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    script.wait_for("rel");
    assert_eq!(script.read("rel").trim(), "79", "{}", script.read("err"));
}

pub fn a_hold_keeps_its_message_for_status(t: &Target) {
    let _script = Script::start(
        t,
        "hold-m",
        &["--message", "migrate v2 by ci", "hold/m"],
        "",
    );
    let out = output(t.dlock(&["status", "--json", "hold/m"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(
        json["holders"][0]["message"], "migrate v2 by ci",
        "hold --message is kept with the holder record: {json}"
    );
}

/// `status` of a hold names the script's shell, the process a user knows, in text and in `--json`
/// (not the keeper, a detached dlock the script never sees).
pub fn status_names_the_scripts_shell_not_the_keeper(t: &Target) {
    let script = Script::start(t, "hold-p", &["hold/p"], "");
    let text = script.read("in");
    let shell: u32 = text
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no shell pid in {text:?}"));
    let out = output(t.dlock(&["status", "--json", "hold/p"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(
        json["holders"][0]["pid"], shell,
        "the holder is the script's shell: {json}"
    );
    let out = output(t.dlock(&["status", "hold/p"]));
    assert!(
        names_pid(&stdout(&out), shell),
        "status names the shell, pid {shell}: {}",
        stdout(&out)
    );
}

/// A `dlock run` of the held lock inside the script runs its command under the script's hold
/// (no wait for itself), in any mode the hold covers; one the hold can never grant is refused (64).
pub fn a_run_inside_the_script_runs_under_its_hold(t: &Target) {
    let nested = t.shell_words(&["run", "-w", "20s", "hold/in", "--", "sh", "-c", "echo ran"]);
    let nested_shared = t.shell_words(&["run", "-n", "-s", "hold/in", "--", "true"]);
    let script = Script::start(
        t,
        "hold-in",
        &["hold/in"],
        &format!(
            "{nested} > out 2> out.err; echo $? > rc.tmp; mv rc.tmp rc\n\
             {nested_shared}; echo $? > rc2.tmp; mv rc2.tmp rc2"
        ),
    );
    script.wait_for("rc2");
    assert_eq!(
        (script.read("rc").trim(), script.read("out").trim()),
        ("0", "ran"),
        "the nested run ran under the hold: {}",
        script.read("out.err")
    );
    assert_eq!(script.read("rc2").trim(), "0", "shared inside exclusive");
    assert_eq!(
        busy(t, "hold/in"),
        75,
        "the hold is kept after the nested runs"
    );

    // A shared hold cannot grant an exclusive run: it would wait for itself.
    let nested_exclusive = t.shell_words(&["run", "-w", "20s", "hold/ins", "--", "true"]);
    let shared = Script::start(
        t,
        "hold-ins",
        &["-s", "hold/ins"],
        &format!("{nested_exclusive} 2> out.err; echo $? > rc.tmp; mv rc.tmp rc"),
    );
    shared.wait_for("rc");
    assert_eq!(shared.read("rc").trim(), "64", "{}", shared.read("out.err"));

    // Another script's hold is not this one's: a run outside it waits and gives up.
    let out = output(t.dlock(&["run", "-w", "0.3", "hold/in", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
}
