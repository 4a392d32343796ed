//! What each store can do, as the contract's scenarios ask it of a target instead of asking which
//! store it is. A store declares its capabilities once, in its `Store` (its test folder's
//! `store.rs`): `Caps` has no default, so a store added without them does not compile, and no
//! scenario skips an assertion on a store that forgot one.

use super::target::Target;

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

/// A holder record with a time humantime cannot print (past the year 9999).
pub const FAR_FUTURE: &str = "exclusive 5 99999999999999 2 host";

/// How a client other than dlock, with write access to the store, puts a holder record there, as
/// a scenario forges one (`contract/hostile.rs`). Each store writes it its own way, in its folder.
#[derive(Clone, Copy)]
pub struct ForeignHolder {
    /// A record the store keeps and dlock cannot read (`MODE TOKEN SINCE PID HOST`): its `since`
    /// past the year 9999 (`FAR_FUTURE`) where the store keeps such a time.
    pub unreadable: &'static str,
    /// Writes the only holder of "x", owned by `ab`: `record` (`MODE TOKEN SINCE PID
    /// HOST[\tMESSAGE]`), in the store's own form, or `json` where the store keeps a holder's JSON
    /// as it is (a ZooKeeper node's).
    pub forge: fn(t: &Target, record: &str, json: &str) -> Forged,
}

/// A holder record that `ForeignHolder::forge` wrote.
pub struct Forged {
    /// The record as the store keeps it, which dlock shows, escaped, as unreadable.
    pub stored: String,
    /// Lets go of the live holder whose record it overwrote, where it needed one (the file
    /// backend's record slot), once the scenario is done.
    pub let_go: Option<Box<dyn FnOnce()>>,
}
