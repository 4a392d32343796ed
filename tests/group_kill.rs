//! When dlock is SIGKILLed, every process still in the command's process group dies with it (the
//! guardian, crates/sys/src/guard.rs), setuid programs included; when the command simply exits, what it left
//! in the background lives on, as with flock(1).

use std::time::{Duration, Instant};

use crate::support::*;

const T: Duration = Duration::from_secs(20);

/// The bound the tests hold the guardian to; it reports the time it measured.
const GONE_WITHIN: Duration = Duration::from_secs(1);

/// SIGKILLs `dlock` and returns how long until `pid` was gone (or a zombie).
fn kill_and_time(dlock: &mut std::process::Child, pid: u32) -> Duration {
    let start = Instant::now();
    signal(dlock.id(), libc::SIGKILL);
    wait_until(&format!("process {pid} to be gone"), T, || !alive(pid));
    let took = start.elapsed();
    wait_exit(dlock, T);
    took
}

#[test]
fn sigkill_of_dlock_kills_what_the_command_left_in_the_background() {
    let dir = LockDir::new();
    let pid_file = dir.file("background");
    let mut dlock = dir
        .dlock(&[
            "run",
            "x",
            "--",
            "sh",
            "-c",
            &format!("sleep 300 & echo $! > {}; wait", pid_file.display()),
        ])
        .spawn()
        .unwrap();
    let background = read_pid(&pid_file);
    let took = kill_and_time(&mut dlock, background);
    eprintln!("background process gone {took:?} after SIGKILL of dlock");
    assert!(took < GONE_WITHIN, "took {took:?}");
    // And the next holder runs.
    assert_eq!(code(&output(dir.dlock(&["run", "x", "--", "true"]))), 0);
}

#[test]
fn sigkill_of_dlock_kills_a_setuid_command() {
    // The kernel clears the parent-death signal when a process execs a setuid program, so only the
    // guardian can end it. Making a setuid program owned by another user needs root.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        // A test that cannot run is a failure, never a skip.
        panic!("needs root to make a setuid program owned by another user");
    }
    let dir = LockDir::new();
    let program = dir.file("sleep-setuid");
    std::fs::copy("/bin/sleep", &program).unwrap();
    let nobody = 65534;
    std::os::unix::fs::chown(&program, Some(nobody), None).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let pid_file = dir.file("pid");
    let mut dlock = dir
        .dlock(&[
            "run",
            "x",
            "--",
            "sh",
            "-c",
            &format!(
                "echo $$ > {}; exec {} 300",
                pid_file.display(),
                program.display()
            ),
        ])
        .spawn()
        .unwrap();
    let pid = read_pid(&pid_file);
    wait_until("the command to run setuid", T, || {
        effective_uid(pid) == Some(nobody)
    });
    let took = kill_and_time(&mut dlock, pid);
    eprintln!("setuid command gone {took:?} after SIGKILL of dlock");
    assert!(took < GONE_WITHIN, "took {took:?}");
}

#[test]
fn a_normal_exit_leaves_background_processes_alone() {
    let dir = LockDir::new();
    let pid_file = dir.file("background");
    let go = dir.file("go");
    let mut dlock = dir
        .dlock(&[
            "run",
            "x",
            "--",
            "sh",
            "-c",
            &format!(
                "sleep 300 & echo $! > {}; until [ -e {} ]; do sleep 0.02; done",
                pid_file.display(),
                go.display()
            ),
        ])
        .spawn()
        .unwrap();
    let background = read_pid(&pid_file);
    // Whatever else dlock started (its guardian): wait for it to be gone too before judging.
    let command = parent(background).expect("the command");
    let helpers: Vec<u32> = children(dlock.id())
        .into_iter()
        .filter(|&pid| pid != command)
        .collect();
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut dlock, T).success());
    for pid in helpers {
        wait_until(&format!("dlock's helper {pid} to be gone"), T, || {
            !alive(pid)
        });
    }
    assert!(alive(background), "the background process was killed");
    signal(background, libc::SIGKILL);
}

/// The pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&p| parent(p) == Some(pid))
        .collect()
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(") ").next()?.split(' ').nth(1)?.parse().ok()
}

fn effective_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}
