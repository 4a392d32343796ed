//! Job control as with flock(1): in an interactive shell on a terminal, Ctrl-Z stops the job and
//! gives the prompt back, `fg` resumes it, `kill %1` ends it and frees the lock. Off a terminal, a
//! signal dlock forwards to a stopped command wakes it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

/// An interactive bash on a terminal of its own (a detached tmux pane), driven by typed lines.
/// Its tmux server is ended when dropped.
struct Shell {
    socket: PathBuf,
}

impl Shell {
    /// Starts the shell and waits until it reads its input; fails the test (never skips it) when
    /// tmux cannot run.
    fn start(dir: &LockDir) -> Shell {
        let shell = Shell {
            socket: dir.file("tmux.socket"),
        };
        let started = shell
            .tmux()
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "50",
            ])
            .arg("env PS1='$ ' HISTFILE=/dev/null bash --norc --noprofile -i")
            .status();
        match started {
            Ok(status) => assert!(status.success(), "tmux new-session: {status}"),
            Err(e) => panic!("cannot run tmux ({e}); scripts/test installs it"),
        }
        // Synchronise on the shell reading its input.
        let ready = dir.file("ready");
        shell.type_line(&format!("touch {}", ready.display()));
        wait_for_file(&ready, T);
        shell
    }

    fn tmux(&self) -> Command {
        let mut cmd = without_callers_dlock_settings("tmux");
        cmd.arg("-S").arg(&self.socket).env_remove("TMUX");
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }

    fn type_line(&self, line: &str) {
        let status = self
            .tmux()
            .args(["send-keys", "-t", "0", "-l", line])
            .status()
            .unwrap();
        assert!(status.success());
        self.press("Enter");
    }

    /// A key as tmux names it (`C-z`, `Enter`).
    fn press(&self, key: &str) {
        let status = self
            .tmux()
            .args(["send-keys", "-t", "0", key])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// What the terminal shows now.
    fn screen(&self) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p", "-t", "0"])
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the shell has the terminal back, then types `jobs` and waits until it lists
    /// the job as stopped.
    fn wait_stopped(&self, dir: &LockDir) {
        // Typed before the shell has the terminal back, the line goes to the job's terminal
        // settings and loses characters: wait for bash's own report of the stop first.
        wait_until("the shell to report the job stopped", T, || {
            self.screen().contains("Stopped")
        });
        let jobs = dir.file("jobs");
        let _ = std::fs::remove_file(&jobs);
        self.type_line(&format!("jobs > {}", jobs.display()));
        wait_until("the shell to list the job as stopped", T, || {
            read(&jobs).contains("Stopped")
        });
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the terminal showed:\n{}", self.screen());
        }
        let _ = self.tmux().arg("kill-server").status();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn dlock_line(dir: &LockDir, args: &str) -> String {
    format!("{} --url {} {args}", dlock_bin(), dir.path().display())
}

fn lock_status(dir: &LockDir) -> i32 {
    code(&output(dir.dlock(&["status", "-q", "j"])))
}

// The commands below wait without starting processes (`read`, `wait`, `exec`): a stop that catches a
// shell between vfork and exec stops the child, but the kernel lets the shell itself stop only once
// that child has exec'd, so its parent (dlock, or any shell) never sees it stop.

#[test]
fn ctrl_z_on_a_terminal_stops_the_job_and_fg_resumes_it_to_its_status() {
    let dir = LockDir::new();
    let shell = Shell::start(&dir);
    let (started, status) = (dir.file("started"), dir.file("status"));
    // The command reads a line from the terminal: it can only once it has the foreground again.
    shell.type_line(&dlock_line(
        &dir,
        &format!(
            "run j -- sh -c 'echo $$ > {}; read line; exit 7'",
            started.display()
        ),
    ));
    let command = read_pid(&started);
    shell.press("C-z");
    // The prompt is back (the shell runs `jobs`) and the job is stopped, still holding the lock.
    shell.wait_stopped(&dir);
    assert_eq!(state(command), Some('T'));
    assert_eq!(lock_status(&dir), 0, "the stopped job still holds the lock");
    shell.type_line(&format!("fg; echo $? > {}", status.display()));
    wait_until("the command to run in the foreground again", T, || {
        state(command).is_some_and(|s| s != 'T') && in_foreground(command)
    });
    shell.type_line("a line for the command");
    wait_until("the resumed command to finish", T, || {
        read(&status).ends_with('\n')
    });
    assert_eq!(read(&status).trim(), "7");
    assert_eq!(lock_status(&dir), 1, "released after the command finished");
}

#[test]
fn kill_of_a_stopped_job_ends_the_command_and_frees_the_lock() {
    let dir = LockDir::new();
    let shell = Shell::start(&dir);
    let pid_file = dir.file("pid");
    shell.type_line(&dlock_line(
        &dir,
        &format!(
            "run j -- sh -c 'echo $$ > {}; exec sleep 300'",
            pid_file.display()
        ),
    ));
    let command = read_pid(&pid_file);
    shell.press("C-z");
    shell.wait_stopped(&dir);
    shell.type_line("kill %1");
    wait_until("the lock to be free after kill %1", T, || {
        lock_status(&dir) == 1
    });
    assert!(!alive(command), "the command is gone");
}

#[test]
fn sigterm_to_dlock_ends_a_stopped_command_off_a_terminal() {
    let dir = LockDir::new();
    let script = format!(
        "trap 'echo TERM > {got}; exit 3' TERM; sleep 300 & echo $$ > {pid}; wait",
        pid = dir.file("pid").display(),
        got = dir.file("got").display()
    );
    let mut dlock = dir
        .dlock(&["run", "j", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let command = read_pid(&dir.file("pid"));
    // The group is the command's, which this test started.
    assert!(signal_group(command, libc::SIGSTOP));
    wait_until("the command to be stopped", T, || {
        state(command) == Some('T')
    });
    signal(dlock.id(), libc::SIGTERM);
    let status = wait_exit(&mut dlock, T);
    assert_eq!(status.code(), Some(3), "the command's trap ran");
    assert_eq!(read(&dir.file("got")).trim(), "TERM");
    assert_eq!(lock_status(&dir), 1);
}

/// Whether `pid`'s process group has its terminal's foreground.
fn in_foreground(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // After the command name: state ppid pgrp session tty_nr tpgid ...
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split(' ').collect();
    fields.len() > 5 && fields[2] == fields[5]
}

/// A process's state letter from /proc (`T`: stopped).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(") ").next()?.chars().next()
}

#[test]
fn ctrl_z_is_ignored_when_no_shell_could_resume_the_job() {
    // Under script(1) dlock's group is orphaned (its parent is in another session): the kernel
    // ignores Ctrl-Z for such a group, so dlock continues its command at once, as the command would
    // have been left running had it been in that group itself.
    let dir = LockDir::new();
    let (started, continued) = (dir.file("started"), dir.file("continued"));
    let cmd = dlock_line(
        &dir,
        &format!(
            "run j -- sh -c 'trap \"touch {c}; kill \\$!\" CONT; sleep 300 & touch {s}; wait; exit 4'",
            c = continued.display(),
            s = started.display()
        ),
    );
    let mut script = match program("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => panic!("cannot run script(1): {e}"),
    };
    wait_for_file(&started, T);
    use std::io::Write;
    let mut terminal = script.stdin.take().unwrap();
    terminal.write_all(b"\x1a").unwrap();
    // The command got SIGCONT (its trap ran) and finishes with its own status.
    let status = wait_exit(&mut script, T);
    assert_eq!(status.code(), Some(4));
    assert!(continued.exists());
}
