//! `dlock hold` fails closed: the documented forms (`dlock hold NAME || exit 1` and
//! `v=$(dlock hold --print-env NAME) || exit 1; eval "$v"`) never let a script's protected part run
//! without the lock, in bash, dash, busybox sh and zsh, with and without `set -e`; a keeper that is
//! killed tells the shell (SIGTERM) and its `dlock release` exits 79; a parent that is not a shell
//! is refused; holds are known by place and name; a second hold from one shell is refused at once.
//! The ssh-agent habit, `eval "$(dlock hold --print-env NAME)" || exit 1`, ends the script with
//! dlock's status, since a failed `--print-env` prints `exit N`.
//! On the file backend and on Redis (the suite's server).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::target::Target;
use crate::support::*;

/// How long any one step may take on a loaded machine before the test fails.
const T: Duration = Duration::from_secs(120);

/// The shells the documented forms are checked in, as commands that take `-c SCRIPT`.
const SHELLS: [&[&str]; 4] = [&["bash"], &["dash"], &["busybox", "sh"], &["zsh"]];

/// What a script does before the hold: nothing, or `set -e` (with an EXIT trap, as scripts have).
const PRELUDES: [&str; 2] = ["", "set -e; trap 'true' EXIT"];

/// A shell script in a directory of its own; its standard error goes to `err` there.
struct Script {
    sh: Child,
    dir: PathBuf,
}

impl Script {
    fn start(dir: &Path, shell: &[&str], body: &str) -> Script {
        std::fs::create_dir_all(dir).expect("script's directory");
        let script = format!("cd '{}' || exit 99\n{body}", dir.display());
        let sh = without_callers_dlock_settings(shell[0])
            .args(&shell[1..])
            .arg("-c")
            .arg(&script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("err")).expect("script's stderr"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {shell:?}: {e}"));
        Script {
            sh,
            dir: dir.to_owned(),
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path(file)).unwrap_or_default()
    }

    fn go(&self, file: &str) {
        std::fs::write(self.path(file), "").expect("write a go file");
    }

    fn exit_code(&mut self) -> i32 {
        wait_exit(&mut self.sh, T).code().unwrap_or(-1)
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.sh.try_wait() {
            let _ = self.sh.kill();
            let _ = self.sh.wait();
        }
        // Its keeper releases the hold once it sees the shell gone, writing into the lock
        // directory, which the test removes after this.
        let _ = wait_for_keepers_of(self.sh.id(), T);
    }
}

/// Waits (bounded by the script's own count) for `file` in the script's directory.
fn wait_line(file: &str) -> String {
    format!("i=0; while [ ! -e {file} ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done")
}

fn busy(t: &Target, name: &str) -> i32 {
    code(&output(t.dlock(&["run", "-n", name, "--", "true"])))
}

fn free_within(t: &Target, name: &str) {
    wait_until(&format!("{name} to be free"), T, || busy(t, name) == 0);
}

/// The live processes of `dlock ARGS hold ... NAME` on this target (front, keeper, the keeper's
/// guardian), each with its parent.
fn hold_processes(t: &Target, name: &str) -> Vec<(u32, u32)> {
    let mut found = Vec::new();
    let Ok(listing) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in listing.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let ours = args.first().is_some_and(|a| a == dlock_bin())
            && args.iter().any(|a| a == "hold")
            && args.iter().any(|a| a == name)
            && t.args.iter().all(|a| args.contains(a));
        if !ours || !alive(pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let parent = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        found.push((pid, parent));
    }
    found
}

/// The hold processes whose parent is none of them: the front while it lives, else the keeper.
fn first_of(processes: &[(u32, u32)]) -> Vec<u32> {
    processes
        .iter()
        .filter(|(_, parent)| !processes.iter().any(|(pid, _)| pid == parent))
        .map(|(pid, _)| *pid)
        .collect()
}

/// The two documented forms for `hold ARGS`, each ending with `|| exit 1`.
/// The variables' form also with a redirection inside the substitution, with which bash runs it in
/// a subshell of its own instead of running dlock directly.
fn forms(t: &Target, args: &[&str]) -> [String; 3] {
    let mut plain = vec!["hold"];
    plain.extend_from_slice(args);
    let mut with_env = vec!["hold", "--print-env"];
    with_env.extend_from_slice(args);
    [
        format!("{} || exit 1", t.shell_words(&plain)),
        format!("v=$({}) || exit 1; eval \"$v\"", t.shell_words(&with_env)),
        format!(
            "v=$({} 2>>hold.err) || exit 1; eval \"$v\"",
            t.shell_words(&with_env)
        ),
    ]
}

/// In every shell, with and without `set -e`, each documented form: with the lock busy (`-n`),
/// with a `--wait` that expires, and with `dlock hold` SIGKILLed while it waits, the protected part
/// never runs and the script exits 1; with the lock free it runs, under the lock, which is held
/// for the script's shell (not for a subshell) until it ends.
fn the_documented_forms_fail_closed(t: &Target) {
    let mut holder = crate::contract::Holding::start(t, &["hc/busy"]);
    let protected = "echo \"ran $DLOCK_TOKEN\" > ran.tmp; mv ran.tmp ran";
    let mut case = 0;
    for shell in SHELLS {
        for prelude in PRELUDES {
            let cases: [(&str, Vec<&str>); 3] = [
                ("busy with -n", vec!["-n", "hc/busy"]),
                ("--wait expired", vec!["-w", "0.2s", "hc/busy"]),
                ("SIGKILLed while waiting", vec!["-w", "10m", "hc/busy"]),
            ];
            for (what, args) in cases {
                for form in forms(t, &args) {
                    case += 1;
                    let dir = t.scratch.file(&format!("fc{case}"));
                    let mut script =
                        Script::start(&dir, shell, &format!("{prelude}\n{form}\n{protected}"));
                    if what.starts_with("SIGKILL") {
                        let mut front = Vec::new();
                        // The front waits once it has started its keeper (its child).
                        wait_until(&format!("dlock hold waiting in {form}"), T, || {
                            let processes = hold_processes(t, "hc/busy");
                            front = first_of(&processes);
                            front.len() == 1
                                && processes.iter().any(|(_, parent)| *parent == front[0])
                        });
                        signal(front[0], libc::SIGKILL);
                    }
                    let code = script.exit_code();
                    assert!(holder.is_running(), "the holder of hc/busy ended early");
                    assert!(
                        !script.path("ran").exists(),
                        "{shell:?} `{prelude}` `{form}` ({what}): the protected part ran"
                    );
                    assert_eq!(
                        code,
                        1,
                        "{shell:?} `{prelude}` `{form}` ({what}): {}",
                        script.read("err")
                    );
                    wait_until("no dlock hold left behind", T, || {
                        hold_processes(t, "hc/busy").is_empty()
                    });
                }
            }
            for (n, form) in forms(t, &["-n", "hc/free"]).into_iter().enumerate() {
                case += 1;
                let dir = t.scratch.file(&format!("fc{case}"));
                let mut script = Script::start(
                    &dir,
                    shell,
                    &format!("{prelude}\n{form}\n{protected}\n{}", wait_line("go")),
                );
                wait_until(&format!("{shell:?} `{prelude}` `{form}` to run"), T, || {
                    script.path("ran").exists() || matches!(script.sh.try_wait(), Ok(Some(_)))
                });
                let ran = script.read("ran");
                assert!(
                    ran.starts_with("ran"),
                    "{shell:?} `{prelude}` `{form}`: the protected part did not run: {}",
                    script.read("err")
                );
                if n > 0 {
                    assert!(
                        ran.trim().len() > "ran ".len(),
                        "--print-env gave DLOCK_TOKEN: {ran:?}"
                    );
                }
                assert_eq!(
                    busy(t, "hc/free"),
                    75,
                    "{shell:?} `{prelude}` `{form}`: the lock is held while the script runs"
                );
                script.go("go");
                assert_eq!(script.exit_code(), 0, "{}", script.read("err"));
                free_within(t, "hc/free");
            }
        }
    }
    holder.let_go();
}

/// The ssh-agent habit, `eval "$(dlock hold --print-env ARGS)" || exit 1` (not a documented form):
/// a failed `hold --print-env` prints `exit N`, so the script ends there with dlock's status (75
/// busy or `--wait` expired, 69 the store unreachable) and its protected part never runs; in every
/// shell, with and without `set -e`. Without `--print-env` a failure still prints nothing.
fn the_eval_habit_ends_the_script_with_dlock_s_status(t: &Target) {
    let mut holder = crate::contract::Holding::start(t, &["hc/eval"]);
    let (_refusing, port) = refusing_port();
    let down = format!(
        "'{}' --url 'redis://127.0.0.1:{port}' hold --print-env -n hc/down",
        dlock_bin()
    );
    let cases = [
        (
            "busy with -n",
            t.shell_words(&["hold", "--print-env", "-n", "hc/eval"]),
            75,
        ),
        (
            "--wait expired",
            t.shell_words(&["hold", "--print-env", "-w", "0.2s", "hc/eval"]),
            75,
        ),
        ("the store down", down, 69),
    ];
    let protected = "echo ran > ran";
    let mut case = 0;
    for shell in SHELLS {
        for prelude in PRELUDES {
            for (what, hold, status) in &cases {
                case += 1;
                let dir = t.scratch.file(&format!("eval{case}"));
                let form = format!("eval \"$({hold})\" || exit 1");
                let mut script =
                    Script::start(&dir, shell, &format!("{prelude}\n{form}\n{protected}"));
                let code = script.exit_code();
                assert!(
                    !script.path("ran").exists(),
                    "{shell:?} `{prelude}` `{form}` ({what}): the protected part ran"
                );
                assert_eq!(
                    code,
                    *status,
                    "{shell:?} `{prelude}` `{form}` ({what}): {}",
                    script.read("err")
                );
            }
        }
    }
    // What the substitution holds, and nothing at all without --print-env (`-q`: nothing to mail).
    for (hold, said) in [
        (
            t.shell_words(&["hold", "--print-env", "-n", "hc/eval"]),
            "[exit 75]\n",
        ),
        (t.shell_words(&["-q", "hold", "-n", "hc/eval"]), "[]\n"),
    ] {
        let out = output({
            let mut sh = without_callers_dlock_settings("sh");
            sh.arg("-c")
                .arg(format!("v=$({hold}); echo \"[$v]\""))
                .stdin(Stdio::null());
            sh
        });
        assert_eq!(stdout(&out), said, "{hold}: {}", stderr(&out));
    }
    assert!(holder.is_running(), "the holder of hc/eval ended early");
    holder.let_go();
}

/// The keeper killed by SIGTERM or SIGKILL, alone or with its process group: the shell gets
/// SIGTERM, and its `dlock release` then exits 79 (the hold ended without a release), not 1.
fn a_killed_keeper_sends_the_shell_sigterm_and_release_exits_79(t: &Target) {
    // SIGTERM and SIGKILL to the keeper, and SIGKILL to its process group (its session's).
    for (n, (sig, group)) in [
        (libc::SIGTERM, false),
        (libc::SIGKILL, false),
        (libc::SIGKILL, true),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("hc/keeper{n}");
        let dir = t.scratch.file(&format!("keeper{n}"));
        let release = t.shell_words(&["release", &name]);
        let mut script = Script::start(
            &dir,
            &["sh"],
            &format!(
                "trap '{release} 2> rel.err; echo $? > rel.tmp; mv rel.tmp rel; exit 0' TERM\n\
                 {hold} || exit 1\n\
                 touch in\n\
                 {wait}\n\
                 exit 3",
                hold = t.shell_words(&["hold", "-n", &name]),
                wait = wait_line("go"),
            ),
        );
        wait_for_file(&script.path("in"), T);
        let mut keeper = Vec::new();
        wait_until("the keeper alone", T, || {
            keeper = first_of(&hold_processes(t, &name));
            keeper.len() == 1
        });
        if group {
            // The group is the keeper's, which this test started (through the script), and it
            // leads it (its own session).
            assert!(signal_group(keeper[0], sig), "kill the keeper's group");
        } else {
            signal(keeper[0], sig);
        }
        wait_for_file(&script.path("rel"), T);
        assert_eq!(
            script.read("rel").trim(),
            "79",
            "signal {sig} (to the group: {group}): {} {}",
            script.read("rel.err"),
            script.read("err")
        );
        assert_eq!(script.exit_code(), 0, "the shell's TERM trap ran");
        script.go("go");
    }
}

/// `timeout`, `sudo` and `xargs` run dlock and are not the script: refused with 64 and a line
/// saying why, the lock left free. `env` and `nice` replace themselves with dlock: the hold is the
/// shell's and works, printing nothing. `--owner $$` makes `timeout` work; an owner that is not an
/// ancestor of dlock is refused.
fn a_parent_that_is_not_a_shell_is_refused(t: &Target) {
    let hold = t.shell_words(&["hold", "-n", "hc/parent"]);
    // xargs reports any status of 1 to 125 as 123.
    for (n, (runner, status)) in [
        ("timeout 60", "64"),
        ("sudo -n", "64"),
        ("echo hc/parent | xargs", "123"),
    ]
    .into_iter()
    .enumerate()
    {
        let hold = if runner.contains("xargs") {
            t.shell_words(&["hold", "-n"])
        } else {
            hold.clone()
        };
        let dir = t.scratch.file(&format!("parent{n}"));
        let mut script = Script::start(
            &dir,
            &["sh"],
            &format!("{runner} {hold}; echo $? > rc; exit 0"),
        );
        assert_eq!(script.exit_code(), 0);
        assert_eq!(
            script.read("rc").trim(),
            status,
            "{runner}: {}",
            script.read("err")
        );
        assert!(
            script.read("err").contains("is not a shell"),
            "{runner}: {}",
            script.read("err")
        );
        assert_eq!(busy(t, "hc/parent"), 0, "{runner}: nothing is held");
    }
    for (n, runner) in ["env", "nice -n 1"].into_iter().enumerate() {
        let dir = t.scratch.file(&format!("exec{n}"));
        let mut script = Script::start(
            &dir,
            &["sh"],
            &format!(
                "{runner} {hold} > out || exit 1\ntouch in\n{}",
                wait_line("go")
            ),
        );
        wait_for_file(&script.path("in"), T);
        assert_eq!(busy(t, "hc/parent"), 75, "{runner}: held for the shell");
        assert_eq!(script.read("out"), "", "{runner}: nothing on stdout");
        script.go("go");
        assert_eq!(script.exit_code(), 0, "{}", script.read("err"));
        free_within(t, "hc/parent");
    }
    // --owner names the shell past a parent that is not one; a process that is not an ancestor
    // of dlock cannot be the owner.
    let with_owner = t.shell_words(&["hold", "-n", "--owner", "OWNER", "hc/parent"]);
    let dir = t.scratch.file("owner");
    let mut script = Script::start(
        &dir,
        &["sh"],
        &format!(
            "sleep 60 & other=$!\n\
             {not_ancestor} 2> not.err; echo $? > not\n\
             kill $other\n\
             timeout 60 {ours} || exit 1\ntouch in\n{wait}",
            not_ancestor = with_owner.replace("'OWNER'", "\"$other\""),
            ours = with_owner.replace("'OWNER'", "$$"),
            wait = wait_line("go"),
        ),
    );
    wait_for_file(&script.path("in"), T);
    assert_eq!(
        script.read("not").trim(),
        "64",
        "{}",
        script.read("not.err")
    );
    assert!(
        script.read("not.err").contains("--owner"),
        "{}",
        script.read("not.err")
    );
    assert_eq!(
        busy(t, "hc/parent"),
        75,
        "timeout ... --owner $$: held for the shell"
    );
    script.go("go");
    assert_eq!(script.exit_code(), 0, "{}", script.read("err"));
    free_within(t, "hc/parent");
}

/// Two `dlock hold`s of one lock from one shell at once: the second is refused (64) at once, while
/// the first still waits for the lock, not after.
fn a_second_hold_from_the_same_shell_is_refused_at_once(t: &Target) {
    let holder = crate::contract::Holding::start(t, &["hc/twice"]);
    let hold = t.shell_words(&["hold", "hc/twice"]);
    let dir = t.scratch.file("twice");
    let mut script = Script::start(
        &dir,
        &["sh"],
        &format!(
            "{hold} 2> first.err & \n\
             {wait}\n\
             {hold}; echo $? > rc.tmp; mv rc.tmp rc\n\
             wait $!; echo $? > first.tmp; mv first.tmp first",
            wait = wait_line("go"),
        ),
    );
    // Its keeper started and locked its claim: until then a second hold could take the claim
    // first, and the first be the one refused.
    wait_until("the first hold waiting", T, || {
        let processes = hold_processes(t, "hc/twice");
        let front = first_of(&processes);
        front.len() == 1
            && processes.iter().any(|(_, parent)| *parent == front[0])
            && processes
                .iter()
                .find(|(pid, _)| *pid == front[0])
                .is_some_and(|(_, shell)| claim_locked(*shell))
    });
    let asked = Instant::now();
    script.go("go");
    wait_for_file(&script.path("rc"), T);
    let took = asked.elapsed();
    assert_eq!(script.read("rc").trim(), "64", "{}", script.read("err"));
    assert!(
        took < Duration::from_secs(10),
        "the second hold was refused only after {took:?}"
    );
    assert!(
        script.read("err").contains("already holds"),
        "{}",
        script.read("err")
    );
    holder.let_go();
    wait_for_file(&script.path("first"), T);
    assert_eq!(
        script.read("first").trim(),
        "0",
        "the first hold got the lock: {}",
        script.read("first.err")
    );
    assert_eq!(script.exit_code(), 0);
}

mod file {
    use crate::support::target::Target;

    #[test]
    fn the_documented_forms_fail_closed() {
        super::the_documented_forms_fail_closed(&Target::file_backend());
    }

    #[test]
    fn the_eval_habit_ends_the_script_with_dlock_s_status() {
        super::the_eval_habit_ends_the_script_with_dlock_s_status(&Target::file_backend());
    }

    #[test]
    fn a_killed_keeper_sends_the_shell_sigterm_and_release_exits_79() {
        super::a_killed_keeper_sends_the_shell_sigterm_and_release_exits_79(&Target::file_backend());
    }

    #[test]
    fn a_parent_that_is_not_a_shell_is_refused() {
        super::a_parent_that_is_not_a_shell_is_refused(&Target::file_backend());
    }

    #[test]
    fn a_second_hold_from_the_same_shell_is_refused_at_once() {
        super::a_second_hold_from_the_same_shell_is_refused_at_once(&Target::file_backend());
    }
}

mod redis {
    use crate::support::target::Target;

    #[test]
    fn the_documented_forms_fail_closed() {
        super::the_documented_forms_fail_closed(&Target::suite_redis());
    }

    #[test]
    fn a_killed_keeper_sends_the_shell_sigterm_and_release_exits_79() {
        super::a_killed_keeper_sends_the_shell_sigterm_and_release_exits_79(&Target::suite_redis());
    }

    #[test]
    fn a_parent_that_is_not_a_shell_is_refused() {
        super::a_parent_that_is_not_a_shell_is_refused(&Target::suite_redis());
    }

    #[test]
    fn a_second_hold_from_the_same_shell_is_refused_at_once() {
        super::a_second_hold_from_the_same_shell_is_refused_at_once(&Target::suite_redis());
    }
}

/// One name held at two places (two lock directories) from one shell: both holds succeed, and
/// `--url` picks which one `release` ends.
#[test]
fn holds_of_one_name_at_two_places_are_apart() {
    let (a, b) = (LockDir::new(), LockDir::new());
    let at = |dir: &LockDir, args: &[&str]| {
        let mut words = vec![
            dlock_bin().to_owned(),
            "--url".to_owned(),
            dir.path().display().to_string(),
        ];
        words.extend(args.iter().map(|a| a.to_string()));
        words
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let busy_at = |dir: &LockDir| {
        let mut cmd = dlock();
        cmd.arg("--url")
            .arg(dir.path())
            .args(["run", "-n", "hc/two", "--", "true"]);
        code(&output(cmd))
    };
    let work = LockDir::new();
    let mut script = Script::start(
        &work.path().join("s"),
        &["sh"],
        &format!(
            "{hold_a} || exit 1\n{hold_b} || exit 2\ntouch in\n{wait1}\n\
             {release_b}; echo $? > rel_b.tmp; mv rel_b.tmp rel_b\n{wait2}\n\
             {release_a}; echo $? > rel_a.tmp; mv rel_a.tmp rel_a",
            hold_a = at(&a, &["hold", "-n", "hc/two"]),
            hold_b = at(&b, &["hold", "-n", "hc/two"]),
            release_a = at(&a, &["release", "hc/two"]),
            release_b = at(&b, &["release", "hc/two"]),
            wait1 = wait_line("go1"),
            wait2 = wait_line("go2"),
        ),
    );
    wait_until("both holds", T, || {
        script.path("in").exists() || matches!(script.sh.try_wait(), Ok(Some(_)))
    });
    assert!(script.path("in").exists(), "{}", script.read("err"));
    assert_eq!((busy_at(&a), busy_at(&b)), (75, 75), "held at both places");
    script.go("go1");
    wait_for_file(&script.path("rel_b"), T);
    assert_eq!(script.read("rel_b").trim(), "0", "{}", script.read("err"));
    assert_eq!(
        (busy_at(&a), busy_at(&b)),
        (75, 0),
        "release --url B ended the hold at B only"
    );
    script.go("go2");
    wait_for_file(&script.path("rel_a"), T);
    assert_eq!(script.read("rel_a").trim(), "0", "{}", script.read("err"));
    assert_eq!(busy_at(&a), 0);
    assert_eq!(script.exit_code(), 0);
}

/// A `( ... )` subshell that holds a lock owns the hold itself, also when its parent (here the
/// `{ ... } | cat` subshell) has the same pipe as its output: that parent holds the pipe's write
/// end and reads nothing from it, so this is no command substitution. The lock is freed when the
/// subshell ends, while the script goes on.
#[test]
fn a_subshell_in_a_pipeline_owns_its_hold() {
    let t = Target::file_backend();
    let dir = t.scratch.file("pipeline");
    let mut script = Script::start(
        &dir,
        &["bash"],
        &format!(
            "{{ ( {hold} || exit 1; touch in; {wait1} )\ntouch out\n{wait2}\n}} | cat",
            hold = t.shell_words(&["hold", "-n", "hc/sub"]),
            wait1 = wait_line("go1"),
            wait2 = wait_line("go2"),
        ),
    );
    wait_until("the subshell's hold", T, || {
        script.path("in").exists() || matches!(script.sh.try_wait(), Ok(Some(_)))
    });
    assert!(script.path("in").exists(), "{}", script.read("err"));
    assert_eq!(busy(&t, "hc/sub"), 75, "held while the subshell runs");
    script.go("go1");
    wait_for_file(&script.path("out"), T);
    free_within(&t, "hc/sub");
    script.go("go2");
    assert_eq!(script.exit_code(), 0, "{}", script.read("err"));
}

/// Whether a keeper of `shell` has locked a claim in the directory of holds (its inode is in
/// /proc/locks), read without taking a lock that could refuse the keeper.
fn claim_locked(shell: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    let Ok(entries) = std::fs::read_dir(directory_of_holds()) else {
        return false;
    };
    let prefix = format!("{shell}.");
    entries.flatten().any(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        name.starts_with(&prefix)
            && name.ends_with(".claim")
            && entry.metadata().is_ok_and(|m| {
                let inode = format!(":{} ", m.ino());
                locks
                    .lines()
                    .any(|l| l.contains("FLOCK") && l.contains(&inode))
            })
    })
}

/// The directory of holds, as dlock finds it for this user (see the README's Security section).
fn directory_of_holds() -> PathBuf {
    Path::new(default_base()).join(format!("dlock-holds-{}", own_uid()))
}

/// What a keeper killed by SIGKILL leaves in the directory of holds (its socket, its claim) is
/// removed by the next hold once the shell it served has ended, and not while that shell runs.
#[test]
fn what_a_killed_keeper_left_is_swept_once_its_shell_has_ended() {
    let dir = directory_of_holds();
    // A shell that has ended: a pid and start time no process has now.
    let mut gone = program("true").spawn().expect("start true");
    let gone_pid = gone.id();
    gone.wait().expect("reap true");
    let stale: Vec<PathBuf> = [
        "0123456789abcdef0123456789abcdef",
        "fedcba9876543210fedcba9876543210.claim",
    ]
    .iter()
    .map(|tail| dir.join(format!("{gone_pid}.1.{tail}")))
    .collect();
    // One of a shell still running (this test process) stays.
    let me = std::fs::read_to_string("/proc/self/stat").expect("own stat");
    let start = me
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .expect("field 22")
        .to_owned();
    let living = dir.join(format!(
        "{}.{start}.00112233445566778899aabbccddeeff.claim",
        std::process::id()
    ));
    let locks = LockDir::new();
    let body = format!(
        "{} --url '{}' hold -n swept || exit 1\n: > held\n",
        dlock_bin(),
        locks.path().display()
    );
    // The directory exists once a hold was made: make one first, then plant the leftovers.
    let mut first = Script::start(&locks.path().join("first"), &["sh"], &body);
    assert_eq!(first.exit_code(), 0, "{}", first.read("err"));
    for path in stale.iter().chain([&living]) {
        std::fs::write(path, "").expect("plant a leftover");
    }
    // The running shell's claim is locked, as its keeper locks it.
    let held = std::fs::File::open(&living).expect("open the claim");
    // SAFETY: flock(2) on a file this test opened.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) },
        0
    );
    let mut second = Script::start(&locks.path().join("second"), &["sh"], &body);
    assert_eq!(second.exit_code(), 0, "{}", second.read("err"));
    for path in &stale {
        assert!(!path.exists(), "{} was left", path.display());
    }
    assert!(living.exists(), "the entry of a running shell was removed");
    let _ = std::fs::remove_file(&living);
}

/// Ends, by pid, every keeper holding for process `owner` (a test whose hold should have been
/// refused must not leave one behind); how many there were.
fn end_keepers_of(owner: u32) -> usize {
    let needle = format!("DLOCK_KEEPER_OF={owner}.");
    let keepers: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|var| var.starts_with(needle.as_bytes()))
            })
        })
        .collect();
    for pid in &keepers {
        // SAFETY: kill(2) on a pid read just above.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    keepers.len()
}

/// `--owner 1` (init) would hold until the machine stops, and a process of another user is none
/// a keeper of this user may answer to: both refused (64), nothing held.
#[test]
fn owner_1_and_another_users_process_are_refused() {
    let locks = LockDir::new();
    let out = output(locks.dlock(&["hold", "-n", "--owner", "1", "init"]));
    let kept = end_keepers_of(1);
    assert_eq!((code(&out), kept), (64, 0), "{}", stderr(&out));
    assert!(stderr(&out).contains("--owner 1"), "{}", stderr(&out));
    if own_uid() != 0 {
        // Another user's process needs root to start; CI runs as root.
        assert!(std::env::var_os("CI").is_none(), "needs root, as CI runs");
        return;
    }
    // dlock as nobody, under this (root's) test process.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(locks.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let me = std::process::id();
    let mut cmd = locks.dlock(&["hold", "-n", "--owner", &me.to_string(), "theirs"]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = output(cmd);
    let kept = end_keepers_of(me);
    assert_eq!((code(&out), kept), (64, 0), "{}", stderr(&out));
    assert!(stderr(&out).contains("another user"), "{}", stderr(&out));
}

/// `--print-env` quotes so that bash, dash, zsh, busybox sh and fish all read each value back as
/// it is, and run nothing from it: names with `;`, quotes, backslashes and `$(...)`.
#[test]
fn print_env_is_read_back_unchanged_by_every_shell_and_runs_nothing() {
    let names = [
        "a;touch x;echo ",
        r"b\'",
        r"\';touch x;echo \'",
        r"c\\'$(touch x)'\",
        "d'\"`touch x`\"",
    ];
    let shells: [(&str, &[&str], &str); 5] = [
        (
            "bash",
            &["-c"],
            "eval \"$(DLOCK hold -n --print-env NAME)\" || exit 1",
        ),
        (
            "dash",
            &["-c"],
            "eval \"$(DLOCK hold -n --print-env NAME)\" || exit 1",
        ),
        (
            "zsh",
            &["-c"],
            "eval \"$(DLOCK hold -n --print-env NAME)\" || exit 1",
        ),
        (
            "busybox",
            &["sh", "-c"],
            "eval \"$(DLOCK hold -n --print-env NAME)\" || exit 1",
        ),
        (
            "fish",
            &["-c"],
            "DLOCK hold -n --print-env NAME | source; or exit 1",
        ),
    ];
    for (shell, flags, hold) in shells {
        for (i, name) in names.iter().enumerate() {
            let dir = LockDir::new();
            // Words fish and POSIX shells read alike: no `\` or `'` inside the quotes.
            let word = |w: &str| {
                let mut out = String::from("''");
                for c in w.chars() {
                    match c {
                        '\\' => out.push_str(r"\\"),
                        '\'' => out.push_str(r"\'"),
                        c => {
                            out.push('\'');
                            out.push(c);
                            out.push('\'');
                        }
                    }
                }
                out
            };
            let dlock = format!(
                "{} --url {}",
                word(dlock_bin()),
                word(&dir.path().display().to_string())
            );
            let script = format!(
                "{}\nprintf '%s' \"$DLOCK_NAME\" > got\n{dlock} release {} > released 2>&1\ntrue\n",
                hold.replace("DLOCK", &dlock).replace("NAME", &word(name)),
                word(name)
            );
            let mut cmd = program(shell);
            cmd.args(flags).arg(&script).current_dir(dir.path());
            let out = output(cmd);
            assert_eq!(code(&out), 0, "{shell} {name:?}: {}", stderr(&out));
            let got = std::fs::read_to_string(dir.file("got")).unwrap_or_default();
            assert_eq!(got, *name, "{shell}, name {i}");
            assert!(!dir.file("x").exists(), "{shell} ran code from {name:?}");
        }
    }
}

/// A keeper killed with SIGKILL cannot remove its claim: the next hold (of any shell of the user)
/// removes it, also while the shell it served still runs, since no keeper has it locked.
#[test]
fn a_killed_keepers_claim_is_removed_by_the_next_hold() {
    let locks = LockDir::new();
    let hold = |name: &str| {
        format!(
            "{} --url '{}' hold -n {name} || exit 1\n",
            dlock_bin(),
            locks.path().display()
        )
    };
    let body = format!(
        "trap '' TERM\n{}: > held\n{}\n",
        hold("killed"),
        wait_line("go")
    );
    let mut first = Script::start(&locks.path().join("first"), &["sh"], &body);
    wait_for_file(&first.path("held"), T);
    let shell = first.sh.id();
    let claims = || -> Vec<PathBuf> {
        std::fs::read_dir(directory_of_holds())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{shell}.")) && n.ends_with(".claim"))
            })
            .collect()
    };
    let claim = claims();
    assert_eq!(claim.len(), 1, "{claim:?}");
    assert!(end_keepers_of(shell) > 0, "a keeper to kill");
    assert!(wait_for_keepers_of(shell, T), "the keeper is gone");
    // Left by the killed keeper, unless another test's hold (the directory of holds is this
    // user's, shared by the tests running beside this one) has already swept it, as this test's
    // next hold must.
    let left = claim[0].exists();
    let mut second = Script::start(&locks.path().join("second"), &["sh"], &hold("other"));
    assert_eq!(second.exit_code(), 0, "{}", second.read("err"));
    assert!(
        !claim[0].exists(),
        "{} was left (there after the kill: {left})",
        claim[0].display()
    );
    first.go("go");
    assert_eq!(first.exit_code(), 0, "{}", first.read("err"));
}
