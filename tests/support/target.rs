//! A backend to run scenarios against: the `dlock` arguments that select it, and what a fault
//! driver may do to its server.

use std::process::Command;

use super::caps::Caps;
use super::*;

/// The `dlock` arguments that select one backend (`--backend X --url Y`).
pub struct Target {
    pub args: Vec<String>,
    pub kind: Kind,
    /// The servers' loopback ports, in the order of the URLs in `args`.
    pub ports: Vec<u16>,
    /// The servers behind the backend, for fault injection: none for the file backend; for the
    /// suite's servers (`suite_servers`), which other tests share, only what the target must end
    /// or give back with it (an etcd namespace's proxy, a lent Redis Cluster), which takes no
    /// faults.
    pub servers: Vec<Box<dyn ServerControl>>,
    /// Scratch space for markers and counters.
    pub scratch: LockDir,
}

impl Target {
    pub fn file_backend() -> Target {
        let scratch = LockDir::new();
        let locks = scratch.file("locks");
        // dlock never creates a lock directory it is given.
        std::fs::create_dir(&locks).expect("create the lock directory");
        Target {
            args: vec!["--url".into(), locks.display().to_string()],
            kind: Kind::File,
            ports: vec![],
            servers: vec![],
            scratch,
        }
    }

    /// dlock on a private ZooKeeper server.
    pub fn zk_backend() -> Target {
        let server = zk_server::ZkServer::start();
        let ports = vec![server.port()];
        Target {
            args: Kind::Zk.args(&ports),
            kind: Kind::Zk,
            ports,
            servers: vec![Box::new(zk_server::ZkControl(std::sync::Mutex::new(
                server,
            )))],
            scratch: LockDir::new(),
        }
    }

    /// dlock on a private three-server ZooKeeper ensemble; faults hit its leader.
    pub fn zk_ensemble() -> Target {
        let ensemble = zk_server::ZkEnsemble::start();
        let ports = ensemble.ports();
        Target {
            args: Kind::Zk.args(&ports),
            kind: Kind::Zk,
            ports,
            servers: vec![Box::new(zk_server::ZkEnsembleControl(
                std::sync::Mutex::new(ensemble),
            ))],
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
        self.kind.args(ports)
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
    pub fn caps(&self) -> Caps {
        self.kind.caps()
    }

    /// Whether the store tells a holder of a change to its group records (the README's list),
    /// rather than the holder finding it at its next read.
    pub fn tells_of_changes(&self) -> bool {
        self.caps().tells_of_changes
    }

    /// What the command sees in `DLOCK_BACKEND`.
    pub fn backend(&self) -> &'static str {
        match self.kind {
            Kind::File => "file",
            Kind::Redis => "redis",
            Kind::Zk => "zk",
            Kind::Postgres => "postgres",
            Kind::Etcd => "etcd",
            Kind::Mysql => "mysql",
            Kind::Elasticsearch => "elasticsearch",
        }
    }

    /// The `--url` values: the lock directory, or one URL per server.
    pub fn urls(&self) -> Vec<&str> {
        self.args
            .windows(2)
            .filter(|pair| pair[0] == "--url")
            .map(|pair| pair[1].as_str())
            .collect()
    }

    /// The Redis servers' own URLs, for a scenario that writes to them directly: for a
    /// `redis+sentinel://` URL its master's (the suite's sentinel set never fails over), in the
    /// same database.
    pub fn redis_urls(&self) -> Vec<String> {
        // A cluster: each of its nodes (a script must go to the node that serves its keys).
        if self
            .urls()
            .iter()
            .any(|u| u.starts_with("redis+cluster://"))
        {
            let nodes = self.ports.iter();
            return nodes.map(|p| format!("redis://127.0.0.1:{p}")).collect();
        }
        let urls = self.urls().into_iter().zip(&self.ports);
        urls.map(|(url, port)| match url.strip_prefix("redis+sentinel://") {
            Some(rest) => {
                let db = rest.rsplit('/').next().unwrap_or("0");
                format!("redis://127.0.0.1:{port}/{db}")
            }
            None => url.to_owned(),
        })
        .collect()
    }

    /// `rounds` on the file backend, fewer where an acquisition costs more (ZooKeeper's writes,
    /// Redlock's majority), so that a loop of contending runs takes about as long on each backend.
    pub fn rounds(&self, rounds: usize) -> usize {
        let sixths = match self.kind {
            Kind::File => 6,
            Kind::Redis if self.ports.len() == 1 => 4,
            Kind::Zk | Kind::Postgres | Kind::Etcd | Kind::Mysql | Kind::Elasticsearch => 2,
            Kind::Redis => 1,
        };
        (rounds * sixths / 6).max(1)
    }

    /// Whether each acquisition of a name takes the next token, 1, 2, 3... (see `Caps`).
    pub fn tokens_count_acquisitions(&self) -> bool {
        self.caps().tokens_count_acquisitions
    }
}

/// Which backend a target runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    File,
    Redis,
    Zk,
    Postgres,
    Etcd,
    Mysql,
    Elasticsearch,
}

impl Kind {
    /// `--backend` and `--url` for servers on these loopback ports (not for the file backend).
    pub fn args(self, ports: &[u16]) -> Vec<String> {
        match self {
            Kind::File => panic!("the file backend has no servers"),
            Kind::Redis => {
                let mut args = vec!["--backend".to_owned(), "redis".to_owned()];
                for port in ports {
                    args.extend(["--url".to_owned(), format!("redis://127.0.0.1:{port}")]);
                }
                args
            }
            Kind::Zk => {
                let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
                vec![
                    "--backend".into(),
                    "zk".into(),
                    "--url".into(),
                    format!("zk://{}", hosts.join(",")),
                ]
            }
            Kind::Postgres => vec![
                "--backend".into(),
                "postgres".into(),
                "--url".into(),
                format!(
                    "postgres://postgres:{}@127.0.0.1:{}/postgres",
                    super::pg_server::PASSWORD,
                    ports[0]
                ),
            ],
            Kind::Mysql => vec![
                "--backend".into(),
                "mysql".into(),
                "--url".into(),
                format!(
                    "mysql://root:{}@127.0.0.1:{}/{}",
                    super::mysql_server::PASSWORD,
                    ports[0],
                    super::mysql_server::DATABASE
                ),
            ],
            // The default index, `dlock`, of a node of the test's own.
            Kind::Elasticsearch => {
                let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
                vec![
                    "--backend".into(),
                    "elasticsearch".into(),
                    "--url".into(),
                    format!("elasticsearch://{}", hosts.join(",")),
                ]
            }
            Kind::Etcd => {
                let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
                vec![
                    "--backend".into(),
                    "etcd".into(),
                    "--url".into(),
                    format!("etcd://{}", hosts.join(",")),
                ]
            }
        }
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
    /// `Kind::args` cannot say (a client that is told where the servers are, as by sentinels).
    fn args_through(&self, _ports: &[u16]) -> Option<Vec<String>> {
        None
    }
}
