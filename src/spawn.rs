//! Starting the command the way `posix_spawn` does (a `clone` that shares memory and suspends dlock
//! until the `exec`), because the command must also get what `posix_spawn` cannot give it: a death
//! signal tied to dlock (PR_SET_PDEATHSIG) and, on a terminal, the foreground. A plain `fork` would
//! do, but copying dlock's page tables and faulting them back in cost about a sixth of an
//! uncontended `dlock run`; see benches/file.rs.
//!
//! Between `clone` and `exec` the child shares dlock's memory, so it only calls async-signal-safe
//! functions on data prepared beforehand, and all signals stay blocked until it has reset the
//! handlers dlock installed.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::guard;

/// Dispositions dlock changed that the command must not inherit: Rust ignores SIGPIPE (std's own
/// `Command` resets it too), and dlock has a no-op handler on SIGURG. Every other disposition, an
/// ignored SIGHUP under nohup for one, passes through untouched.
const RESET_SIGNALS: [i32; 2] = [libc::SIGPIPE, libc::SIGURG];

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
    file_limit: Option<libc::rlimit>,
    parent: libc::pid_t,
    mask: libc::sigset_t,
    /// errno of a failed exec, written by the child before it exits.
    exec_error: AtomicI32,
}

/// Starts `program` (`command[0]` as `program::resolve` found it) with arguments `command` and with
/// `env` added to dlock's environment, in a new process group (recorded for the guardian, see
/// guard.rs), killed if dlock dies, and in the terminal's foreground if `foreground`. `file_limit`,
/// when given, is restored as its open-file limit, and `mask` as its signal mask. Returns its pid;
/// the caller reaps it.
pub fn spawn(
    program: &Path,
    command: &[String],
    env: &[(String, String)],
    foreground: bool,
    file_limit: Option<libc::rlimit>,
    mask: &libc::sigset_t,
) -> io::Result<libc::pid_t> {
    let program = cstring(program.as_os_str().to_owned().into_vec())?;
    let args: Vec<CString> = command
        .iter()
        .map(|a| cstring(a.clone().into_bytes()))
        .collect::<io::Result<_>>()?;
    let mut environment: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(name, _)| OsStr::new(name) == k))
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

    // SAFETY: sigset_t is plain data; the calls only fill it.
    let (all, mut parent_mask) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        (all, std::mem::zeroed::<libc::sigset_t>())
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
        // SAFETY: getpid cannot fail.
        parent: unsafe { libc::getpid() },
        mask: *mask,
        exec_error: AtomicI32::new(0),
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // SAFETY: the stack grows down from its (16-byte aligned) top, which stays allocated until the
    // clone returns, and CLONE_VFORK keeps us suspended until the child has exec'd or exited, so
    // `child` outlives every access the child makes.
    let pid = unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut parent_mask);
        let top = stack.as_mut_ptr().add(CHILD_STACK);
        let top = top.sub(top as usize % 16);
        let pid = libc::clone(
            child_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut child as *mut ChildArgs).cast(),
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &parent_mask, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        pid
    };
    match child.exec_error.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // The child exited without exec'ing: reap it (its group is gone with it, so the
            // guardian has nothing to kill) and report why.
            guard::disarm();
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's ChildArgs, alive while the parent is suspended; only
    // async-signal-safe calls follow.
    unsafe {
        let child = &*(arg as *const ChildArgs);
        for signal in RESET_SIGNALS {
            libc::signal(signal, libc::SIG_DFL);
        }
        // Its own process group, so signals reach the command and everything it starts; from
        // now on the guardian kills that group if dlock dies.
        libc::setpgid(0, 0);
        guard::arm(libc::getpid());
        if child.foreground {
            // Allowed from a background group because SIGTTOU is blocked here.
            libc::tcsetpgrp(0, libc::getpid());
        }
        // If dlock dies, even by SIGKILL, the command must not run on without the lock.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != child.parent {
            libc::_exit(127);
        }
        if let Some(limit) = &child.file_limit {
            libc::setrlimit(libc::RLIMIT_NOFILE, limit);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &child.mask, std::ptr::null_mut());
        libc::execve(
            child.program.as_ptr(),
            child.argv.as_ptr(),
            child.envp.as_ptr(),
        );
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(
                c"/bin/sh".as_ptr(),
                child.sh_argv.as_ptr(),
                child.envp.as_ptr(),
            );
        }
        child
            .exec_error
            .store(*libc::__errno_location(), Ordering::SeqCst);
        libc::_exit(127)
    }
}

fn cstring(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains a NUL byte"))
}
