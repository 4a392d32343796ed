//! dlock's integration tests: one crate, driving the real binary.

mod support;

mod cli;
mod config;
mod contract;
mod docs_examples;
mod etcd;
mod etcd_secure;
mod faults;
mod file_backend;
mod file_default_dir;
mod file_entries;
mod file_interop;
mod file_tokens;
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
mod postgres;
mod postgres_late;
mod postgres_owners;
mod postgres_pooler;
mod postgres_tls;
mod redis;
mod run;
mod sentinel;
mod trusted_files;
mod zk;
