//! A gate a test's command waits at without looking again and again: a FIFO the command reads
//! (`timeout --foreground 600 cat GATE`, which starts no process group of its own, so a signal to
//! the command's group reaches it), opened and closed by the test to let it through. A command that
//! polled for a file every 50 ms started twenty `sleep`s a second for as long as it held a lock.

use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// How long a command waits at a gate nobody opens (a test that died without dropping its holder).
const GATE_SECONDS: u32 = 600;

pub struct Gate {
    path: PathBuf,
}

impl Gate {
    /// A closed gate at `path` (a FIFO made there).
    pub fn at(path: PathBuf) -> Gate {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap_or_else(|e| panic!("cannot make the FIFO {}: {e}", path.display()));
        Gate { path }
    }

    /// The shell command that waits at the gate; it ends with status 0 once the gate opens.
    pub fn wait_in_shell(&self) -> String {
        format!(
            "timeout --foreground {GATE_SECONDS} cat '{}' > /dev/null",
            self.path.display()
        )
    }

    /// Lets the command waiting at the gate through: opens the FIFO for writing and closes it,
    /// which ends its read. Returns at once when `waiter` (the process the command runs under)
    /// has ended, as its command then waits no more; panics past a minute.
    pub fn open(&self, waiter: &mut Child) {
        let end = Instant::now() + Duration::from_secs(60);
        // Once `waiter` has ended, its command waits at the gate no more.
        while matches!(waiter.try_wait(), Ok(None)) {
            // Without blocking: with nobody reading yet (the command between its last words and
            // its read, or gone), ENXIO.
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path);
            let not_yet = |e: &std::io::Error| {
                e.raw_os_error() == Some(libc::ENXIO) || e.kind() == ErrorKind::Interrupted
            };
            match opened {
                Ok(_) => break,
                Err(e) if not_yet(&e) => {
                    assert!(
                        Instant::now() < end,
                        "nobody waited at the gate {} for a minute",
                        self.path.display()
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("cannot open the gate {}: {e}", self.path.display()),
            }
        }
    }
}
