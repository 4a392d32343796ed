//! dlock's integration tests: one crate, driving the real binary.

mod support;

mod cli;
mod file_backend;
mod redis;
mod run;
