//! What each store can do, as the contract's scenarios ask it of a target instead of asking which
//! store it is. A store declares its capabilities once, in `Kind::caps`: its match has no
//! wildcard arm and `Caps` has no default, so a store added without them does not compile, and no
//! scenario skips an assertion on a store that forgot one.

use super::target::{Kind, Target};

/// What a store can do that the contract's scenarios tell apart.
pub struct Caps {
    /// A holder's lease has an end that others can see: `status` and `list` give its
    /// `expires_at` (by the server's clock, or the seconds the server says it has left); null
    /// where none does (a lock file; a ZooKeeper session's end, which only its own client sees).
    pub shows_lease_end: bool,
    /// The store keeps a line of waiters that `status` lists, first first; where it keeps none
    /// (the file backend's waiters block in the kernel), the list is empty.
    pub keeps_a_line: bool,
    /// A waiter drawn on a terminal is told its place in line (", next in").
    pub tells_the_place_in_line: bool,
    /// A longest lease shorter than the year every backend takes (`--ttl`'s own limit); `None`
    /// where a lease of a year is kept.
    pub ttl_limit: Option<TtlLimit>,
    /// A run's records are dated by the store's clock, not by the writer's: a writer whose clock
    /// is ahead does not date its run in the reader's future.
    pub dates_runs_by_its_clock: bool,
    /// Each lock is a file in the `--url` directory, which a test may look for or remove.
    pub locks_are_files: bool,
    /// A holder whose lease passed while it was stopped still records its run as lost; where the
    /// lease is the session (ZooKeeper), a session that is over writes nothing and the run reads
    /// as never ended.
    pub records_a_run_lost_with_its_lease: bool,
    /// What a holder says of its record when `release --force` broke its lock.
    pub loss_reason: &'static str,
    /// Each acquisition of a name takes the next token, 1, 2, 3...: a counter per name, rather
    /// than a revision that every write to the store advances (ZooKeeper's zxids, etcd's).
    pub tokens_count_acquisitions: bool,
    /// The store tells a holder of a change to its group records (the README's list), rather
    /// than the holder finding it at its next read.
    pub tells_of_changes: bool,
    /// The store's URL at a loopback port where nothing listens (for the file backend, a
    /// directory that does not exist).
    pub unreachable_url: fn(&Target, u16) -> String,
    /// How a client other than dlock, with write access to the store, puts a holder record there.
    pub foreign_holder: ForeignHolder,
}

/// A store's longest lease below a year, and how dlock refuses one longer.
#[derive(Clone, Copy)]
pub struct TtlLimit {
    /// The longest `--ttl` it keeps, as given.
    pub longest: &'static str,
    /// The same, in days.
    pub days: u64,
    /// A `--ttl` past it, refused.
    pub beyond: &'static str,
    /// What the refusal says.
    pub refused: &'static str,
}

/// Where a store keeps a holder's record, for a scenario that forges one as any client that can
/// write there could. Each is written its own way; a new store adds its own.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ForeignHolder {
    /// A record slot of the lock file, overwritten while a live holder keeps its lock on it: the
    /// record's text line (`MODE TOKEN SINCE PID HOST[\tMESSAGE]`).
    LockFileSlot,
    /// The text line in the lock's hash of owners on every Redis server.
    RedisHash,
    /// A node's JSON, a child of the lock's ZooKeeper node.
    ZkNode,
    /// A row of the target's PostgreSQL table, the fields as columns (`since` a timestamptz).
    PostgresRow,
    /// A row of the target's MySQL table, the fields as columns (`since` a DATETIME, which
    /// stops at the year 9999).
    MysqlRow,
    /// An entry of the lock's Elasticsearch document, in JSON.
    EsDocument,
    /// `OWNER LINE` in a key under the lock's etcd prefix, without a lease.
    EtcdKey,
}

impl Kind {
    /// The store's capabilities: one arm a store, every field given.
    pub fn caps(self) -> Caps {
        match self {
            Kind::File => Caps {
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
                foreign_holder: ForeignHolder::LockFileSlot,
            },
            Kind::Redis => Caps {
                shows_lease_end: true,
                keeps_a_line: true,
                tells_the_place_in_line: true,
                ttl_limit: None,
                dates_runs_by_its_clock: true,
                locks_are_files: false,
                records_a_run_lost_with_its_lease: true,
                loss_reason: "no longer ours",
                tokens_count_acquisitions: true,
                tells_of_changes: true,
                unreachable_url: |_, port| format!("redis://127.0.0.1:{port}"),
                foreign_holder: ForeignHolder::RedisHash,
            },
            Kind::Zk => Caps {
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
                foreign_holder: ForeignHolder::ZkNode,
            },
            Kind::Postgres => Caps {
                shows_lease_end: true,
                keeps_a_line: true,
                tells_the_place_in_line: false,
                ttl_limit: None,
                dates_runs_by_its_clock: true,
                locks_are_files: false,
                records_a_run_lost_with_its_lease: true,
                loss_reason: "no longer ours",
                tokens_count_acquisitions: true,
                tells_of_changes: true,
                unreachable_url: |_, port| format!("postgres://dlock@127.0.0.1:{port}/dlock"),
                foreign_holder: ForeignHolder::PostgresRow,
            },
            Kind::Etcd => Caps {
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
                foreign_holder: ForeignHolder::EtcdKey,
            },
            Kind::Mysql => Caps {
                shows_lease_end: true,
                keeps_a_line: true,
                tells_the_place_in_line: false,
                ttl_limit: None,
                dates_runs_by_its_clock: true,
                locks_are_files: false,
                records_a_run_lost_with_its_lease: true,
                loss_reason: "no longer ours",
                tokens_count_acquisitions: true,
                tells_of_changes: false,
                unreachable_url: |_, port| format!("mysql://dlock@127.0.0.1:{port}/dlock"),
                foreign_holder: ForeignHolder::MysqlRow,
            },
            Kind::Elasticsearch => Caps {
                shows_lease_end: true,
                keeps_a_line: true,
                tells_the_place_in_line: false,
                ttl_limit: None,
                dates_runs_by_its_clock: true,
                locks_are_files: false,
                records_a_run_lost_with_its_lease: true,
                loss_reason: "no longer ours",
                tokens_count_acquisitions: true,
                tells_of_changes: false,
                unreachable_url: |_, port| format!("elasticsearch://127.0.0.1:{port}"),
                foreign_holder: ForeignHolder::EsDocument,
            },
        }
    }
}
