//! Starting the command the way `posix_spawn` does (a `clone` that shares memory and suspends dlock
//! until the `exec`), because the command must also get what `posix_spawn` cannot give it: a death
//! signal tied to dlock (PR_SET_PDEATHSIG) and, on a terminal, the foreground. A plain `fork` would
//! do, but copying dlock's page tables and faulting them back in costs 7-10 % more CPU per
//! uncontended `dlock run -- true` (about 0.2 ms and 50 page faults in the release build) and
//! 5-16 % of the 8-way contended rate: benches/spawn.rs measures the two side by side (the
//! `fork-spawn` feature builds the `fork` one).
//!
//! Between `clone` and `exec` the child shares dlock's memory, so it only calls async-signal-safe
//! functions on data prepared beforehand (raw system calls, rustix's, where it can), and all
//! signals stay blocked until it has reset the handlers dlock installed (see signal/mod.rs).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::process::{Pid, Resource, Rlimit, Signal};

use crate::guard;
use crate::signal::mask::{self, Masked, SigSet};

#[cfg(not(feature = "fork-spawn"))]
const CHILD_STACK: usize = 64 * 1024;

/// What the child needs, prepared by the parent: nothing is allocated after `clone`.
struct ChildArgs {
    program: CString,
    argv: Vec<*const libc::c_char>,
    /// `/bin/sh program args...`, for a file the kernel does not know how to run (ENOEXEC): a
    /// script without `#!` runs under the shell, as execvp and flock(1) run it.
    sh_argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    foreground: bool,
    file_limit: Option<Rlimit>,
    parent: Pid,
    mask: SigSet,
    /// errno of a failed exec, written by the child before it exits.
    exec_error: AtomicI32,
}

/// Starts `program` (`command[0]` as `program::resolve` found it) with arguments `command` and with
/// `env` added to dlock's environment, in a new process group (recorded for the guardian, see
/// guard.rs), killed if dlock dies, and in the terminal's foreground if `foreground`. `file_limit`,
/// when given, is restored as its open-file limit, and `mask` as its signal mask. The variables of
/// dlock's environment that `withheld` names are left out. Returns its pid; the caller reaps it.
pub fn spawn(
    program: &Path,
    command: &[String],
    env: &[(String, String)],
    withheld: impl Fn(&OsStr) -> bool,
    foreground: bool,
    file_limit: Option<Rlimit>,
    mask: &SigSet,
) -> io::Result<libc::pid_t> {
    let program = cstring(program.as_os_str().to_owned().into_vec())?;
    let args: Vec<CString> = command
        .iter()
        .map(|a| cstring(a.clone().into_bytes()))
        .collect::<io::Result<_>>()?;
    let mut environment: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(name, _)| OsStr::new(name) == k))
        .filter(|(k, _)| !withheld(k))
        .collect();
    environment.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    let vars: Vec<CString> = environment
        .into_iter()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            cstring(kv)
        })
        .collect::<io::Result<_>>()?;
    let null_terminated = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };

    let mut sh_argv = vec![c"/bin/sh".as_ptr(), program.as_ptr()];
    sh_argv.extend(null_terminated(&args[1..]));
    let mut child = ChildArgs {
        argv: null_terminated(&args),
        sh_argv,
        program,
        envp: null_terminated(&vars),
        foreground,
        file_limit,
        parent: rustix::process::getpid(),
        mask: *mask,
        exec_error: AtomicI32::new(0),
    };
    let all_blocked = Masked::blocking_all()?;
    let started = start(&mut child);
    drop(all_blocked);
    let pid = started?;
    match child.exec_error.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // The child exited without exec'ing: reap it (its group is gone with it, so the
            // guardian has nothing to kill) and report why.
            guard::disarm();
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            }
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// Starts the command's process with every signal blocked (the caller blocks them) and returns
/// its pid once it has exec'd or failed to (then with `exec_error` set): a `clone` that shares
/// dlock's memory and suspends dlock until then, as `posix_spawn` does.
#[cfg(not(feature = "fork-spawn"))]
fn start(child: &mut ChildArgs) -> io::Result<libc::pid_t> {
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down from its top, aligned to 16 bytes.
    let top = stack.as_mut_ptr_range().end;
    let top = top.wrapping_sub(top as usize % 16);
    // SAFETY: the stack stays allocated until the clone returns, and CLONE_VFORK keeps us
    // suspended until the child has exec'd or exited, so `child` outlives every access the child
    // makes.
    let pid = unsafe {
        libc::clone(
            child_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (child as *mut ChildArgs).cast(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// The plain way, for benches/spawn.rs only (feature `fork-spawn`): `fork`, the same steps in the
/// child, and the exec's errno back through a close-on-exec pipe, as std's `Command` does. The
/// child's own `guard::arm` lands in its copy of dlock's memory, so the parent records the group
/// for the guardian as soon as `fork` returns.
#[cfg(feature = "fork-spawn")]
fn start(child: &mut ChildArgs) -> io::Result<libc::pid_t> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let (mut reader, writer) = io::pipe()?;
    // SAFETY: the child makes only async-signal-safe calls before it execs or exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let errno = child_steps(child);
        // SAFETY: writing 4 bytes from the stack to our own pipe, then ending at once.
        unsafe {
            libc::write(writer.as_raw_fd(), (&errno as *const i32).cast(), 4);
            libc::_exit(127)
        }
    }
    guard::arm(pid);
    drop(writer);
    // End of file, nothing read: the command exec'd (or ended before trying, as in the clone
    // variant).
    let mut errno = [0u8; 4];
    if reader.read_exact(&mut errno).is_ok() {
        child
            .exec_error
            .store(i32::from_ne_bytes(errno), Ordering::SeqCst);
    }
    Ok(pid)
}

#[cfg(not(feature = "fork-spawn"))]
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's ChildArgs, alive while the parent is suspended.
    let child = unsafe { &*(arg as *const ChildArgs) };
    let errno = child_steps(child);
    child.exec_error.store(errno, Ordering::SeqCst);
    // SAFETY: _exit ends this process at once, with no clean-up in shared memory.
    unsafe { libc::_exit(127) }
}

/// The command's process from its start to its `exec`; returns only if the exec failed, with its
/// errno.
fn child_steps(child: &ChildArgs) -> libc::c_int {
    // Only async-signal-safe calls from here on.
    mask::reset_dispositions_in_child();
    // Its own process group, so signals reach the command and everything it starts; from now on
    // the guardian kills that group if dlock dies.
    let _ = rustix::process::setpgid(None, None);
    let own = rustix::process::getpid();
    guard::arm(own.as_raw_pid());
    if child.foreground {
        // Allowed from a background group because SIGTTOU is blocked here.
        let _ = rustix::termios::tcsetpgrp(rustix::stdio::stdin(), own);
    }
    // If dlock dies, even by SIGKILL, the command must not run on without the lock.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    if rustix::process::getppid() != Some(child.parent) {
        // SAFETY: _exit ends this process at once, with no clean-up in shared memory.
        unsafe { libc::_exit(127) };
    }
    if let Some(limit) = child.file_limit {
        let _ = rustix::process::setrlimit(Resource::Nofile, limit);
    }
    mask::restore_in_child(&child.mask);
    // SAFETY: NUL-terminated strings and arrays of them, prepared by the parent and alive.
    unsafe {
        libc::execve(
            child.program.as_ptr(),
            child.argv.as_ptr(),
            child.envp.as_ptr(),
        )
    };
    if io::Error::last_os_error().raw_os_error() == Some(libc::ENOEXEC) {
        // SAFETY: as above.
        unsafe {
            libc::execve(
                c"/bin/sh".as_ptr(),
                child.sh_argv.as_ptr(),
                child.envp.as_ptr(),
            )
        };
    }
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENOEXEC)
}

fn cstring(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte"))
}
