//! The last runs, as the scripts keep them in the lock's document (`last_run`, `last_success`,
//! dated by the node's clock): read with the document; listed by a search of the index.

use super::doc::Doc;
use super::recipe::{lock, Fault, Shared};
use dlock_core::backend::RunsFound;
use dlock_core::lock::last_run::RUN_RECORD_KEPT_FOR;
use dlock_core::lock::{LastRuns, LockName};

/// How far ahead of this host's clock a record the node dated may be (clocks kept in step by
/// NTP).
const NODE_CLOCK_SKEW: std::time::Duration = std::time::Duration::from_secs(1);

/// `runs` as read now: a record dated after now is unreadable, and records older than
/// `RUN_RECORD_KEPT_FOR` are gone.
fn judged(runs: LastRuns) -> LastRuns {
    let now = std::time::SystemTime::now();
    let runs = runs.judged_at(now, NODE_CLOCK_SKEW);
    let latest = [&runs.last_run, &runs.last_success]
        .into_iter()
        .flatten()
        .filter_map(|r| r.ended.max(r.acquired))
        .max();
    let expired = latest.is_some_and(|t| {
        now.duration_since(t)
            .is_ok_and(|age| age > RUN_RECORD_KEPT_FOR)
    });
    if expired {
        return LastRuns::default();
    }
    runs
}

pub(super) fn last_runs(store: &Shared, name: &LockName) -> Result<LastRuns, Fault> {
    let mut store = lock(store);
    let budget = store.connect_timeout();
    Ok(store
        .get(name, budget)?
        .map_or_else(LastRuns::default, |doc| judged(doc.runs)))
}

pub(super) fn list_runs(store: &Shared, prefix: &str) -> Result<RunsFound, Fault> {
    let (docs, cut) = {
        let mut store = lock(store);
        let budget = store.connect_timeout();
        store.all(budget)?
    };
    let mut runs: Vec<(LockName, LastRuns)> = docs
        .into_iter()
        .filter(|(id, _)| id.starts_with(prefix))
        .filter_map(|(id, source)| {
            let name = LockName::new(&id).ok()?;
            let runs = judged(Doc::of(&source).runs);
            (runs.last_run.is_some() || runs.last_success.is_some()).then_some((name, runs))
        })
        .collect();
    runs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(RunsFound { runs, cut })
}
