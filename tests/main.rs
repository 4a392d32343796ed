//! dlock's integration tests: one crate, driving the real binary.

mod support;

mod cli;
mod contract;
mod faults;
mod file_backend;
mod multi;
mod netfaults;
mod redis;
mod run;
mod zk;
