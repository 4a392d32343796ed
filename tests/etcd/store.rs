//! etcd as the rest of the suite sees it: its description (`STORE`: its arguments, its
//! capabilities, and how another client forges a holder record, a key under the lock's prefix)
//! and its targets. dlock's etcd URL has no key prefix, so a target on the suite's shared etcd
//! reaches it through a gRPC proxy of its own that puts every key under the target's prefix
//! (`etcd grpc-proxy --namespace`), ended with the target; the private ones (one member, a cluster
//! of three) take faults.

use std::process::{Child, Stdio};
use std::sync::Mutex;

use super::server::{EtcdCluster, EtcdClusterControl, EtcdControl, EtcdServer};
use crate::support::caps::{Caps, ForeignHolder, Forged, FAR_FUTURE};
use crate::support::programs::program;
use crate::support::reaper::reaper;
use crate::support::store::{backend_at, loopback_hosts, Store};
use crate::support::suite_servers::next_namespace;
use crate::support::target::{ServerControl, Target};
use crate::support::{on_a_free_port, stderr, until_listening, LockDir};

pub static STORE: Store = Store {
    backend: "etcd",
    built: cfg!(feature = "etcd"),
    schemes: &["etcd", "etcds"],
    args: |ports| backend_at("etcd", format!("etcd://{}", loopback_hosts(ports))),
    caps: Caps {
        shows_lease_end: true,
        keeps_a_line: true,
        tells_the_place_in_line: false,
        ttl_limit: None,
        dates_runs_by_its_clock: false,
        locks_are_files: false,
        records_a_run_lost_with_its_lease: true,
        loss_reason: "was deleted",
        tokens_count_acquisitions: false,
        tells_of_changes: true,
        unreachable_url: |_, port| format!("etcd://127.0.0.1:{port}"),
        foreign_holder: ForeignHolder {
            unreadable: FAR_FUTURE,
            forge,
        },
    },
    // An acquisition costs more than a lock file's.
    rounds_sixths: |_| 2,
    for_examples: Target::etcd_backend,
};

/// Puts a key under the lock's prefix, without a lease, as any etcd client could: a value of
/// `OWNER RECORD`, the owner first as dlock writes it.
fn forge(t: &Target, record: &str, _json: &str) -> Forged {
    let endpoint = t.urls()[0].replace("etcd://", "http://");
    let out = program("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &endpoint, "put", "/dlock/x/ab"])
        .arg(format!("ab {record}"))
        .output()
        .expect("etcdctl put");
    assert!(out.status.success(), "etcdctl put: {}", stderr(&out));
    Forged {
        stored: record.to_owned(),
        let_go: None,
    }
}

impl Target {
    /// dlock on a private single-member etcd.
    pub fn etcd_backend() -> Target {
        let server = EtcdServer::start();
        Target::on_private(&STORE, vec![server.port()], EtcdControl(Mutex::new(server)))
    }

    /// dlock on a private three-member etcd cluster; faults hit its leader.
    pub fn etcd_cluster() -> Target {
        let cluster = EtcdCluster::start();
        Target::on_private(&STORE, cluster.ports(), EtcdClusterControl(Mutex::new(cluster)))
    }
}

/// A gRPC proxy in front of the suite's etcd that keeps one target's keys under a prefix of its
/// own; ended (with its reaper) when its target is dropped.
struct EtcdNamespace {
    proxy: Child,
    /// Ends the proxy and removes `dir` if this process dies without dropping the target.
    reaper: Child,
    /// Its directory, removed with it.
    _dir: tempfile::TempDir,
}

impl Target {
    /// The etcd backend on the suite's etcd, under a key prefix of its own.
    pub fn suite_etcd() -> Target {
        let server = EtcdServer::shared();
        on_a_free_port("the etcd proxy", |port| {
            Target::etcd_namespace(port, server)
        })
    }

    /// A proxy on `port` in front of `server` with a namespace of its own; `None` when it exited
    /// before it listened.
    fn etcd_namespace(port: u16, server: &EtcdServer) -> Option<Target> {
        let dir = tempfile::tempdir().expect("the etcd proxy's directory");
        let log = std::fs::File::create(dir.path().join("proxy.log")).expect("the proxy's log");
        let proxy = program("etcd")
            .args(["grpc-proxy", "start", "--endpoints"])
            .arg(format!("127.0.0.1:{}", server.port()))
            .arg(format!("--listen-addr=127.0.0.1:{port}"))
            .arg(format!("--advertise-client-url=127.0.0.1:{port}"))
            .arg(format!("--namespace=/contract/{}/", next_namespace()))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the proxy's log"))
            .stderr(log)
            .spawn()
            .expect("etcd is installed (Debian package etcd-server)");
        let reaper = reaper(proxy.id(), dir.path(), libc::SIGKILL);
        let mut namespace = EtcdNamespace {
            proxy,
            reaper,
            _dir: dir,
        };
        let within = std::time::Duration::from_secs(60);
        if !until_listening(
            "the etcd proxy to listen",
            &mut namespace.proxy,
            port,
            within,
        ) {
            return None;
        }
        let ports = vec![port];
        Some(Target {
            args: (STORE.args)(&ports),
            store: &STORE,
            ports,
            servers: vec![Box::new(namespace)],
            scratch: LockDir::new(),
        })
    }
}

/// Owned by its target only to end with it: the suite's etcd takes no faults (a scenario that
/// stops or restarts a server starts a private one, `Target::etcd_backend`).
impl ServerControl for EtcdNamespace {
    fn pause(&self, _pause: std::time::Duration) {
        panic!("the suite's etcd is shared: faults need a private one (Target::etcd_backend)");
    }

    fn restart(&self) {
        panic!("the suite's etcd is shared: faults need a private one (Target::etcd_backend)");
    }
}

impl Drop for EtcdNamespace {
    fn drop(&mut self) {
        // The reaper first, while the proxy's pid is still ours: it must not kill a pid reused
        // after the proxy is reaped.
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
    }
}
