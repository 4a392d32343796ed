//! What dlock shows of other clients' holders that its own recipe does not count: the leases of
//! Curator's `InterProcessSemaphoreV2` and kazoo's `Semaphore` on a lock's node (real clients,
//! tests/zk/CuratorLock.java and kazoo_lock.py), which exclude no dlock mode, and a Curator
//! mutex that holds beside a `--shared` holder.

use super::interop::{curator, kazoo};
use super::*;

/// A semaphore client with one lease on `/dlock/NAME`, started in the background.
#[derive(Clone, Copy, Debug)]
enum Semaphore {
    Curator,
    Kazoo,
}

impl Semaphore {
    fn command(
        self,
        server: &ZkServer,
        name: &str,
        how: &str,
        held: &Path,
        release: &Path,
    ) -> Command {
        match self {
            Semaphore::Curator => curator(server, name, "semaphore", how, held, release),
            Semaphore::Kazoo => kazoo(server, name, "semaphore", "", how, held, release),
        }
    }

    /// The label `status` gives its leases.
    fn label(self) -> &'static str {
        match self {
            Semaphore::Curator => "(not dlock: curator semaphore)",
            Semaphore::Kazoo => "(not dlock: kazoo semaphore)",
        }
    }
}

/// Kills a client left running by a failed assertion.
struct Client(Child);

impl Drop for Client {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

const DLOCK_MODES: [&[&str]; 3] = [&[], &["--shared"], &["--limit", "2"]];

fn run_now(server: &ZkServer, flags: &[&str], name: &str) -> std::process::Output {
    let mut args = vec!["run", "-n"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[name, "--", "true"]);
    output(server.dlock(&args))
}

#[test]
fn semaphore_leases_are_shown_as_foreign_holders_and_keep_no_dlock_mode_out() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    for semaphore in [Semaphore::Curator, Semaphore::Kazoo] {
        let name = format!("{semaphore:?}").to_lowercase();
        let (held, release) = (
            dir.file(&format!("{name}.held")),
            dir.file(&format!("{name}.release")),
        );
        let mut client = Client(
            semaphore
                .command(&server, &name, "wait", &held, &release)
                .spawn()
                .unwrap(),
        );
        wait_for_file(&held, T);
        let json = status_json(&server, &name);
        let holders = json["holders"].as_array().unwrap();
        assert_eq!(holders.len(), 1, "{semaphore:?}: {json}");
        assert_eq!(holders[0]["owner"], semaphore.label(), "{json}");
        assert_eq!(json["waiters"].as_array().unwrap().len(), 0, "{json}");
        let out = output(server.dlock(&["status", &name]));
        assert_eq!(code(&out), 0, "held: {}", stdout(&out));
        let out = output(server.dlock(&["list", "--json"]));
        assert!(stdout(&out).contains(semaphore.label()), "{}", stdout(&out));
        for flags in DLOCK_MODES {
            let out = run_now(&server, flags, &name);
            assert_eq!(code(&out), 0, "{semaphore:?}, {flags:?}: {}", stderr(&out));
        }
        std::fs::write(&release, "").unwrap();
        assert!(wait_exit(&mut client.0, T).success());
        let json = status_json(&server, &name);
        assert_eq!(json["holders"].as_array().unwrap().len(), 0, "{json}");
    }
}

#[test]
fn a_curator_semaphore_gets_a_lease_beside_every_dlock_mode() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    for (i, flags) in DLOCK_MODES.into_iter().enumerate() {
        let tag = format!("d{i}");
        let mut holder = start_holder(&server, &dir, flags, "cs", &tag);
        let (held, release) = (
            dir.file(&format!("c{i}.held")),
            dir.file(&format!("c{i}.release")),
        );
        std::fs::write(&release, "").unwrap();
        let out = output(Semaphore::Curator.command(&server, "cs", "try", &held, &release));
        assert!(out.status.success(), "{flags:?}: {}", stderr(&out));
        assert!(held.exists(), "{flags:?}");
        let_go(&dir, &tag);
        assert!(wait_exit(&mut holder, T).success());
    }
}

/// kazoo's Semaphore counts every child of the lock's node as a lease: a dlock holder fills its
/// one lease, and its waiter, which holds kazoo's inner lock on the sibling node `NAME-__lock__`,
/// is shown as waiting for NAME, not as a lock of its own.
#[test]
fn a_dlock_holder_keeps_a_one_lease_kazoo_semaphore_out_and_its_waiter_is_shown_waiting() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    for (i, flags) in DLOCK_MODES.into_iter().enumerate() {
        let tag = format!("d{i}");
        // A name each: the waiter stopped below leaves its node until its session expires.
        let name = format!("ks{i}");
        let mut holder = start_holder(&server, &dir, flags, &name, &tag);
        let (held, release) = (
            dir.file(&format!("k{i}.held")),
            dir.file(&format!("k{i}.release")),
        );
        let out = output(Semaphore::Kazoo.command(&server, &name, "try", &held, &release));
        assert_eq!(code(&out), 3, "{flags:?}: {}", stderr(&out));
        let waiter = Client(
            Semaphore::Kazoo
                .command(&server, &name, "wait", &held, &release)
                .spawn()
                .unwrap(),
        );
        wait_until("kazoo's waiter to take its inner lock", T, || {
            !lock_nodes(&server, &format!("{name}-__lock__")).is_empty()
        });
        let json = status_json(&server, &name);
        let waiters = json["waiters"].as_array().unwrap();
        assert_eq!(waiters.len(), 1, "{flags:?}: {json}");
        assert_eq!(waiters[0]["owner"], Semaphore::Kazoo.label(), "{json}");
        assert_eq!(json["holders"].as_array().unwrap().len(), 1, "{json}");
        let out = output(server.dlock(&["list"]));
        assert!(stdout(&out).contains(&name), "{}", stdout(&out));
        assert!(
            !stdout(&out).contains(&format!("{name}-__lock__")),
            "{}",
            stdout(&out)
        );
        assert!(!held.exists(), "{flags:?}: kazoo got in beside dlock");
        // Stopped first: once dlock's holder goes, the server may delete the emptied lock node
        // (a container) under the waiting kazoo client.
        drop(waiter);
        let_go(&dir, &tag);
        assert!(wait_exit(&mut holder, T).success());
    }
}

/// Curator's mutex sorts only `lock-` nodes, so it holds beside a shared holder (README): `status`
/// shows both as holders and nobody waiting.
#[test]
fn a_curator_mutex_holding_beside_a_shared_holder_is_shown_as_a_holder() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut reader = start_holder(&server, &dir, &["--shared"], "cm", "r");
    let (held, release) = (dir.file("c.held"), dir.file("c.release"));
    let mut mutex = Client(
        curator(&server, "cm", "mutex", "wait", &held, &release)
            .spawn()
            .unwrap(),
    );
    wait_for_file(&held, T);
    let json = status_json(&server, "cm");
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{json}");
    assert!(
        holders.iter().any(|h| h["mode"] == "exclusive"
            && h["owner"].as_str().unwrap().starts_with("(not dlock: ")),
        "{json}"
    );
    assert_eq!(json["waiters"].as_array().unwrap().len(), 0, "{json}");
    // dlock sees both: its exclusive mode is refused.
    let out = run_now(&server, &[], "cm");
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut mutex.0, T).success());
    let_go(&dir, "r");
    assert!(wait_exit(&mut reader, T).success());
}
