//! Whatever sits at a lock's path (a FIFO, a device, a directory, someone's data, a lock file
//! copied from another name) and a full disk: dlock never blocks on it, exits 69 naming the path,
//! leaves it as it was and leaves nothing of its own behind; `list` shows the rest.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn mknod(path: &Path, mode: libc::mode_t, dev: libc::dev_t) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    let rc = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    assert_eq!(rc, 0, "mknod {}", path.display());
}

/// What an entry is, to check that dlock left it as it was.
fn snapshot(path: &Path) -> (u64, u32, Option<Vec<u8>>) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    let bytes = meta.is_file().then(|| std::fs::read(path).unwrap());
    (meta.ino(), meta.mode(), bytes)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn odd_entries_at_a_lock_path_are_refused_with_69_and_left_as_they_are() {
    assert_eq!(
        unsafe { libc::getuid() },
        0,
        "making a device node needs root (as in CI)"
    );
    let dir = LockDir::new();
    // A held lock that `list` must still show beside the odd entries.
    let marker = dir.file("in");
    let mut held = dir
        .dlock(&[
            "run",
            "held",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", marker.display()),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    assert_eq!(code(&output(dir.dlock(&["run", "other", "--", "true"]))), 0);
    let other = std::fs::read(dir.file("other.lock")).unwrap();

    let mut sockets = Vec::new();
    let cases: Vec<(&str, &str)> = vec![
        ("fifo", "is a FIFO, not a lock file"),
        ("dir", "is a directory, not a lock file"),
        ("chardev", "is a character device, not a lock file"),
        ("socket", "is a socket, not a lock file"),
        ("copied", "belongs to the lock \"other\""),
        ("data", "is not a dlock lock file"),
        ("short", "is not a dlock lock file"),
        ("truncated", "has a truncated dlock header"),
        ("badlen", "has a malformed dlock header"),
        ("badname", "has a malformed dlock header"),
    ];
    for (name, _) in &cases {
        let path = dir.file(&format!("{name}.lock"));
        match *name {
            "fifo" => mknod(&path, libc::S_IFIFO | 0o644, 0),
            "dir" => std::fs::create_dir(&path).unwrap(),
            "chardev" => mknod(&path, libc::S_IFCHR | 0o644, libc::makedev(1, 3)),
            "socket" => sockets.push(std::os::unix::net::UnixListener::bind(&path).unwrap()),
            "copied" => std::fs::write(&path, &other).unwrap(),
            "data" => std::fs::write(&path, "precious data\n").unwrap(),
            "short" => std::fs::write(&path, "dl").unwrap(),
            "truncated" => std::fs::write(&path, &dlock_header("truncated", 7)[..12]).unwrap(),
            "badlen" => {
                let mut h = dlock_header("badlen", 7);
                h[16..20].copy_from_slice(&0u32.to_le_bytes());
                std::fs::write(&path, h).unwrap()
            }
            "badname" => {
                let mut h = dlock_header("badname", 7);
                h[20] = 0xff;
                std::fs::write(&path, h).unwrap()
            }
            _ => unreachable!(),
        }
    }
    let before_entries = entries(dir.path());

    for (name, why) in &cases {
        let path = dir.file(&format!("{name}.lock"));
        let before = snapshot(&path);
        let ran = dir.file("ran");
        for args in [
            &[
                "run",
                "-w",
                "30s",
                name,
                "--",
                "touch",
                ran.to_str().unwrap(),
            ][..],
            &["status", name],
            &["release", "--force", name],
        ] {
            let out = output_within(dir.dlock(args), T);
            assert_eq!(code(&out), 69, "{name} {args:?}: {}", stderr(&out));
            let err = stderr(&out);
            assert!(
                err.starts_with("dlock: ")
                    && err.contains(&path.display().to_string())
                    && err.contains(why)
                    && err.lines().count() == 1,
                "{name} {args:?}: one line naming the path and why: {err}"
            );
            assert!(!err.contains("os error"), "{err}");
        }
        assert!(!ran.exists(), "{name}: the command never ran");
        assert_eq!(snapshot(&path), before, "{name}: left as it was");
    }

    let out = output_within(dir.dlock(&["list"]), T);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("held\texclusive by "),
        "the held lock is listed: {}",
        stdout(&out)
    );
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    let err = stderr(&out);
    assert_eq!(
        err.lines().count(),
        cases.len(),
        "one line per odd entry: {err}"
    );
    for (name, why) in &cases {
        let path = dir.file(&format!("{name}.lock"));
        assert!(
            err.lines().any(|l| l.starts_with("dlock: skipped: ")
                && l.contains(&path.display().to_string())
                && l.contains(why)),
            "{name}: {err}"
        );
    }
    let out = output_within(dir.dlock(&["list", "--json"]), T);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1, "{json}");
    // A prefix that no odd entry's name starts with skips them without a word.
    let out = output_within(dir.dlock(&["list", "held"]), T);
    assert_eq!((code(&out), stderr(&out).as_str()), (0, ""));

    assert_eq!(entries(dir.path()), before_entries, "nothing left behind");
    signal(held.id(), libc::SIGTERM);
    wait_exit(&mut held, T);
}

#[test]
fn an_empty_lock_file_becomes_a_dlock_lock_file() {
    let dir = LockDir::new();
    let path = dir.file("empty.lock");
    std::fs::write(&path, "").unwrap(); // as flock(1) or touch leave it
    let out = output(dir.dlock(&["run", "empty", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1");
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.starts_with(&dlock_header("empty", 1)), "{bytes:?}");
}

/// `flock(1)` holding `path` (making it empty if missing) until dropped; returned once it holds.
struct Flock1(std::process::Child);

impl Flock1 {
    fn hold(path: &Path, ready: &Path) -> Flock1 {
        let child = program("flock")
            .arg(path)
            .args(["sh", "-c", "touch \"$0\"; sleep 60"])
            .arg(ready)
            .spawn()
            .expect("flock(1)");
        wait_for_file(ready, T);
        Flock1(child)
    }
}

impl Drop for Flock1 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Someone ran `flock LOCKDIR/NAME.lock ...`: no dlock record, no header. `status` and `list` both
/// show the holder, with `since` and `token` unknown (null), not 1970 and 0; a file flock(1) holds
/// after dlock made it shows the same.
#[test]
fn a_flock1_holder_shows_in_status_and_list_alike_with_no_time_or_token() {
    let dir = LockDir::new();
    for (name, made_by_dlock) in [("by-flock", false), ("made.by-dlock", true)] {
        let path = dir.file(&format!("{name}.lock"));
        if made_by_dlock {
            assert_eq!(code(&output(dir.dlock(&["run", name, "--", "true"]))), 0);
        }
        let holder = Flock1::hold(&path, &dir.file(&format!("{name}.ready")));
        let pid = holder.0.id();
        let out = output(dir.dlock(&["status", "--json", name]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let status: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let shown = &status["holders"][0];
        assert_eq!(shown["pid"], pid, "{status}");
        assert!(
            shown["since"].is_null() && shown["token"].is_null(),
            "{status}"
        );
        assert!(
            shown["expires_at"].is_null() && shown["message"].is_null(),
            "{status}"
        );
        let text = stdout(&output(dir.dlock(&["status", name])));
        // The holder's lines; a last run, dlock's earlier one, has its own token. The epoch is
        // looked for as a date: a pid such as 31970 holds its digits.
        let holder_lines: Vec<&str> = text.lines().filter(|l| !l.contains("last run:")).collect();
        assert!(
            holder_lines
                .iter()
                .all(|l| !l.contains("1970-01-01") && !l.contains("token")),
            "{text}"
        );
        assert_eq!(text.contains("last run:"), made_by_dlock, "{text}");

        let out = output(dir.dlock(&["list", "--json", name]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(
            listed,
            serde_json::json!([status]),
            "list as status shows it"
        );
        let out = output(dir.dlock(&["list", name]));
        assert_eq!(
            stdout(&out),
            format!(
                "{name}\texclusive by {} pid {pid}\n",
                shown["host"].as_str().unwrap()
            )
        );
        drop(holder);
    }
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let status = program("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount a tmpfs (needs root, as in CI)");
        SmallDisk { dir }
    }

    /// Writes a file until the disk is full.
    fn fill(&self) {
        let mut filler = std::fs::File::create(self.dir.path().join("filler")).unwrap();
        let chunk = [0u8; 4096];
        for _ in 0..100_000 {
            if std::io::Write::write_all(&mut filler, &chunk).is_err() {
                return;
            }
        }
        panic!("the small disk never filled");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = program("umount")
            .arg(self.dir.path())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn a_full_disk_fails_with_69_and_leaves_no_lock_file() {
    let disk = SmallDisk::new("256k");
    let dir = disk.dir.path();
    let with_dir = |args: &[&str]| {
        let mut c = dlock();
        c.arg("--url").arg(dir).args(args);
        output_within(c, T)
    };
    assert_eq!(code(&with_dir(&["run", "before", "--", "true"])), 0);
    disk.fill();
    let before = entries(dir);

    let out = with_dir(&["run", "new", "--", "true"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "dlock: cannot create lock file {}/new.lock: no space left on device\n",
            dir.display()
        )
    );
    assert_eq!(
        entries(dir),
        before,
        "no lock file (empty or not) left behind"
    );
    assert_eq!(code(&with_dir(&["status", "new"])), 1, "still free");
    // A lock whose file exists keeps working on the full disk.
    let out = with_dir(&["run", "before", "--", "sh", "-c", "echo $DLOCK_TOKEN"]);
    assert_eq!(
        (code(&out), stdout(&out).trim()),
        (0, "2"),
        "{}",
        stderr(&out)
    );
}
