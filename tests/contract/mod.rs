//! The contract every backend owes the user, written once and run on each backend: exit statuses,
//! tokens, modes, several names, trees, waiting, signals, status/list/release, a lost lock, nested
//! runs, `hold` in a script, concurrency groups and hostile input, a file per area. Each scenario is a plain function
//! taking the `Target` it runs on, and names the behaviour it checks.
//!
//! The backends are listed once, in `contract!` below: the file backend in a directory of its own,
//! Redis on one server, Redlock on three, Sentinel, a Redis Cluster, ZooKeeper, PostgreSQL, etcd
//! and MySQL. The servers are the suite's, shared by the whole test run, each target in a
//! namespace of its own (`Target::suite_NAME`, in the store's test folder `tests/NAME/`; see
//! `support::suite_servers`).
//! Adding a backend is one line there, its name and how to make its `Target`; every scenario then
//! runs on it as `contract::BACKEND::AREA::SCENARIO` (`cargo test contract::zk::` runs one
//! backend, `cargo test one_wait_budget` one scenario on all). Adding a scenario is a `pub fn` in
//! its area's file and its name in the list below. A scenario asks its target what the store can
//! do (`Target::caps`, declared once a store in its folder's `store.rs`; `support::caps` says
//! what each means), never which store it is. A scenario that a backend cannot support is a row of the table in `scenario_test!`, with the
//! reason, and has no test on that backend; no scenario returns early on a backend. A scenario dlock refuses while reading its command line,
//! before it reaches any backend, is listed under `once` and runs a single time
//! (`contract::once::AREA::SCENARIO`).
//!
//! What tests one backend's own mechanism (Redis keys, ZooKeeper nodes, flock(1), a server that is
//! stopped or restarted) stays in that backend's file. The fault checker (`faults/`) has a
//! one-line-per-backend list of its own: it needs private servers that it may stop, a lease per
//! backend and the ZooKeeper ensemble.

mod exit_codes;
mod groups;
mod hold;
mod hostile;
mod last_run;
mod lost_lease;
pub(crate) mod min_hold;
mod modes;
mod names;
mod reentry;
mod signals;
mod status;
mod tokens;
mod trees;
mod waiting;
mod who;

use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::gate::Gate;
use crate::support::target::Target;
use crate::support::*;

/// How long any one step of a scenario may take on a loaded machine before it fails.
pub const T: Duration = Duration::from_secs(120);

/// For each backend, a module of tests, one per scenario of every area:
/// `backend => how to make its Target`; and `once`, the scenarios that never reach a backend's
/// server, run a single time on the file backend.
macro_rules! contract {
    (
        backends: { $($backend:ident => $target:expr,)* }
        once: $once:tt
        scenarios: $scenarios:tt
    ) => {
        $(
            mod $backend {
                use crate::support::target::Target;

                fn target() -> Target {
                    $target
                }

                scenario_tests!($backend, $scenarios);
            }
        )*

        /// The scenarios refused while dlock reads its command line, before any backend is
        /// chosen: running them on each backend would test the same code nine times.
        mod once {
            use crate::support::target::Target;

            fn target() -> Target {
                Target::file_backend()
            }

            scenario_tests!(once, $once);
        }
    };
}

/// `mod AREA { SCENARIO tests }` for one backend.
macro_rules! scenario_tests {
    ($backend:ident, { $($area:ident: [$($scenario:ident),* $(,)?],)* }) => {
        $(
            mod $area {
                $(scenario_test!($backend, $area, $scenario);)*
            }
        )*
    };
}

/// The test of one scenario on one backend, calling `contract::AREA::SCENARIO` with the backend's
/// target. Every scenario runs on every backend, except those in the table below: a backend that
/// fails a scenario is fixed, not excused, and a scenario never returns early on a backend.
///
/// The table of what a backend cannot support, one arm a (backend, area, scenario), each with
/// its reason: no test is generated for it, so none passes without testing anything; where it is
/// cheap, a test that the backend really cannot takes its place. The arm names the scenario's
/// function, so renaming a scenario without its row fails to compile.
macro_rules! scenario_test {
    (file, min_hold, a_callers_wrong_clock_cannot_shorten_it) => {
        unsupported!(
            min_hold::a_callers_wrong_clock_cannot_shorten_it,
            "the file backend has no server: the host's clock judges a min-hold, by design"
        );
        // That it really cannot: a wrong clock does shorten a min-hold there.
        scenario_test!(
            file,
            min_hold,
            a_callers_wrong_clock_does_shorten_it_on_the_file_backend
        );
    };
    (file, min_hold, a_callers_fast_clock_cannot_shorten_it) => {
        unsupported!(
            min_hold::a_callers_fast_clock_cannot_shorten_it,
            "the file backend has no server: the host's clock judges a min-hold, by design"
        );
    };
    (file, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "the file backend keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (redis, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "redis keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (sentinel, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "sentinel keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (cluster, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "cluster keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (postgres, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "postgres keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (mysql, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "mysql keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (etcd, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "etcd keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (zk, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "zk keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    (elasticsearch, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        unsupported!(
            groups::the_options_are_refused_where_the_store_keeps_no_groups,
            "elasticsearch keeps concurrency group records: every other groups scenario runs on it"
        );
    };
    ($backend:ident, groups, the_options_are_refused_where_the_store_keeps_no_groups) => {
        #[test]
        fn the_options_are_refused_where_the_store_keeps_no_groups() {
            crate::contract::groups::the_options_are_refused_where_the_store_keeps_no_groups(
                &super::target(),
            );
        }
    };
    (redlock, groups, $scenario:ident) => {
        unsupported!(
            groups::$scenario,
            "Redlock keeps no concurrency group records yet (each server would keep its own): run \
             refuses the options (64), which \
             groups::the_options_are_refused_where_the_store_keeps_no_groups checks"
        );
    };
    ($backend:ident, $area:ident, $scenario:ident) => {
        #[test]
        fn $scenario() {
            crate::contract::$area::$scenario(&super::target());
        }
    };
}

/// A row of the table of unsupported scenarios: the scenario must exist, and its reason is kept
/// with it in the code.
macro_rules! unsupported {
    ($area:ident :: $scenario:ident, $reason:literal) => {
        const _: (fn(&crate::support::target::Target), &str) =
            (crate::contract::$area::$scenario, $reason);
    };
}

contract! {
    // One line a backend: the name its tests go by, and how to make a Target on it for one test.
    backends: {
        file => Target::file_backend(),
        redis => Target::suite_redis(),
        redlock => Target::suite_redlock(),
        sentinel => Target::suite_sentinel(),
        cluster => Target::suite_cluster(),
        zk => Target::suite_zk(),
        postgres => Target::suite_postgres(),
        etcd => Target::suite_etcd(),
        mysql => Target::suite_mysql(),
        elasticsearch => Target::suite_elasticsearch(),
    }
    once: {
        trees: [tree_paths_with_dotdot_are_refused],
        who: [a_message_with_control_characters_or_over_256_bytes_is_a_usage_error],
    }
    scenarios: {
        exit_codes: [
            child_exit_status_passes_through,
            child_killed_by_signal_n_gives_128_plus_n,
            a_command_that_cannot_run_is_refused_before_the_lock_is_taken,
            busy_lock_exits_75_or_the_conflict_code_without_running_the_child,
            a_ttl_longer_than_servers_count_is_a_usage_error,
        ],
        tokens: [
            tokens_increase_and_the_child_learns_its_lock,
            tokens_keep_increasing_after_a_holder_is_killed,
            a_token_is_taken_at_the_grant_not_when_the_line_is_joined,
            status_shows_the_token_a_holder_that_waited_got,
        ],
        modes: [
            contenders_lose_no_update,
            exclusive_holders_never_overlap,
            shared_holders_run_together,
            limit_3_never_has_more_than_3_and_does_reach_3,
            a_shared_holder_excludes_an_exclusive_one_and_admits_readers,
            limit_2_admits_two_holders_and_queues_the_third_until_a_seat_frees,
            a_release_hands_the_lock_to_all_the_readers_first_in_line_at_once,
        ],
        names: [
            opposite_orders_never_deadlock,
            a_busy_name_leaves_nothing_of_the_set_held,
            each_name_gets_its_own_token_variable,
            held_names_stay_held_while_waiting_for_the_rest,
        ],
        trees: [
            tree_siblings_run_together_and_ancestors_exclude_descendants,
        ],
        waiting: [
            one_wait_budget_covers_the_whole_set,
            a_release_wakes_the_next_waiter_at_once,
            on_a_terminal_the_waiting_line_fits_the_width_and_is_erased,
            in_a_log_a_wait_says_who_holds_then_how_long_it_has_waited,
        ],
        signals: [
            signals_are_forwarded_to_the_child_and_its_status_returned,
            signal_while_waiting_ends_the_wait_with_128_plus_n_and_leaves_nothing,
            sigkill_of_dlock_kills_the_child_and_frees_the_lock,
            no_thread_but_the_main_one_takes_a_signal,
        ],
        status: [
            status_list_and_forced_release_end_the_holders_run_with_79,
            verbose_reports_waiting_acquired_renewed_and_exited_with_timestamps,
        ],
        lost_lease: [
            a_run_whose_lock_was_lost_before_the_command_ended_exits_79,
        ],
        reentry: [
            nested_run_of_a_held_lock_runs_directly_instead_of_deadlocking,
            a_held_variable_copied_from_a_finished_holder_does_not_skip_the_lock,
            a_typed_variable_naming_the_real_holder_does_not_skip_the_lock,
            a_daemon_left_behind_by_its_dlock_acquires_normally,
            a_parent_that_lost_its_lock_no_longer_covers_a_nested_run,
            nested_exclusive_inside_shared_is_refused,
            the_mode_in_the_backends_record_decides,
            a_tree_ancestor_held_shared_does_not_cover_an_exclusive_nested_run,
            a_deeper_tree_path_inside_a_held_one_runs_beside_other_subtrees,
            a_limit_seat_covers_a_nested_limit_and_shared_run,
            a_mixed_set_skips_the_covered_locks_and_takes_the_others,
            an_impossible_lock_fails_the_whole_set_before_anything_is_taken,
            a_malformed_or_oversized_held_variable_is_ignored,
        ],
        who: [
            a_message_is_shown_by_status_list_their_json_and_waiters,
            status_and_list_show_the_lease_end_and_the_waiters_in_order,
        ],
        hold: [
            a_held_lock_keeps_others_out_until_the_script_ends_and_carries_its_token,
            sigkill_of_the_script_frees_its_hold,
            release_gives_the_hold_up_early_and_a_second_release_exits_1,
            release_without_a_hold_exits_1_and_points_to_force,
            a_lost_hold_sends_the_shell_sigterm_and_release_then_exits_79,
            a_hold_keeps_its_message_for_status,
            status_names_the_scripts_shell_not_the_keeper,
            a_run_inside_the_script_runs_under_its_hold,
        ],
        min_hold: [
            run_exits_at_once_and_the_lock_stays_busy_until_min_hold_after_acquisition,
            status_and_list_show_kept_until_and_why,
            kept_until_reads_the_same_every_time,
            release_force_ends_a_min_hold_at_once,
            hold_with_min_hold_stays_taken_after_release,
            dlock_min_hold_from_the_environment_and_the_flag_beating_it,
            a_callers_wrong_clock_cannot_shorten_it,
            a_callers_fast_clock_cannot_shorten_it,
            limit_holders_keep_their_seats_and_shared_ones_still_join,
            a_command_longer_than_the_min_hold_keeps_the_lock_to_its_end_then_frees_it,
            a_holder_that_dies_keeps_the_lock_until_the_min_hold_ends,
        ],
        last_run: [
            a_run_is_running_while_it_holds_then_ended_and_the_last_success,
            a_failed_run_is_the_last_run_and_the_success_before_it_stays,
            a_run_ended_by_a_signal_records_the_signal,
            a_run_forced_away_records_forced,
            a_run_that_lost_its_lock_leaves_the_later_runs_record_alone,
            a_holder_killed_with_sigkill_never_ended_once_its_lease_passed,
            a_hold_released_succeeds_and_one_whose_shell_exits_does_not,
            release_on_failure_frees_a_min_hold_lock_after_a_failure_only,
            ran_within_is_0_ok_1_too_long_ago_2_never_succeeded,
            ran_within_is_3_unknown_when_the_store_cannot_be_reached,
            a_run_that_lost_its_lock_before_its_command_succeeded_ends_lost,
            list_runs_shows_every_lock_that_ran_held_or_free_and_how_each_ended,
            a_run_by_a_clock_30_days_ahead_is_never_a_recent_success,
        ],
        groups: [
            a_newer_supersede_waiter_makes_the_older_give_up_with_80,
            supersede_with_several_names_and_a_plain_waiter_untouched,
            cancel_in_progress_ends_the_holder_and_the_asker_runs_next,
            a_holder_without_the_option_is_not_cancelled,
            a_lock_kept_by_min_hold_after_its_command_has_nothing_to_cancel,
            cancel_with_several_names_is_all_or_none,
            a_shared_holder_is_cancelled_only_by_an_exclusive_request,
            crossing_requests_never_make_two_holders_or_repeat_a_token,
            a_request_to_cancel_reaches_the_holder_soon,
            the_options_are_refused_where_the_store_keeps_no_groups,
        ],
        hostile: [
            a_forged_record_is_unreadable_and_the_lock_stays_busy,
            a_forged_message_is_unreadable_and_never_reaches_a_terminal,
            output_into_a_closed_pipe_ends_quietly_with_the_usual_status,
            names_outside_the_basic_multilingual_plane_work,
        ],
    }
}

/// Holders started so far, to name their marker files apart.
static HOLDERS: AtomicUsize = AtomicUsize::new(0);

/// A `dlock run` holding its locks in the background until `let_go`: its command records its pid
/// and token, then waits (a minute at most) for a file the test writes. Killed if dropped while
/// still running, so a failed scenario leaves no holder behind.
pub struct Holding {
    pub dlock: Child,
    marker: PathBuf,
    go: Gate,
    err: PathBuf,
}

impl Holding {
    /// `dlock run RUN -- <hold>`, `RUN` being the options and names; returns once the command
    /// runs. The command waits at a gate for `let_go` (or the holder's drop), ten minutes at
    /// most: a long scenario on a loaded machine must not find its holder gone.
    pub fn start(t: &Target, run: &[&str]) -> Holding {
        let n = HOLDERS.fetch_add(1, Ordering::SeqCst);
        let (marker, go, err) = (
            t.scratch.file(&format!("holder{n}.in")),
            Gate::at(t.scratch.file(&format!("holder{n}.go"))),
            t.scratch.file(&format!("holder{n}.err")),
        );
        let script = format!(
            "echo \"$$ $DLOCK_TOKEN\" > '{m}.tmp'; mv '{m}.tmp' '{m}'; {wait}",
            m = marker.display(),
            wait = go.wait_in_shell()
        );
        let mut args = vec!["run"];
        args.extend_from_slice(run);
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        let dlock = t
            .dlock(&args)
            .stderr(std::fs::File::create(&err).expect("holder's stderr file"))
            .spawn()
            .expect("start a holder");
        let holding = Holding {
            dlock,
            marker,
            go,
            err,
        };
        wait_for_file(&holding.marker, T);
        holding
    }

    fn recorded(&self, field: usize) -> u64 {
        let text = std::fs::read_to_string(&self.marker).expect("holder's marker");
        text.split_whitespace()
            .nth(field)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("no pid and token in {text:?}"))
    }

    /// The holder's command.
    pub fn command(&self) -> u32 {
        self.recorded(0) as u32
    }

    /// The token the holder's command got.
    pub fn token(&self) -> u64 {
        self.recorded(1)
    }

    /// What the holder's dlock said so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Lets the command end and waits for dlock.
    pub fn let_go(mut self) -> ExitStatus {
        self.go.open(&mut self.dlock);
        wait_exit(&mut self.dlock, T)
    }

    /// Waits for dlock to end without letting the command go (it was signalled or lost its
    /// lock); returns its status and what it said.
    /// Whether the holder's dlock is still running (holding, unless it lost the lock).
    pub fn is_running(&mut self) -> bool {
        matches!(self.dlock.try_wait(), Ok(None))
    }

    pub fn finish(mut self) -> (ExitStatus, String) {
        if let Some(status) = exit_within(&mut self.dlock, T) {
            return (status, self.stderr());
        }
        // What a hang leaves to go on: what dlock said, and whether its command still runs.
        let command = self.command();
        let _ = self.dlock.kill();
        let _ = self.dlock.wait();
        panic!(
            "dlock (pid {}) did not exit within {T:?}; its command (pid {command}) is {}; it said:\n{}",
            self.dlock.id(),
            if alive(command) { "still running" } else { "gone" },
            self.stderr()
        );
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Ok(None) = self.dlock.try_wait() {
            let _ = self.dlock.kill();
            let _ = self.dlock.wait();
        }
    }
}

/// `dlock -v ARGS` in the background, returned once it says it waits for a lock.
pub fn waiting(t: &Target, args: &[&str]) -> crate::support::watched::Watched {
    let mut all = vec!["-v"];
    all.extend_from_slice(args);
    let mut waiter = crate::support::watched::Watched::start(t.dlock(&all));
    waiter.wait_for("waiting for lock", T);
    waiter
}
