//! A backend to run scenarios against: the `dlock` arguments that select it, its store's
//! description, and what a fault driver may do to its server. Each store makes its own targets,
//! in its test folder.

use std::process::Command;

use super::caps::Caps;
use super::store::Store;
use super::*;

/// The `dlock` arguments that select one backend (`--backend X --url Y`).
pub struct Target {
    pub args: Vec<String>,
    /// Its store, as its test folder describes it.
    pub store: &'static Store,
    /// The servers' loopback ports, in the order of the URLs in `args`.
    pub ports: Vec<u16>,
    /// The servers behind the backend, for fault injection: none for the file backend; for the
    /// suite's servers (`Target::suite_NAME`), which other tests share, only what the target must
    /// end or give back with it (an etcd namespace's proxy, a lent Redis Cluster), which takes no
    /// faults.
    pub servers: Vec<Box<dyn ServerControl>>,
    /// Scratch space for markers and counters.
    pub scratch: LockDir,
}

impl Target {
    /// `store` on private servers on `ports` (its `args` for them), which a fault driver hits
    /// through `control`.
    pub fn on_private(
        store: &'static Store,
        ports: Vec<u16>,
        control: impl ServerControl + 'static,
    ) -> Target {
        Target {
            args: (store.args)(&ports),
            store,
            ports,
            servers: vec![Box::new(control)],
            scratch: LockDir::new(),
        }
    }

    /// The arguments that select this backend with its servers reached at other loopback ports
    /// (relays), one per server in the order of `ports`.
    pub fn args_through(&self, ports: &[u16]) -> Vec<String> {
        if let Some(args) = self.servers.iter().find_map(|s| s.args_through(ports)) {
            return args;
        }
        if self
            .urls()
            .iter()
            .any(|u| u.starts_with("redis+cluster://"))
        {
            let seeds: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
            let url = format!("redis+cluster://{}", seeds.join(","));
            return vec!["--backend".into(), "redis".into(), "--url".into(), url];
        }
        (self.store.args)(ports)
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

    /// What the store can do, which the contract's scenarios ask instead of which store it is.
    pub fn caps(&self) -> &'static Caps {
        &self.store.caps
    }

    /// Whether the store tells a holder of a change to its group records (the README's list),
    /// rather than the holder finding it at its next read.
    pub fn tells_of_changes(&self) -> bool {
        self.caps().tells_of_changes
    }

    /// What the command sees in `DLOCK_BACKEND`.
    pub fn backend(&self) -> &'static str {
        self.store.backend
    }

    /// The `--url` values: the lock directory, or one URL per server.
    pub fn urls(&self) -> Vec<&str> {
        self.args
            .windows(2)
            .filter(|pair| pair[0] == "--url")
            .map(|pair| pair[1].as_str())
            .collect()
    }

    /// `rounds` on the file backend, fewer where an acquisition costs more (ZooKeeper's writes,
    /// Redlock's majority), so that a loop of contending runs takes about as long on each backend.
    pub fn rounds(&self, rounds: usize) -> usize {
        let sixths = (self.store.rounds_sixths)(self);
        (rounds * sixths / 6).max(1)
    }

    /// Whether each acquisition of a name takes the next token, 1, 2, 3... (see `Caps`).
    pub fn tokens_count_acquisitions(&self) -> bool {
        self.caps().tokens_count_acquisitions
    }
}

/// What a fault driver may do to a server a test started.
pub trait ServerControl {
    /// Which server the faults hit, for reports: "server", or "leader" in an ensemble.
    fn what(&self) -> &'static str {
        "server"
    }
    /// SIGSTOP the server, wait `pause`, SIGCONT it.
    fn pause(&self, pause: std::time::Duration);
    /// Kill the server and start it again on the same address, empty.
    fn restart(&self);
    /// The arguments that reach these servers through relays on `ports` (one per server), when
    /// its store's `args` cannot say (a client that is told where the servers are, as by
    /// sentinels).
    fn args_through(&self, _ports: &[u16]) -> Option<Vec<String>> {
        None
    }
}
