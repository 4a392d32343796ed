//! The file backend as the rest of the suite sees it: its description (`STORE`: its capabilities,
//! and how another client with write access forges a holder record, overwriting a live holder's
//! record slot) and its target, a lock directory of the test's own.

use std::os::unix::fs::FileExt;

use crate::contract::Holding;
use crate::support::caps::{Caps, ForeignHolder, Forged};
use crate::support::store::Store;
use crate::support::target::Target;
use crate::support::LockDir;

pub static STORE: Store = Store {
    backend: "file",
    built: true,
    schemes: &["file"],
    args: |_| panic!("the file backend has no servers"),
    caps: Caps {
        shows_lease_end: false,
        keeps_a_line: false,
        tells_the_place_in_line: false,
        ttl_limit: None,
        dates_runs_by_its_clock: false,
        locks_are_files: true,
        records_a_run_lost_with_its_lease: true,
        loss_reason: "was removed or replaced",
        tokens_count_acquisitions: true,
        tells_of_changes: true,
        unreachable_url: |t, _| t.scratch_file("no-such-directory"),
        foreign_holder: ForeignHolder {
            // A terminal escape in its host for good measure.
            unreadable: "exclusive 5 99999999999999 2 host\u{1b}[2J",
            forge,
        },
    },
    rounds_sixths: |_| 6,
    for_examples: Target::file_backend,
};

impl Target {
    /// The file backend in a lock directory of its own.
    pub fn file_backend() -> Target {
        let scratch = LockDir::new();
        let locks = scratch.file("locks");
        // dlock never creates a lock directory it is given.
        std::fs::create_dir(&locks).expect("create the lock directory");
        Target {
            args: vec!["--url".into(), locks.display().to_string()],
            store: &STORE,
            ports: vec![],
            servers: vec![],
            scratch,
        }
    }
}

/// Overwrites a live holder's record slot (it keeps its OFD lock on it) with `record`.
fn forge(t: &Target, record: &str, _json: &str) -> Forged {
    let holder = Holding::start(t, &["--ttl", "3s", "x"]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(std::path::Path::new(t.urls()[0]).join("x.lock"))
        .unwrap();
    let mut slot = format!("dlock1 ab {record}\n").into_bytes();
    slot.resize(512, 0);
    file.write_all_at(&slot, 4096).unwrap();
    Forged {
        stored: record.to_owned(),
        let_go: Some(Box::new(move || {
            // Its lock was broken: whatever it exits with, it is gone.
            holder.let_go();
        })),
    }
}
