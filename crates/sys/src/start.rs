//! What Rust's own start of a program does that dlock still needs, done by dlock's `main` itself.
//!
//! dlock starts once per locked command, so its start is on every caller's critical path. Rust's
//! start (`lang_start`) also installs a stack-overflow handler, whose stack guard glibc finds by
//! reading /proc/self/maps: about 20 system calls at every run (see docs/SPEED.md). dlock
//! has no deep recursion, and a stack overflow still ends it with SIGSEGV, just without the
//! message. The rest of that start is kept here: the standard descriptors exist, SIGPIPE is
//! ignored, and what is buffered for stdout is written at the end.

use std::io::Write;

/// Before anything else: fds 0, 1 and 2 that the caller closed are opened on /dev/null, so that no
/// lock file or socket dlock opens becomes its stdout or stderr. Aborts if that cannot be done, as
/// Rust's start does.
pub fn standard_descriptors() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    loop {
        // SAFETY: `fds` is a valid array of three pollfd for the length given; a zero timeout
        // returns at once.
        let polled = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        if polled != -1 {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // poll(2) itself failed (no memory): each descriptor is checked on its own instead.
            for pollfd in &mut fds {
                // SAFETY: F_GETFD only reads the descriptor's flags.
                if unsafe { libc::fcntl(pollfd.fd, libc::F_GETFD) } == -1 {
                    pollfd.revents = libc::POLLNVAL;
                }
            }
            break;
        }
    }
    for pollfd in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
        // SAFETY: a NUL-terminated path and plain flags; the lowest free descriptor is the closed
        // one, since those below it are open by now.
        let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if opened != pollfd.fd {
            std::process::abort();
        }
    }
}

/// At the end: what `print!` left in stdout's buffer is written (a closed pipe is no error here:
/// the status says how dlock ended).
pub fn flush_stdout() {
    let _ = std::io::stdout().flush();
}

/// Closes every descriptor beyond the standard streams that this process inherited (`dlock hold`'s
/// keeper, first thing, from the shell through the front), before it opens anything of its own.
pub fn close_inherited_descriptors() {
    let Ok(listing) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = listing
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    // The listing's own descriptor is closed by now, and closing it again only fails (EBADF).
    for fd in fds {
        // SAFETY: called first thing, before anything is opened: no object in this process owns
        // these descriptors, so none is left dangling.
        unsafe { libc::close(fd) };
    }
}
