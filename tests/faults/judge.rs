//! Judging a run from the resource's log and the clients' records.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use super::clients::Run;
use super::driver::Expected;
use super::resource::Log;

#[derive(Default)]
pub struct Report {
    /// Critical sections whose both writes were accepted.
    pub completed: usize,
    pub faults: BTreeMap<String, usize>,
    /// Faults that could not be aimed (no holder caught in time).
    pub missed: usize,
    /// Accepted writes of a holder after another holder's.
    pub overlaps: usize,
    pub stale_refused: usize,
    /// Runs whose writes were refused although their dlock never lost the lock: two holders.
    pub unjustified: Vec<String>,
    /// Tokens handed to two runs.
    pub repeated_tokens: Vec<u64>,
    /// Runs whose token was not above that of a run already in its critical section when this
    /// one's dlock started.
    pub decreasing_tokens: Vec<String>,
    /// Runs whose command outlived dlock.
    pub orphans: Vec<String>,
    /// Partitions whose holder kept a lock it must lose, or lost one it must keep.
    pub wrong_partition_outcomes: Vec<String>,
    pub worst_loss_to_exit: Option<Duration>,
}

pub fn judge(log: &Log, runs: &[Run], expected: &[Expected]) -> Report {
    let status: HashMap<&str, i32> = runs.iter().map(|r| (r.id.as_str(), r.status)).collect();

    // Interleaving: once another holder has written, an earlier one may never be accepted again.
    let mut finished: BTreeSet<&str> = BTreeSet::new();
    let mut overlaps = 0;
    let mut current: Option<&str> = None;
    for w in log.writes.iter().filter(|w| w.accepted) {
        if current != Some(w.run.as_str()) {
            if let Some(previous) = current {
                finished.insert(previous);
            }
            overlaps += usize::from(finished.contains(w.run.as_str()));
            current = Some(&w.run);
        }
    }

    // A refused write's holder really lost its lock: its dlock said so (79) or was killed.
    let refused: BTreeSet<&str> = log
        .writes
        .iter()
        .filter(|w| !w.accepted)
        .map(|w| w.run.as_str())
        .collect();
    let unjustified = refused
        .iter()
        .filter(|run| matches!(status.get(*run), Some(&s) if s != 79 && s <= 128))
        .map(|run| run.to_string())
        .collect();

    let mut by_token: BTreeMap<u64, usize> = BTreeMap::new();
    for b in log.begins.values() {
        *by_token.entry(b.token).or_default() += 1;
    }
    let repeated_tokens = by_token
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(t, _)| t)
        .collect();

    // A run whose dlock started after another run had begun its critical section acquired after
    // that one: its token must be higher.
    let mut begun: Vec<(std::time::Instant, u64)> =
        log.begins.values().map(|b| (b.at, b.token)).collect();
    begun.sort();
    let mut started: Vec<(&Run, u64)> = runs
        .iter()
        .filter_map(|r| log.begins.get(&r.id).map(|b| (r, b.token)))
        .collect();
    started.sort_by_key(|(r, _)| r.spawned);
    let mut decreasing_tokens = Vec::new();
    let mut highest_before: Option<u64> = None;
    let mut next = 0;
    for (run, token) in started {
        while next < begun.len() && begun[next].0 < run.spawned {
            highest_before = highest_before.max(Some(begun[next].1));
            next += 1;
        }
        if highest_before.is_some_and(|h| h > token) {
            decreasing_tokens.push(run.id.clone());
        }
    }

    let wrong_partition_outcomes = expected
        .iter()
        .filter(|e| {
            let s = status.get(e.run.as_str()).copied();
            if e.keeps {
                s != Some(0) || refused.contains(e.run.as_str())
            } else {
                s != Some(79)
            }
        })
        .map(|e| {
            format!(
                "{} (run {}, exit {:?})",
                e.fault,
                e.run,
                status.get(e.run.as_str())
            )
        })
        .collect();

    Report {
        completed: log.completed,
        overlaps,
        stale_refused: log.writes.iter().filter(|w| !w.accepted).count(),
        unjustified,
        repeated_tokens,
        decreasing_tokens,
        orphans: runs
            .iter()
            .filter(|r| r.orphan)
            .map(|r| r.id.clone())
            .collect(),
        wrong_partition_outcomes,
        worst_loss_to_exit: runs.iter().filter_map(|r| r.loss_to_exit).max(),
        ..Report::default()
    }
}
