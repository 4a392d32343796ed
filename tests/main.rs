//! dlock's integration tests: one crate, driving the real binary.

mod support;

mod cli;
mod contract;
mod faults;
mod file_backend;
mod group_kill;
mod job_control;
mod multi;
mod redis;
mod run;
mod zk;
