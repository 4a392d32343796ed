//! From the parsed options to what the supervisor runs: the locks requested, in canonical
//! order, and the plan of a `run` or a `hold`.

use std::time::Duration;

use super::{GlobalArgs, HoldArgs, LockArgs, RunArgs};
use crate::failure::FromStore;
use crate::failure::{FailWith, Failure};
use crate::lock::{new_owner_id, tree_locks, LockName, LockRequest, Mode};
use crate::supervise::RunPlan;

impl HoldArgs {
    /// The plan `run` would make for the same options, with no command.
    pub fn plan(&self, global: &GlobalArgs) -> anyhow::Result<RunPlan> {
        self.lock.plan(global, Vec::new(), Duration::ZERO)
    }
}

/// A name from the command line, or a usage error naming what is wrong with it.
pub fn lock_name(raw: &str) -> anyhow::Result<LockName> {
    LockName::new(raw).fail_with(Failure::Usage)
}

impl RunArgs {
    /// The plain plan the supervisor runs (see `LockArgs::plan`).
    pub fn plan(&self, global: &GlobalArgs) -> anyhow::Result<RunPlan> {
        let command = match &self.shell_command {
            Some(script) => vec![shell()?, "-c".into(), script.clone()],
            None => self.command.clone(),
        };
        let mut plan = self.lock.plan(global, command, self.kill_after)?;
        plan.release_on_failure = self.release_on_failure;
        plan.group = crate::supervise::Group {
            supersede: self.supersede,
            cancel_in_progress: self.cancel_in_progress,
        };
        let option = match (self.supersede, self.cancel_in_progress) {
            (true, _) => "--supersede (DLOCK_SUPERSEDE)",
            (_, true) => "--cancel-in-progress (DLOCK_CANCEL_IN_PROGRESS)",
            _ => return Ok(plan),
        };
        if !global.backend.descriptor().groups {
            return Err(anyhow::anyhow!(
                "{option} is not available with the {} backend yet",
                global.backend.as_str()
            ))
            .fail_with(Failure::Usage);
        }
        Ok(plan)
    }
}

impl LockArgs {
    /// Says once, on stderr, that a name written as a path (flock's `/var/lock/x.lock`) is a lock
    /// name of dlock's, which flock(1) on that file does not see; not for `--tree`, whose names are
    /// paths by design.
    pub fn note_path_names(&self, report: &crate::report::Reporter) {
        if self.tree {
            return;
        }
        let looks_like_a_path =
            |name: &&String| ["/", "./", "../", "~/"].iter().any(|p| name.starts_with(p));
        if let Some(name) = self.names.iter().find(looks_like_a_path) {
            report.notice(&format!(
                "{name:?} is a dlock lock name, not the file flock(1) locks: flock on that path \
                 does not exclude it (`dlock status NAME` shows where it is kept)"
            ));
        }
    }

    pub fn mode(&self) -> Mode {
        match (self.shared, self.limit) {
            (true, _) => Mode::Shared,
            (_, Some(n)) => Mode::Limit(n),
            _ => Mode::Exclusive,
        }
    }

    /// The plain plan the supervisor runs: names validated, expanded for --tree, deduplicated
    /// (keeping the strongest mode asked for a name) and put in canonical, sorted order, so two
    /// dlocks asking for the same set in different orders cannot deadlock.
    pub fn plan(
        &self,
        global: &GlobalArgs,
        command: Vec<String>,
        kill_after: Duration,
    ) -> anyhow::Result<RunPlan> {
        let owner = new_owner_id().or_store()?;
        let mut wanted: Vec<(LockName, Mode)> = Vec::new();
        for raw in &self.names {
            if self.tree {
                wanted.extend(tree_locks(raw, self.mode()).fail_with(Failure::Usage)?);
            } else {
                wanted.push((lock_name(raw)?, self.mode()));
            }
        }
        // Exclusive sorts after shared for one name, so the last of each run is the strongest.
        wanted.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then((a.1 == Mode::Exclusive).cmp(&(b.1 == Mode::Exclusive)))
        });
        wanted.reverse();
        wanted.dedup_by(|a, b| a.0 == b.0);
        wanted.reverse();
        let requests = wanted
            .into_iter()
            .map(|(name, mode)| LockRequest {
                name,
                mode,
                ttl: self.ttl,
                owner: owner.clone(),
                // An empty message (DLOCK_MESSAGE= set fleet-wide) is none.
                message: self.message.clone().filter(|m| !m.is_empty()),
                // 0 (DLOCK_MIN_HOLD=0 set fleet-wide, overridden per job) is none.
                min_hold: self.min_hold.filter(|d| !d.is_zero()),
            })
            .collect();
        let mut backend = global.backend_config();
        backend.store.create = true;
        Ok(RunPlan {
            backend,
            requests,
            command,
            no_wait: self.no_wait,
            wait: self.wait,
            conflict_exit_code: self.conflict_exit_code,
            kill_after,
            progress_every: self.progress_every,
            place: global.place.clone(),
            release_on_failure: false,
            group: Default::default(),
        })
    }
}

/// The shell `-c` runs its command with, as flock(1) picks it: $SHELL, or /bin/sh when SHELL is
/// unset or empty. It is also the command's `$0`.
fn shell() -> anyhow::Result<String> {
    match std::env::var_os("SHELL") {
        Some(shell) if !shell.is_empty() => shell
            .into_string()
            .map_err(|shell| anyhow::anyhow!("SHELL is not valid UTF-8: {shell:?}"))
            .fail_with(Failure::Usage),
        _ => Ok("/bin/sh".into()),
    }
}
