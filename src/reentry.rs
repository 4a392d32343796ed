//! Re-entrancy: when a nested `dlock run` may skip a lock because a dlock it runs under already
//! holds it, and when a nested request can never be granted.
//!
//! Why this is a module of its own: `DLOCK_HELD` is only a claim. Anyone can set it, a shell copies
//! it into a daemon that outlives its dlock, a cron file keeps it after the holder is gone. Trusting
//! it lets a nested run skip a lock someone else holds, or run exclusively inside its own shared
//! hold. So a claim is never believed; each one the run would rely on is proven here:
//!
//! 1. the claimed holder (pid and start time) is a living ancestor of this process, found by
//!    walking the parent chain in /proc (not by what the variable says);
//! 2. the backend lists, for the lock, a live holder with the claim's owner id, that pid, this host,
//!    and an acquisition time not before that ancestor started (so a record left by an earlier
//!    process with the same pid proves nothing);
//! 3. the mode is the one in the backend's record, and it must cover the request.
//!
//! Inside a script that took the lock with `dlock hold`, the claim comes from the hold's keeper
//! instead (src/hold/nested.rs): no ancestor, so step 1 checks that the keeper that answered still
//! runs with the pid and start time it claims; steps 2 and 3 are the same.
//!
//! The uncontended path pays for none of this: without a `DLOCK_HELD` line naming the same location
//! and lock, nothing is read.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::backend::Backend;
use crate::failure::{FailWith, Failure, FromStore};
use crate::lock::{host_name, Holder, LockName, LockRequest, Mode};

/// Environment variable listing the locks held by this process's dlock ancestors.
pub const HELD_VAR: &str = "DLOCK_HELD";
/// A larger variable is ignored, and none larger is passed on: the kernel refuses any one
/// environment string over 128 KiB (MAX_ARG_STRLEN), and a set of locks that large (thousands of
/// names) gives up some re-entrancy rather than the command.
const HELD_VAR_MAX: usize = 64 * 1024;
/// How far up the parent chain to look for the holder.
const MAX_ANCESTORS: usize = 1024;
/// Holder records keep whole seconds, and the boot time /proc reports moves with clock adjustments.
const START_SLACK: Duration = Duration::from_secs(2);

/// One line of `DLOCK_HELD`: a claim that the dlock with this pid and start time (clock ticks
/// after boot, field 22 of /proc/PID/stat) holds `name` at `location` under the owner id `owner`.
/// Written `LOCATION<TAB>NAME<TAB>OWNER<TAB>PID<TAB>START`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    location: String,
    name: String,
    owner: String,
    pid: u32,
    start: u64,
    /// Told by the keeper of a `dlock hold` of an ancestor shell (src/hold/nested.rs), naming that
    /// shell: proven by its pid and start time as it is now. Never from `DLOCK_HELD`, and never
    /// passed on in it.
    kept: bool,
}

impl Claim {
    /// This process's claim to a lock it has just acquired, naming the process its records name
    /// (a hold's keeper: the shell), which started at `start`; `None` when that start time cannot
    /// be read (the command then gets no claim, and a nested run acquires normally).
    pub fn own(location: &str, name: &LockName, owner: &str, start: Option<u64>) -> Option<Claim> {
        Some(Claim {
            location: location.to_owned(),
            name: name.to_string(),
            owner: owner.to_owned(),
            pid: crate::lock::acting_for::record_pid(),
            start: start?,
            kept: false,
        })
    }

    pub fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}",
            self.location, self.name, self.owner, self.pid, self.start
        )
    }

    /// The inverse of `line`; `None` for anything it never writes. The location comes first and may
    /// hold a tab; no other field can.
    fn parse(line: &str) -> Option<Claim> {
        let mut fields = line.rsplitn(4, '\t');
        let start = fields.next()?.parse().ok()?;
        let pid = fields.next()?.parse().ok().filter(|&p| p > 0)?;
        let owner = fields.next()?;
        let (location, name) = fields.next()?.rsplit_once('\t')?;
        let owner_ok =
            (1..=64).contains(&owner.len()) && owner.bytes().all(|b| b.is_ascii_hexdigit());
        if !owner_ok || location.is_empty() || LockName::new(name).is_err() {
            return None;
        }
        Some(Claim {
            location: location.to_owned(),
            name: name.to_owned(),
            owner: owner.to_owned(),
            pid,
            start,
            kept: false,
        })
    }

    /// A claim a hold's keeper told, asked through the registry entry of `shell`: only one for
    /// that shell.
    pub(crate) fn from_keeper(line: &str, shell: u32) -> Option<Claim> {
        let claim = Claim::parse(line).filter(|c| c.pid == shell)?;
        Some(Claim {
            kept: true,
            ..claim
        })
    }

    fn is_for(&self, location: &str, name: &LockName) -> bool {
        self.location == location && self.name == name.as_str()
    }
}

/// The claims in this process's `DLOCK_HELD`, malformed lines dropped; none if it is unset, not
/// text, or oversized.
pub fn inherited() -> Vec<Claim> {
    let Some(raw) = std::env::var_os(HELD_VAR) else {
        return Vec::new();
    };
    match raw.to_str() {
        Some(text) if text.len() <= HELD_VAR_MAX => text.lines().filter_map(Claim::parse).collect(),
        _ => Vec::new(),
    }
}

/// The `DLOCK_HELD` value for a command: `inherited` and then `own` claims, one per line. Past the
/// size limit, inherited claims are left out first (the command's nested runs most likely ask for
/// the locks its own dlock holds), then whatever still does not fit.
pub fn held_value(inherited: &[Claim], own: &[Claim]) -> String {
    let mut room = HELD_VAR_MAX;
    let mut fits = |line: &String| match room.checked_sub(line.len() + 1) {
        Some(left) => {
            room = left;
            true
        }
        None => false,
    };
    let own: Vec<String> = own.iter().map(Claim::line).filter(&mut fits).collect();
    let inherited: Vec<String> = inherited
        .iter()
        .map(Claim::line)
        .filter(&mut fits)
        .collect();
    let mut lines = inherited;
    lines.extend(own);
    lines.join("\n")
}

/// What a nested run does about its locks.
pub struct Decision {
    /// The requests a living ancestor does not cover, to acquire as usual.
    pub to_acquire: Vec<LockRequest>,
    /// The inherited claims to pass on to the command (those found false are dropped; the rest
    /// stay, since the command's own nested runs prove what they rely on).
    pub passed_on: Vec<Claim>,
}

/// Sorts `requests` into those a living ancestor holds in a mode that covers them (skipped) and
/// the rest (acquired). A request that an ancestor's own hold makes impossible (exclusive inside a
/// shared or limit hold of the same lock, which would wait for that ancestor forever) fails the
/// whole run with a usage error (exit 64) before anything is taken.
pub fn decide(
    backend: &dyn Backend,
    location: &str,
    requests: &[LockRequest],
    claims: Vec<Claim>,
) -> anyhow::Result<Decision> {
    let relevant = |c: &Claim| requests.iter().any(|r| c.is_for(location, &r.name));
    if !claims.iter().any(relevant) {
        return Ok(Decision {
            to_acquire: requests.to_vec(),
            passed_on: claims,
        });
    }
    let ancestors = Ancestors::of_this_process();
    let host = host_name();
    let mut false_claims = HashSet::new();
    let mut to_acquire = Vec::new();
    for request in requests {
        let mine: Vec<usize> = (0..claims.len())
            .filter(|&i| claims[i].is_for(location, &request.name))
            .collect();
        let mut proven = Vec::new();
        if !mine.is_empty() {
            let status = backend.status(&request.name).or_store().with_context(|| {
                format!(
                    "cannot check whether a parent dlock holds lock {:?}",
                    request.name.as_str()
                )
            })?;
            for i in mine {
                let claim = &claims[i];
                let mode = ancestors.started(claim).and_then(|started| {
                    status
                        .holders
                        .iter()
                        .find_map(|h| proves(h, claim, started, &host))
                });
                match mode {
                    Some(mode) => proven.push((mode, claim)),
                    None => {
                        false_claims.insert(i);
                    }
                }
            }
        }
        if proven.iter().any(|(held, _)| covers(*held, request.mode)) {
            continue;
        }
        if let Some((held, claim)) = proven.iter().find(|(held, _)| blocks(*held, request.mode)) {
            let by = if claim.kept {
                format!(
                    "this script's dlock hold (for its shell, pid {})",
                    claim.pid
                )
            } else {
                format!("a parent dlock (pid {})", claim.pid)
            };
            return Err(anyhow::anyhow!(
                "lock {:?} is held {held} by {by}; a nested {} request would wait for it forever",
                request.name.as_str(),
                request.mode
            ))
            .fail_with(Failure::Usage);
        }
        to_acquire.push(request.clone());
    }
    let passed_on = claims
        .into_iter()
        .enumerate()
        .filter(|(i, c)| !false_claims.contains(i) && !c.kept)
        .map(|(_, c)| c)
        .collect();
    Ok(Decision {
        to_acquire,
        passed_on,
    })
}

/// Whether a hold in mode `held` already grants a request in mode `asked`: exclusive grants
/// everything; a limit seat grants a seat or a shared hold (both run beside other seats); shared
/// grants shared.
fn covers(held: Mode, asked: Mode) -> bool {
    matches!(
        (held, asked),
        (Mode::Exclusive, _)
            | (Mode::Limit(_), Mode::Limit(_) | Mode::Shared)
            | (Mode::Shared, Mode::Shared)
    )
}

/// Whether a hold in mode `held` makes a request in mode `asked` wait for the holder itself.
fn blocks(held: Mode, asked: Mode) -> bool {
    asked == Mode::Exclusive && held != Mode::Exclusive
}

/// The mode `holder` holds the lock in, if it is the holder `claim` names: the same owner id and
/// pid on this host, acquired after the ancestor with that pid started (`started`). Every read of a
/// holder record for re-entrancy is here.
fn proves(holder: &Holder, claim: &Claim, started: SystemTime, host: &str) -> Option<Mode> {
    // An unreadable record proves nothing, whatever fields it seems to have.
    if holder.unreadable.is_some() {
        return None;
    }
    // Redis records replace spaces in the host name, which they keep space-separated.
    let same_host = holder
        .host
        .as_deref()
        .is_some_and(|h| h == host || h == host.replace(' ', "_"));
    let after_start = holder
        .since
        .and_then(|since| since.checked_add(START_SLACK))
        .is_some_and(|s| s >= started);
    (holder.owner == claim.owner && holder.pid == Some(claim.pid) && same_host && after_start)
        .then_some(holder.mode)
}

/// This process's ancestors as (pid, start time), nearest first; read once, only when needed.
struct Ancestors {
    chain: Vec<(u32, u64)>,
    boot: Option<SystemTime>,
    ticks_per_second: u64,
}

impl Ancestors {
    fn of_this_process() -> Ancestors {
        let mut chain = Vec::new();
        let mut pid = std::os::unix::process::parent_id();
        while pid != 0 && chain.len() < MAX_ANCESTORS {
            let Some(stat) = ProcStat::read(pid) else {
                break;
            };
            chain.push((pid, stat.start));
            pid = stat.parent;
        }
        let ticks = rustix::param::clock_ticks_per_second();
        Ancestors {
            chain,
            boot: boot_time(),
            ticks_per_second: Some(ticks).filter(|&t| t > 0).unwrap_or(100),
        }
    }

    /// When the process a claim names started (wall clock), if it is one of our ancestors (or, for
    /// a keeper's claim, the keeper still running).
    fn started(&self, claim: &Claim) -> Option<SystemTime> {
        let alive = if claim.kept {
            ProcStat::read(claim.pid).is_some_and(|stat| stat.start == claim.start)
        } else {
            self.chain.contains(&(claim.pid, claim.start))
        };
        if !alive {
            return None;
        }
        let after_boot = Duration::from_secs(claim.start / self.ticks_per_second)
            + Duration::from_secs(claim.start % self.ticks_per_second)
                / u32::try_from(self.ticks_per_second).ok()?;
        self.boot?.checked_add(after_boot)
    }
}

/// What re-entrancy (and `dlock hold`'s keeper) needs from /proc/PID/stat.
pub(crate) struct ProcStat {
    pub(crate) parent: u32,
    /// Clock ticks after boot (field 22).
    pub(crate) start: u64,
}

impl ProcStat {
    pub(crate) fn read(pid: u32) -> Option<ProcStat> {
        ProcStat::parse(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
    }

    /// The command name (field 2) is in parentheses and may hold anything, so fields are counted
    /// from the last `)`: state is field 3, the parent field 4, the start time field 22. (The name
    /// need not be UTF-8; what follows it is.)
    fn parse(stat: &[u8]) -> Option<ProcStat> {
        let close = stat.iter().rposition(|&b| b == b')')?;
        let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
        let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
        Some(ProcStat {
            parent: fields.get(1)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
        })
    }
}

/// The start time of the process this one's claims name (`Claim::own`): this process's own, or a
/// hold keeper's shell's.
pub fn claimant_start() -> Option<u64> {
    let pid = crate::lock::acting_for::record_pid();
    if pid == std::process::id() {
        return own_start();
    }
    ProcStat::read(pid).map(|s| s.start)
}

/// This process's start time, for its own claims. On the path of every run, so one read into a
/// buffer, not `read_to_string`'s growing reads (a /proc file has no size to start from).
pub fn own_start() -> Option<u64> {
    use std::io::Read;
    // The start time is field 22: well within 1 KiB, whatever the command name.
    let mut buf = [0u8; 1024];
    let n = std::fs::File::open("/proc/self/stat")
        .ok()?
        .read(&mut buf)
        .ok()?;
    ProcStat::parse(buf.get(..n)?).map(|s| s.start)
}

/// When the machine booted, from the `btime` line of /proc/stat.
fn boot_time() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let seconds = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> Claim {
        Claim {
            location: "file:/tmp/a\tb".into(),
            name: "/p/b".into(),
            owner: "00ff".into(),
            pid: 42,
            start: 12345,
            kept: false,
        }
    }

    #[test]
    fn claims_round_trip_even_with_a_tab_in_the_location() {
        let c = claim();
        assert_eq!(Claim::parse(&c.line()), Some(c));
    }

    #[test]
    fn malformed_claims_are_ignored() {
        for line in [
            "",
            "file:/d\tn",
            "file:/d\tn\t00ff\t42",
            "file:/d\tn\t00ff\t0\t1",
            "file:/d\tn\tnot-hex\t42\t1",
            "file:/d\tn\t00ff\t-1\t1",
            "file:/d\tn\t00ff\t42\t1x",
            "\tn\t00ff\t42\t1",
            "file:/d\t\t00ff\t42\t1",
        ] {
            assert_eq!(Claim::parse(line), None, "{line:?}");
        }
    }

    #[test]
    fn an_oversized_variable_keeps_the_own_claims_first() {
        let own = vec![claim()];
        let inherited = vec![claim(); HELD_VAR_MAX / claim().line().len() + 10];
        let value = held_value(&inherited, &own);
        assert!(value.len() <= HELD_VAR_MAX);
        assert_eq!(value.lines().last(), Some(own[0].line()).as_deref());
        assert!(value.lines().count() < inherited.len());
        assert_eq!(held_value(&[], &[]), "");
    }

    #[test]
    fn modes_cover_what_they_grant_and_block_only_exclusive_requests() {
        use Mode::*;
        assert!(covers(Exclusive, Shared) && covers(Exclusive, Limit(2)));
        assert!(covers(Limit(1), Limit(3)) && covers(Limit(1), Shared));
        assert!(covers(Shared, Shared) && !covers(Shared, Limit(1)));
        assert!(!covers(Shared, Exclusive) && !covers(Limit(1), Exclusive));
        assert!(blocks(Shared, Exclusive) && blocks(Limit(1), Exclusive));
        assert!(!blocks(Shared, Limit(1)) && !blocks(Exclusive, Exclusive));
    }

    #[test]
    fn proc_stat_is_read_past_a_command_name_with_parentheses() {
        let line = b"7 (a) \xff b) S 3 7 7 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987 0 0";
        let stat = ProcStat::parse(line).unwrap();
        assert_eq!((stat.parent, stat.start), (3, 987));
        assert!(own_start().is_some());
    }

    #[test]
    fn a_record_older_than_the_ancestor_proves_nothing() {
        let c = claim();
        let started = UNIX_EPOCH + Duration::from_secs(1_000);
        let holder = |since: u64, pid: u32| Holder {
            mode: Mode::Shared,
            host: Some("h".into()),
            pid: Some(pid),
            owner: "00ff".into(),
            since: Some(UNIX_EPOCH + Duration::from_secs(since)),
            token: Some(1),
            message: None,
            expires_at: None,
            kept_until: None,
            kept: None,
            unreadable: None,
        };
        assert_eq!(
            proves(&holder(1_000, 42), &c, started, "h"),
            Some(Mode::Shared)
        );
        assert_eq!(
            proves(&holder(999, 42), &c, started, "h"),
            Some(Mode::Shared)
        );
        assert_eq!(proves(&holder(990, 42), &c, started, "h"), None);
        assert_eq!(proves(&holder(1_000, 43), &c, started, "h"), None);
        assert_eq!(proves(&holder(1_000, 42), &c, started, "other"), None);
    }

    proptest::proptest! {
        #[test]
        fn any_variable_line_parses_or_is_ignored_without_panicking(line in "\\PC{0,80}|[0-9a-f\t:/]{0,60}") {
            if let Some(c) = Claim::parse(&line) {
                proptest::prop_assert_eq!(Claim::parse(&c.line()), Some(c));
            }
        }
    }
}
