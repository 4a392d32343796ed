//! ZooKeeper as the rest of the suite sees it: its description (`STORE`: its arguments, its
//! capabilities, and how another client forges a holder record, a node's JSON under the lock's
//! node) and its targets: the suite's shared server, under a chroot per target, and private ones
//! (a server, an ensemble of three) that faults may hit.

use std::sync::{Mutex, OnceLock};

use super::server::{create_with_parents, ZkControl, ZkEnsemble, ZkEnsembleControl, ZkServer};
use crate::support::caps::{Caps, ForeignHolder, Forged, TtlLimit, FAR_FUTURE};
use crate::support::reaper::reaper;
use crate::support::store::{backend_at, loopback_hosts, Store};
use crate::support::suite_servers::{next_namespace, Lasting};
use crate::support::target::Target;
use crate::support::LockDir;

pub static STORE: Store = Store {
    backend: "zk",
    built: cfg!(feature = "zk"),
    schemes: &["zk"],
    args: |ports| backend_at("zk", format!("zk://{}", loopback_hosts(ports))),
    caps: Caps {
        shows_lease_end: false,
        keeps_a_line: true,
        tells_the_place_in_line: true,
        // A session timeout is a 32-bit count of milliseconds.
        ttl_limit: Some(TtlLimit {
            longest: "24days",
            days: 24,
            beyond: "25days",
            refused: "too long for the zk backend: at most 24d",
        }),
        dates_runs_by_its_clock: true,
        locks_are_files: false,
        records_a_run_lost_with_its_lease: false,
        loss_reason: "was deleted",
        tokens_count_acquisitions: false,
        tells_of_changes: true,
        unreachable_url: |_, port| format!("zk://127.0.0.1:{port}"),
        foreign_holder: ForeignHolder {
            unreadable: FAR_FUTURE,
            forge,
        },
    },
    // ZooKeeper's writes cost more than a lock file.
    rounds_sixths: |_| 2,
    for_examples: Target::suite_zk,
};

/// Writes `json` as a holder's node, a child of the lock's node.
fn forge(t: &Target, _record: &str, json: &str) -> Forged {
    let url = t.urls()[0].strip_prefix("zk://").expect("a zk:// URL");
    // `zk://HOSTS/CHROOT`: the chroot with its leading `/`, or nothing.
    let (hosts, chroot) = url.find('/').map_or((url, ""), |at| url.split_at(at));
    let node = format!("{chroot}/dlock/x/_c_forged-lock-0000000000");
    create_with_parents(hosts, &node, json.as_bytes());
    Forged {
        stored: json.to_owned(),
        let_go: None,
    }
}

static ZK: OnceLock<Lasting<ZkServer>> = OnceLock::new();

/// The suite's ZooKeeper server, started by the first test that needs it.
fn suite_server() -> &'static ZkServer {
    &ZK.get_or_init(|| {
        let server = ZkServer::start();
        let reapers = vec![reaper(server.pid(), server.dir(), libc::SIGKILL)];
        Lasting { server, reapers }
    })
    .server
}

/// A handle on a node of its own on the suite's server (`ZkServer::under`), for a test that
/// neither stops nor asks the server itself.
pub fn on_the_suites_server() -> ZkServer {
    suite_server().under(&format!("/tests/{}", next_namespace()))
}

impl Target {
    /// The ZooKeeper backend on the suite's server, under a chroot of its own.
    pub fn suite_zk() -> Target {
        let server = suite_server();
        Target {
            args: backend_at(
                "zk",
                format!("{}/contract/{}", server.url(), next_namespace()),
            ),
            store: &STORE,
            ports: vec![server.port()],
            servers: vec![],
            scratch: LockDir::new(),
        }
    }

    /// dlock on a private ZooKeeper server.
    pub fn zk_backend() -> Target {
        let server = ZkServer::start();
        Target::on_private(&STORE, vec![server.port()], ZkControl(Mutex::new(server)))
    }

    /// dlock on a private three-server ZooKeeper ensemble; faults hit its leader.
    pub fn zk_ensemble() -> Target {
        let ensemble = ZkEnsemble::start();
        Target::on_private(&STORE, ensemble.ports(), ZkEnsembleControl(Mutex::new(ensemble)))
    }
}
