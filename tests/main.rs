//! dlock's integration tests: one crate, driving the real binary. A backend's own tests (in its
//! folder, which every build compiles for its helpers) are built with its feature; the rest assume
//! the default build (every backend).

mod support;

mod cli;
mod config;
mod contract;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod cron_fleet;
mod docs_examples;
mod etcd;
mod faults;
mod features;
mod file;
mod flock_habits;
mod group_kill;
mod herd;
mod hold_closed;
mod hostile;
mod job_control;
mod manual;
mod many_waiters;
mod messages;
mod mysql;
mod nested;
mod netfaults;
mod newcomer;
mod opensearch;
mod output;
mod postgres;
mod redis;
mod run;
mod seams;
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod sql_last_runs;
mod start;
mod trusted_files;
mod zk;
