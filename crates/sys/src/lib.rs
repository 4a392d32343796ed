//! The Linux primitives dlock needs, behind safe functions: signal masks and handlers, alarms that
//! interrupt a thread's blocking call, the command's start (`spawn`) and its job control, the
//! guardian that kills the command's group when dlock dies, open file description locks, and the C
//! entry point. All of dlock's `unsafe` is here, each block one operation with its SAFETY note;
//! every other crate forbids it. The modules that need it say so below.

// `unsafe` only in the modules that allow it below, each for a call no safe crate offers.
#![deny(unsafe_code)]

// Linux system calls throughout, with no cheap portable fallback: clone(2) for the command and the
// guardian, open file description locks, /proc, a parent-death signal, thread-directed timers.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "dlock runs on Linux only: it starts the command with clone(2), locks files with open file \
     description locks, reads /proc and asks the kernel for a parent-death signal"
);

pub mod blocking;
// clone(2) with a stack of its own for the guardian, and raw descriptors in it.
#[allow(unsafe_code)]
pub mod guard;
pub mod job;
// fcntl(2)'s open file description locks, through libc.
#[allow(unsafe_code)]
pub mod ofd;
// Signal masks, handlers, sigwaitinfo, pthread_kill and thread-directed timers: libc only.
#[allow(unsafe_code)]
pub mod signal;
// clone(2) for the command, which then runs in dlock's memory until it execs.
#[allow(unsafe_code)]
pub mod spawn;
// poll(2) and open(2) on the standard descriptors before anything else.
#[allow(unsafe_code)]
pub mod start;
pub mod sync;

/// The program's C entry point, `main`, running `$run` (a `fn() -> u8`: the exit status) after
/// what Rust's own start would do that dlock needs (see start.rs): Rust's start would read
/// /proc/self/maps at every run. For a crate with `#![no_main]`; the attribute a C `main` needs to
/// keep its name is this crate's, so the binary forbids `unsafe` all the same.
#[macro_export]
macro_rules! c_main {
    ($run:path) => {
        /// The C entry point: what Rust's start would do that dlock needs, then the program.
        #[unsafe(no_mangle)]
        extern "C" fn main(
            _argc: ::std::ffi::c_int,
            _argv: *const *const ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            $crate::start::standard_descriptors();
            $crate::signal::ignore_broken_pipes();
            let status: u8 = $run();
            $crate::start::flush_stdout();
            status.into()
        }
    };
}
