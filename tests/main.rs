//! dlock's integration tests: one crate, driving the real binary.

mod support;

mod cli;
mod config;
mod contract;
mod etcd;
mod faults;
mod file_backend;
mod file_default_dir;
mod file_entries;
mod file_tokens;
mod flock_habits;
mod group_kill;
mod hostile;
mod job_control;
mod manual;
mod messages;
mod netfaults;
mod postgres;
mod redis;
mod run;
mod zk;
