//! dlock's integration tests: one crate, driving the real binary.

mod support;

mod cli;
mod contract;
mod faults;
mod file_backend;
mod multi;
mod redis;
mod reentry;
mod run;
mod zk;
