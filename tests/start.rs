//! dlock's own start, in place of Rust's: what it keeps of Rust's (closed standard descriptors
//! opened on /dev/null, SIGPIPE ignored, stdout written at the end) and what it leaves out for
//! speed (no stack-overflow handler, whose set-up reads /proc/self/maps; no libgcc_s where the C
//! compiler has its static unwinder).

use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

/// A run started with stdin, stdout and stderr closed gives its command /dev/null on all three,
/// and its own lock file never becomes one of them: the lock works, its records are whole.
#[test]
fn closed_standard_descriptors_become_dev_null() {
    let dir = LockDir::new();
    let seen = dir.file("seen");
    let inner = format!(
        "seen=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); echo \"$seen\" > '{}'",
        seen.display()
    );
    let script = format!(
        "exec '{}' --url '{}' run closed -- sh -c \"$1\" <&- >&- 2>&-",
        dlock_bin(),
        dir.path().display()
    );
    let mut sh = without_callers_dlock_settings("sh");
    sh.args(["-c", &script, "sh", &inner]).stdin(Stdio::null());
    let out = output_within(sh, Duration::from_secs(60));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let seen = std::fs::read_to_string(&seen).expect("the command ran");
    assert_eq!(seen, "/dev/null\n/dev/null\n/dev/null\n");
    let status = output(dir.dlock(&["status", "closed"]));
    assert_eq!(code(&status), 1, "free again: {}", stderr(&status));
    assert!(
        stdout(&status).contains("last run"),
        "the run's record is whole: {}",
        stdout(&status)
    );
}

/// Writing to a pipe whose reader is gone is an error dlock outlives (SIGPIPE ignored), not a
/// death by SIGPIPE: `dlock status NAME` still exits with the lock's state, 1 for a free lock.
#[test]
fn a_closed_pipe_on_stdout_does_not_kill_dlock() {
    let dir = LockDir::new();
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut status = dir.dlock(&["status", "piped"]);
    status
        .stdout(writer.as_fd().try_clone_to_owned().expect("dup"))
        .stderr(Stdio::null());
    let mut child = status.spawn().expect("start dlock");
    let ended = wait_exit(&mut child, Duration::from_secs(60));
    assert_eq!(ended.signal(), None, "{ended:?}");
    assert_eq!(ended.code(), Some(1), "{ended:?}");
}

/// The command itself gets SIGPIPE's default back: in `yes | head -n 1` under dlock, `yes` dies of
/// SIGPIPE (141 in the shell), as it would alone, instead of failing on EPIPE.
#[test]
fn the_command_dies_of_sigpipe_as_it_would_alone() {
    let dir = LockDir::new();
    let ended = dir.file("ended");
    let script = format!(
        "{{ yes; echo $? > '{}'; }} | head -n 1 > /dev/null",
        ended.display()
    );
    let out = output_within(
        dir.dlock(&["run", "pipe", "--", "sh", "-c", &script]),
        Duration::from_secs(60),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let ended = std::fs::read_to_string(&ended).expect("yes ended");
    assert_eq!(ended.trim(), "141", "yes ended with {ended:?}");
}

/// Rust's start installs a SIGSEGV and a SIGBUS handler (for its stack-overflow message), and to
/// place it reads /proc/self/maps at every run; dlock's start does neither.
#[test]
fn dlock_starts_without_the_stack_overflow_handler() {
    let dir = LockDir::new();
    let out = output_within(
        dir.dlock(&[
            "run",
            "probe",
            "--",
            "sh",
            "-c",
            "grep SigCgt /proc/$PPID/status",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let line = stdout(&out);
    let caught = u64::from_str_radix(line.trim().trim_start_matches("SigCgt:").trim(), 16)
        .unwrap_or_else(|e| panic!("{line:?}: {e}"));
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        assert_eq!(
            caught & (1 << (sig - 1)),
            0,
            "signal {sig} is caught: {line}"
        );
    }
    // And dlock is the command's parent, so that was dlock's own table: it catches SIGURG.
    assert_ne!(caught & (1 << (libc::SIGURG - 1)), 0, "{line}");
}

/// Where the C compiler has the static unwinder (gcc's libgcc_eh.a), dlock does not load
/// libgcc_s.so at each start.
#[test]
fn dlock_needs_no_libgcc_s_where_the_static_unwinder_is() {
    let asked = program("cc")
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .expect("cc, which building dlock needs");
    let archive = String::from_utf8_lossy(&asked.stdout).trim().to_owned();
    if !std::path::Path::new(&archive).is_absolute() {
        // Not gcc's: libgcc_s stays, as before, and there is nothing to check.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI builds with gcc, which has libgcc_eh.a"
        );
        return;
    }
    let dynamic = program("objdump")
        .args(["-p", dlock_bin()])
        .output()
        .expect("objdump");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    let needed: Vec<&str> = dynamic
        .lines()
        .filter_map(|l| l.trim().strip_prefix("NEEDED"))
        .map(str::trim)
        .collect();
    assert!(needed.contains(&"libc.so.6"), "{needed:?}");
    assert!(
        !needed.iter().any(|lib| lib.starts_with("libgcc_s")),
        "{needed:?}"
    );
}
