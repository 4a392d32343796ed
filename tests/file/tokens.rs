//! Fencing tokens on the file backend never repeat and never go back, whatever the interleaving of
//! runs and forced releases, and a counter at its end is refused rather than wrapped.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// Takes an OFD lock on bytes 0..4096 of `file` (the header lock), waiting for it.
fn lock_header(file: &std::fs::File) {
    // SAFETY: an all-zero flock struct is valid; the fields the call reads are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 4096;
    // SAFETY: fl is a valid flock struct for the duration of the call.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &mut fl) };
    assert_eq!(rc, 0, "take the header lock");
}

/// How many processes wait for an OFD lock on this file, from /proc/locks (waiters show `->`).
fn ofd_waiters(path: &Path) -> usize {
    let meta = std::fs::metadata(path).unwrap();
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    );
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&"->")
                && fields.get(2) == Some(&"OFDLCK")
                && fields.get(6) == Some(&id.as_str())
        })
        .count()
}

fn read_token(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A holder of `name` that writes its token to `out` and then keeps the lock.
fn holder(dir: &LockDir, name: &str, out: &Path) -> std::process::Child {
    let script = format!(
        "echo $DLOCK_TOKEN > {0}.tmp && mv {0}.tmp {0}; sleep 30",
        out.display()
    );
    dir.dlock(&["run", "--ttl", "600ms", name, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Two forced releases of one lock, the second stalled on the header lock of the file it opened
/// while the first replaced that file and a new holder took the new one. The stalled break must
/// act on the file now at the path (breaking the new holder and keeping its counter), not copy
/// the old file's counter over the new one, which handed the new holder's token out again.
#[test]
fn a_stalled_forced_release_acts_on_the_current_file_and_tokens_keep_growing() {
    let dir = LockDir::new();
    let path = dir.file("n.lock");
    let (t1, t2) = (dir.file("t1"), dir.file("t2"));
    let mut h1 = holder(&dir, "n", &t1);
    wait_for_file(&t1, T);

    // Hold the header lock of the current file, so the break stalls right after opening it.
    let old = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    lock_header(&old);
    let stalled = dir
        .dlock(&["release", "--force", "n"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the break to wait for the header lock", T, || {
        ofd_waiters(&path) == 1
    });

    // Meanwhile a first break replaces the file, as `release --force` does: the same header in a
    // new file renamed over the path; and a new holder takes the new file.
    let mut fixed = vec![0u8; dlock_header("n", 0).len()];
    old.read_exact_at(&mut fixed, 0).unwrap();
    let fresh = dir.file(".n.fresh");
    std::fs::write(&fresh, &fixed).unwrap();
    std::fs::rename(&fresh, &path).unwrap();
    let mut h2 = holder(&dir, "n", &t2);
    wait_for_file(&t2, T);

    drop(old); // lets the stalled break go on
    let broke = stalled.wait_with_output().unwrap();
    assert_eq!(code(&broke), 0, "{}", stderr(&broke));
    assert_eq!(wait_exit(&mut h2, T).code(), Some(79));
    assert_eq!(wait_exit(&mut h1, T).code(), Some(79));

    let out = output(dir.dlock(&["run", "n", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let t3: u64 = stdout(&out).trim().parse().unwrap();
    let (t1, t2) = (read_token(&t1), read_token(&t2));
    assert!(
        t1 < t2 && t2 < t3,
        "every token is greater than every earlier one: {t1}, {t2}, {t3}"
    );
    assert!(
        names_pid(&stdout(&broke), h2.id()) && !names_pid(&stdout(&broke), h1.id()),
        "the stalled break names the holder it broke, the current file's: {}",
        stdout(&broke)
    );
}

#[test]
fn a_token_counter_at_its_end_is_refused_never_wrapped() {
    let dir = LockDir::new();
    let path = dir.file("last.lock");
    std::fs::write(&path, dlock_header("last", u64::MAX - 1)).unwrap();
    let out = output(dir.dlock(&["run", "last", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        u64::MAX.to_string(),
        "the last token is used"
    );

    let before = std::fs::read(&path).unwrap();
    let ran = dir.file("ran");
    let out = output_within(
        dir.dlock(&["run", "last", "--", "touch", ran.to_str().unwrap()]),
        T,
    );
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!(
            "dlock: lock file {} has used up its fencing tokens",
            path.display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(!ran.exists(), "the command does not run");
    assert_eq!(std::fs::read(&path).unwrap(), before, "left byte for byte");
}
