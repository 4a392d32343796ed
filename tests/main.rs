//! dlock's integration tests: one crate, driving the real binary. Each store's tests are a folder
//! of their own, listed in `stores!` below; its own tests are built with its feature, the rest of
//! the folder (its servers, its description) in every build. The other tests assume the default
//! build (every backend).

mod support;

/// Declares each store's test folder, `tests/NAME/`: its servers, its `store.rs` (a `static STORE:
/// Store`, what the rest of the suite knows of it, and its targets) and its own tests; and lists
/// their descriptions in `STORES`.
macro_rules! stores {
    ($($folder:ident,)*) => {
        $(mod $folder;)*

        /// Every store, as its folder describes it.
        pub static STORES: &[&support::store::Store] = &[$(&$folder::store::STORE,)*];
    };
}

// In the order of the registry's `BACKENDS` (src/backend/registry.rs), as `--version` lists them.
stores! {
    file,
    redis,
    zk,
    etcd,
    postgres,
    mysql,
    // The elasticsearch backend's, on the OpenSearch node the tests start.
    opensearch,
}

mod cli;
mod config;
mod contract;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod cron_fleet;
mod docs_examples;
mod faults;
mod features;
mod flock_habits;
mod group_kill;
mod herd;
mod hold_closed;
mod hostile;
mod job_control;
mod manual;
mod many_waiters;
mod messages;
mod nested;
mod netfaults;
mod newcomer;
mod output;
mod run;
mod seams;
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod sql_last_runs;
mod start;
mod trusted_files;
