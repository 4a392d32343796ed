//! A backend to run scenarios against: the `dlock` arguments that select it, and what a fault
//! driver may do to its server.

use std::process::Command;

use super::*;

/// The `dlock` arguments that select one backend (`--backend X --url Y`).
pub struct Target {
    pub args: Vec<String>,
    /// The servers behind the backend, for fault injection (none for the file backend).
    pub servers: Vec<Box<dyn ServerControl>>,
    /// Scratch space for markers and counters.
    pub scratch: LockDir,
}

impl Target {
    pub fn file_backend() -> Target {
        let scratch = LockDir::new();
        let locks = scratch.file("locks");
        Target {
            args: vec!["--url".into(), locks.display().to_string()],
            servers: vec![],
            scratch,
        }
    }

    /// dlock on a private ZooKeeper server.
    pub fn zk_backend() -> Target {
        let server = zk_server::ZkServer::start();
        Target {
            args: vec![
                "--backend".into(),
                "zk".into(),
                "--url".into(),
                server.url(),
            ],
            servers: vec![Box::new(zk_server::ZkControl(std::sync::Mutex::new(
                server,
            )))],
            scratch: LockDir::new(),
        }
    }

    pub fn dlock(&self, args: &[&str]) -> Command {
        let mut cmd = dlock();
        cmd.args(&self.args).args(args);
        cmd
    }

    /// `dlock ARGS` as a shell word list, for loops run by sh.
    pub fn shell_words(&self, args: &[&str]) -> String {
        std::iter::once(dlock_bin().to_owned())
            .chain(self.args.iter().cloned())
            .chain(args.iter().map(|a| a.to_string()))
            .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn scratch_file(&self, name: &str) -> String {
        self.scratch.file(name).display().to_string()
    }
}

/// What a fault driver may do to a server a test started.
pub trait ServerControl {
    /// SIGSTOP the server, wait `pause`, SIGCONT it.
    fn pause(&self, pause: std::time::Duration);
    /// Kill the server and start it again on the same address, empty.
    fn restart(&self);
}
