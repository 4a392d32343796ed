//! flock(1) (util-linux) on the lock file `dlock status NAME` shows, against dlock on the file
//! backend, each pair in both directions: the second is refused while the first holds, waits, and
//! gets in once the first lets go; shared holders of both hold together. And how `status` shows a
//! flock(1) holder: shared or exclusive as it holds, also beside dlock's shared holders.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// A shell loop that waits (at most 60s) for `go` to appear.
fn hold_until(go: &Path) -> String {
    format!(
        "i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        go = go.display()
    )
}

/// One side of a pair: flock(1) or dlock, with these flags.
#[derive(Clone, Copy, Debug)]
enum Side {
    Flock(&'static str),
    Dlock(&'static [&'static str]),
}

struct Running {
    child: Child,
    held: PathBuf,
    release: PathBuf,
}

impl Side {
    fn start(self, dir: &LockDir, path: &str, tag: &str) -> Running {
        let held = dir.file(&format!("{tag}.held"));
        let release = dir.file(&format!("{tag}.release"));
        let script = format!("touch {}; {}", held.display(), hold_until(&release));
        let child = match self {
            Side::Flock(flag) => program("flock")
                .args([flag, "-w", "60", path, "sh", "-c", &script])
                .spawn()
                .unwrap(),
            Side::Dlock(flags) => {
                let mut args = vec!["run", "-w", "60"];
                args.extend_from_slice(flags);
                args.extend_from_slice(&["fl", "--", "sh", "-c", &script]);
                dir.dlock(&args).spawn().unwrap()
            }
        };
        Running {
            child,
            held,
            release,
        }
    }

    fn refused(self, dir: &LockDir, path: &str) {
        let (out, busy) = match self {
            Side::Flock(flag) => (
                output({
                    let mut c = program("flock");
                    c.args([flag, "-n", path, "true"]);
                    c
                }),
                1,
            ),
            Side::Dlock(flags) => {
                let mut args = vec!["run", "-n"];
                args.extend_from_slice(flags);
                args.extend_from_slice(&["fl", "--", "true"]);
                (output(dir.dlock(&args)), 75)
            }
        };
        assert_eq!(
            code(&out),
            busy,
            "{self:?} must be refused: {}",
            stderr(&out)
        );
    }
}

/// A side left running by a failed assertion is killed, not left holding the lock.
impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Running {
    fn wait_held(&self) {
        wait_for_file(&self.held, T);
    }

    fn finish(mut self) {
        std::fs::write(&self.release, "").unwrap();
        assert!(wait_exit(&mut self.child, T).success());
    }
}

/// Whether someone waits for a flock(2) lock on `path`, by /proc/locks ("->" marks a waiter).
fn someone_waits(path: &str) -> bool {
    let ino = std::fs::metadata(path).unwrap().ino();
    let id = format!(":{ino}");
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|l| l.contains("->") && l.split_whitespace().any(|f| f.ends_with(&id)))
}

/// The lock file of "fl", as a user learns it.
fn lock_path(dir: &LockDir) -> String {
    let out = output(dir.dlock(&["status", "--json", "fl"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let path = json["location"].as_str().unwrap().to_owned();
    // flock(1) creates it if missing, as an empty file dlock then takes as its own.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    path
}

fn excludes(first: Side, second: Side) {
    let dir = LockDir::new();
    let path = lock_path(&dir);
    let holder = first.start(&dir, &path, "first");
    holder.wait_held();
    second.refused(&dir, &path);
    let waiter = second.start(&dir, &path, "second");
    wait_until("the second to wait", T, || someone_waits(&path));
    assert!(!waiter.held.exists(), "{second:?} got in beside {first:?}");
    holder.finish();
    waiter.wait_held();
    waiter.finish();
}

#[test]
fn flock_and_dlock_exclude_each_other_in_every_exclusive_pair_both_ways() {
    for (flock, dlock) in [
        ("-x", &[][..]),
        ("-s", &[]),
        ("-x", &["--shared"]),
        ("-x", &["--limit", "2"]),
    ] {
        excludes(Side::Flock(flock), Side::Dlock(dlock));
        excludes(Side::Dlock(dlock), Side::Flock(flock));
    }
}

fn modes(json: &serde_json::Value) -> Vec<(String, bool)> {
    let mut modes: Vec<(String, bool)> = json["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["mode"].as_str().unwrap().to_owned(),
                h["owner"].as_str().unwrap().contains("not dlock"),
            )
        })
        .collect();
    modes.sort();
    modes
}

#[test]
fn a_shared_flock_holder_shows_as_shared_also_beside_dlock_shared_holders() {
    let dir = LockDir::new();
    let path = lock_path(&dir);
    let flock = Side::Flock("-s").start(&dir, &path, "flock");
    flock.wait_held();
    let status = |dir: &LockDir| {
        let out = output(dir.dlock(&["status", "--json", "fl"]));
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).unwrap()
    };
    let json = status(&dir);
    assert_eq!(modes(&json), [("shared".to_owned(), true)], "{json}");
    let dlock = Side::Dlock(&["--shared"]).start(&dir, &path, "dlock");
    dlock.wait_held();
    let json = status(&dir);
    assert_eq!(
        modes(&json),
        [("shared".to_owned(), false), ("shared".to_owned(), true)],
        "{json}"
    );
    let out = output(dir.dlock(&["list", "--json"]));
    let list: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(list[0]["holders"].as_array().unwrap().len(), 2, "{list}");
    flock.finish();
    dlock.finish();
}

/// What the README says flock(1) does not exclude: it knows nothing of `--min-hold`, nor of seats.
#[test]
fn flock_ignores_a_min_hold_and_shared_flock_holds_beside_limit_holders() {
    let dir = LockDir::new();
    let path = lock_path(&dir);
    let out = output(dir.dlock(&["run", "--min-hold", "60s", "fl", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(dir.dlock(&["run", "-n", "fl", "--", "true"]));
    assert_eq!(code(&out), 75, "dlock keeps it: {}", stderr(&out));
    let out = output({
        let mut c = program("flock");
        c.args(["-n", &path, "true"]);
        c
    });
    assert_eq!(code(&out), 0, "flock(1) does not see the min-hold");
    let out = output(dir.dlock(&["release", "--force", "fl"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let path = lock_path(&dir);
    let a = Side::Dlock(&["--limit", "1"]).start(&dir, &path, "seat");
    a.wait_held();
    let b = Side::Flock("-s").start(&dir, &path, "flock");
    b.wait_held();
    a.finish();
    b.finish();
}

/// A shared `dlock hold` in a script beside a shared flock(1) holder: `status` names the script's
/// shell as the hold's holder, and the flock(1) holder by its own pid (not the hold's keeper,
/// whose flock(2) lock is the hold's).
#[test]
fn a_shared_hold_beside_a_flock_holder_shows_the_shell_and_the_flock_pid() {
    let dir = LockDir::new();
    let path = lock_path(&dir);
    let flock = Side::Flock("-s").start(&dir, &path, "flock");
    flock.wait_held();
    let (shell_pid, go) = (dir.file("shell.pid"), dir.file("hold.go"));
    let hold = dir.dlock(&["hold", "-s", "fl"]);
    let mut hold_words: Vec<String> = vec![hold.get_program().to_string_lossy().into_owned()];
    hold_words.extend(hold.get_args().map(|a| a.to_string_lossy().into_owned()));
    let script = format!(
        "{} || exit $?; echo $$ > {p}.tmp; mv {p}.tmp {p}; {}",
        hold_words.join(" "),
        hold_until(&go),
        p = shell_pid.display()
    );
    let mut sh = program("sh");
    sh.args(["-c", &script]);
    for (key, value) in hold.get_envs() {
        match value {
            Some(value) => sh.env(key, value),
            None => sh.env_remove(key),
        };
    }
    let mut sh = sh.spawn().unwrap();
    let shell = read_pid(&shell_pid);
    let out = output(dir.dlock(&["status", "--json", "fl"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let mut pids: Vec<(bool, u64)> = json["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let foreign = h["owner"].as_str().unwrap().contains("not dlock");
            (foreign, h["pid"].as_u64().unwrap_or(0))
        })
        .collect();
    pids.sort();
    assert_eq!(
        pids,
        [
            (false, u64::from(shell)),
            (true, u64::from(flock.child.id()))
        ],
        "{json}"
    );
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut sh, T).success());
    assert!(wait_for_keepers_of(shell, T));
    flock.finish();
}
