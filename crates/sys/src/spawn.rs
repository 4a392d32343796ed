//! Starting the command the way `posix_spawn` does (a `clone` that shares memory and suspends dlock
//! until the `exec`), because the command must also get what `posix_spawn` cannot give it: a death
//! signal tied to dlock (PR_SET_PDEATHSIG), its group recorded for the guardian and its open-file
//! limit restored before `exec` (and, on a terminal, the foreground, which glibc's gives since 2.35
//! as an extension). A plain `fork` would do, but copying dlock's page tables and faulting them back
//! in costs 0-10 % more CPU per uncontended `dlock run -- true` (35-50 page faults more in the
//! release build) and up to 19 % of the 8-way contended rate, over ten runs: benches/spawn.rs
//! measures the three side by side (the `fork-spawn` and `posix-spawn` features build the other
//! two).
//!
//! Beside glibc's `posix_spawn` it is no faster (posix_spawn/clone 0.94-1.00 wall and CPU per
//! uncontended run, 0.93-1.06 of the contended rate, five runs, docs/SPEED.md): those guarantees,
//! not speed, keep it. (A dlock killed between `posix_spawn`'s return and the group's record would
//! leave the command running without its lock.)
//!
//! Between `clone` and `exec` the child shares dlock's memory, so it only calls async-signal-safe
//! functions on data prepared beforehand (raw system calls, rustix's, where it can), and all
//! signals stay blocked until it has reset the handlers dlock installed (see signal/mod.rs).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::process::{Pid, Rlimit};
#[cfg(not(feature = "posix-spawn"))]
use rustix::process::{Resource, Signal};

use crate::guard;
use crate::signal::mask::SigSet;
#[cfg(not(feature = "posix-spawn"))]
use crate::signal::mask::{self, Masked};

#[cfg(not(any(feature = "fork-spawn", feature = "posix-spawn")))]
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
    #[cfg(not(feature = "posix-spawn"))]
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
        #[cfg(not(feature = "posix-spawn"))]
        parent: rustix::process::getpid(),
        mask: *mask,
        exec_error: AtomicI32::new(0),
    };
    // posix_spawn blocks every signal around its own clone.
    #[cfg(not(feature = "posix-spawn"))]
    let all_blocked = Masked::blocking_all()?;
    let started = start(&mut child);
    #[cfg(not(feature = "posix-spawn"))]
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
#[cfg(not(any(feature = "fork-spawn", feature = "posix-spawn")))]
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
#[cfg(all(feature = "fork-spawn", not(feature = "posix-spawn")))]
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

/// For benches/spawn.rs only (feature `posix-spawn`): the C library's `posix_spawn`, which in glibc
/// is itself a `clone(CLONE_VM|CLONE_VFORK)` on a stack it maps for the call, asked for what it can
/// do of the child's steps: its own process group, the dispositions dlock changed reset, the mask
/// dlock started with, and (glibc 2.35's extension) the terminal's foreground. What it cannot do is
/// done from here, after it returns, that is after the command's `exec`:
/// - no death signal (PR_SET_PDEATHSIG can only be asked for by the process itself): the guardian
///   alone kills the command's group if dlock dies, so the two ways that end the guardian with
///   dlock (the OOM killer choosing dlock, dlock dumping core; see guard.rs) leave the command
///   running, and so does dlock dying before posix_spawn's child has exec'd (the clone child
///   checks its parent after asking for the signal);
/// - the group is recorded for the guardian by dlock once posix_spawn has returned, not by the
///   child before its `exec`: dlock dying in between leaves the command running without the lock;
/// - the open-file limit is restored with `prlimit` on the running command, which may already
///   have looked at the raised one (lowering dlock's own around the call instead would make any
///   other thread of dlock that opens a descriptor meanwhile fail with EMFILE);
/// - a foreground that cannot be handed over fails glibc's whole spawn, where the clone child
///   goes on without it: the spawn is then made again without asking for it (the caller gives
///   the terminal from dlock too, see src/supervise/child.rs);
/// - glibc no longer runs a file the kernel cannot (ENOEXEC) under `/bin/sh`: a second
///   posix_spawn does, as the clone child's second `execve`.
#[cfg(feature = "posix-spawn")]
fn start(child: &mut ChildArgs) -> io::Result<libc::pid_t> {
    let spawned = posix_spawn_retrying(child, &child.program, &child.argv);
    let pid = match spawned {
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            posix_spawn_retrying(child, c"/bin/sh", &child.sh_argv)?
        }
        spawned => spawned?,
    };
    guard::arm(pid);
    if let (Some(limit), Some(command)) = (child.file_limit, Pid::from_raw(pid)) {
        let _ = rustix::process::prlimit(Some(command), rustix::process::Resource::Nofile, limit);
    }
    Ok(pid)
}

/// `posix_spawn` of `path`, again without the terminal's foreground if the spawn that asked for it
/// failed (a failed spawn exec'd nothing, and glibc has reaped its child).
#[cfg(feature = "posix-spawn")]
fn posix_spawn_retrying(
    child: &ChildArgs,
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
) -> io::Result<libc::pid_t> {
    match posix_spawn(child, path, argv, child.foreground) {
        Err(_) if child.foreground => posix_spawn(child, path, argv, false),
        spawned => spawned,
    }
}

/// One `posix_spawn` of `path` with `argv` and the child's environment, in a new process group,
/// with dlock's changed dispositions reset and the child's mask, in the terminal's foreground if
/// `foreground` (glibc only). Its attribute objects live in this frame, never moved.
#[cfg(feature = "posix-spawn")]
fn posix_spawn(
    child: &ChildArgs,
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    foreground: bool,
) -> io::Result<libc::pid_t> {
    use std::mem::MaybeUninit;
    let check = |rc: libc::c_int| match rc {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    };
    let mut attr = MaybeUninit::<libc::posix_spawnattr_t>::uninit();
    // SAFETY: init writes the whole object, which stays in place until destroyed below.
    check(unsafe { libc::posix_spawnattr_init(attr.as_mut_ptr()) })?;
    let mut actions = MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
    // SAFETY: as above.
    if let Err(e) = check(unsafe { libc::posix_spawn_file_actions_init(actions.as_mut_ptr()) }) {
        // SAFETY: initialised above, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(attr.as_mut_ptr()) };
        return Err(e);
    }
    let (attr_ptr, actions_ptr) = (attr.as_mut_ptr(), actions.as_mut_ptr());
    let mut reset = SigSet::of(&crate::signal::RESET_IN_CHILD);
    glibc_internal_signals_too(&mut reset);
    let flags =
        libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
    let spawned = (|| {
        // SAFETY: an initialised attribute object.
        check(unsafe { libc::posix_spawnattr_setflags(attr_ptr, flags as libc::c_short) })?;
        // Group 0: a group of its own, led by the child.
        // SAFETY: as above.
        check(unsafe { libc::posix_spawnattr_setpgroup(attr_ptr, 0) })?;
        // SAFETY: as above; the set is copied into it.
        check(unsafe { libc::posix_spawnattr_setsigmask(attr_ptr, child.mask.as_raw()) })?;
        // SAFETY: as above.
        check(unsafe { libc::posix_spawnattr_setsigdefault(attr_ptr, reset.as_raw()) })?;
        #[cfg(target_env = "gnu")]
        if foreground {
            // SAFETY: an initialised file actions object. Done after the new group is made, with
            // every signal blocked (SIGTTOU too), as the clone child does it.
            check(unsafe { libc::posix_spawn_file_actions_addtcsetpgrp_np(actions_ptr, 0) })?;
        }
        #[cfg(not(target_env = "gnu"))]
        let _ = foreground;
        let mut pid = 0;
        // SAFETY: NUL-terminated strings and NULL-terminated arrays of them, prepared by the
        // caller and alive for the call; initialised attribute objects. posix_spawn only reads
        // the arrays (its C signature lacks the const).
        check(unsafe {
            libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                actions_ptr,
                attr_ptr,
                argv.as_ptr().cast(),
                child.envp.as_ptr().cast(),
            )
        })?;
        Ok(pid)
    })();
    // SAFETY: both initialised above, each destroyed once.
    unsafe {
        libc::posix_spawn_file_actions_destroy(actions_ptr);
        libc::posix_spawnattr_destroy(attr_ptr);
    }
    spawned
}

/// glibc's posix_spawn child ignores (SIG_IGN) the two signals glibc keeps for itself (32 and 33,
/// SIGCANCEL and SIGSETXID) unless they are in the set reset to default, so the command would
/// inherit them ignored; the clone child leaves them at their default. sigaddset refuses them, so
/// their bits are set directly.
#[cfg(feature = "posix-spawn")]
fn glibc_internal_signals_too(set: &mut SigSet) {
    let raw: *mut libc::sigset_t = set.as_raw_mut();
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    for signal in [32usize, 33] {
        // SAFETY: glibc's sigset_t is an array of unsigned longs with signal N at bit N-1 (its own
        // __sigaddset's layout, the kernel's); `raw` is `set`'s, borrowed mutably here, and the
        // word is within the sigset_t (1,024 bits).
        unsafe {
            let word = raw.cast::<libc::c_ulong>().add((signal - 1) / bits);
            *word |= 1 << ((signal - 1) % bits);
        }
    }
}

#[cfg(not(any(feature = "fork-spawn", feature = "posix-spawn")))]
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
#[cfg(not(feature = "posix-spawn"))]
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
