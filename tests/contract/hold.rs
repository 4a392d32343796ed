//! `dlock hold NAME` in a shell script: the lock is held from `hold` until the script's shell
//! ends (also by SIGKILL) or it runs `dlock release NAME`; others are kept out meanwhile; the
//! variables it prints for `eval` carry the lock's token; a lost lock sends the shell SIGTERM and
//! makes its `dlock release` exit 79.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::T;
use crate::support::target::Target;
use crate::support::*;

/// How soon after the script's shell ends its lock must be free.
const RELEASED_WITHIN: Duration = Duration::from_millis(100);

/// A shell script that takes `hold ARGS` first thing (`eval "$(dlock hold ...)"`), records its
/// pid and token in `in`, runs `then`, and waits (a minute at most) for the test's `go` file.
struct Script {
    sh: Child,
    dir: PathBuf,
}

impl Script {
    fn start(t: &Target, tag: &str, hold: &[&str], then: &str) -> Script {
        let dir = t.scratch.file(tag);
        std::fs::create_dir_all(&dir).expect("script's directory");
        let mut words = vec!["hold"];
        words.extend_from_slice(hold);
        let script = format!(
            "cd '{dir}' || exit 99\n\
             eval \"$({hold})\" || exit $?\n\
             echo \"$$ $DLOCK_TOKEN\" > in.tmp; mv in.tmp in\n\
             {then}\n\
             i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
            dir = dir.display(),
            hold = t.shell_words(&words),
        );
        let sh = Command::new("sh")
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
    }
}

fn busy(t: &Target, name: &str) -> i32 {
    code(&output(t.dlock(&["run", "-n", name, "--", "true"])))
}

/// `RELEASED_WITHIN` after the shell's end, the lock is free for another `run -n`.
fn free_soon_after(t: &Target, name: &str, ended: Instant) {
    std::thread::sleep((ended + RELEASED_WITHIN).saturating_duration_since(Instant::now()));
    let out = output(t.dlock(&["run", "-n", name, "--", "true"]));
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
             {release}; echo $? > rel1\n\
             {release} 2> rel2.err; echo $? > rel2"
        ),
    );
    assert_eq!(busy(t, "hold/r"), 75);
    std::fs::write(script.dir.join("go1"), "").expect("go1");
    script.wait_for("rel2");
    assert_eq!(script.read("rel1").trim(), "0", "{}", script.read("err"));
    assert_eq!(script.read("rel2").trim(), "1");
    assert!(
        script.read("rel2.err").contains("--force"),
        "{}",
        script.read("rel2.err")
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
        &format!("trap '{release}; echo $? > rel; exit 0' TERM"),
    );
    let out = output(t.dlock(&["release", "--force", "hold/l"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    script.wait_for("rel");
    assert_eq!(script.read("rel").trim(), "79", "{}", script.read("err"));
}
