//! How dlock talks on stderr, in one place: errors always, notices unless `--quiet`, timestamped
//! events with `--verbose`, and the one-line waiting status redrawn in place on a terminal.

use std::io::{IsTerminal, Write};
use std::time::SystemTime;

/// One line on stderr, without the internals libraries put in their errors' text (a warning
/// carries a backend's error as well as a failure does). A stderr nobody reads any more (a closed
/// pipe) loses the line, never the exit status (eprintln! would panic).
fn say(line: &str) {
    let line = crate::text::for_terminal(&crate::text::without_internals(line));
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

pub struct Reporter {
    verbosity: Verbosity,
    /// Whether a status line is on screen and must be erased before anything else is printed.
    status_shown: std::cell::Cell<bool>,
    terminal: bool,
}

impl Reporter {
    pub fn new(verbosity: Verbosity) -> Reporter {
        Reporter {
            verbosity,
            status_shown: std::cell::Cell::new(false),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Always shown; timestamped like the events under --verbose, so a log reads in order.
    pub fn error(&self, msg: &str) {
        self.clear_status();
        if self.verbosity == Verbosity::Verbose {
            say(&format!(
                "[{}] dlock: {msg}",
                humantime::format_rfc3339_millis(SystemTime::now())
            ));
        } else {
            say(&format!("dlock: {msg}"));
        }
    }

    /// Something the user should know unless they asked for quiet (busy, timed out).
    pub fn notice(&self, msg: &str) {
        if self.verbosity != Verbosity::Quiet {
            self.clear_status();
            say(&format!("dlock: {msg}"));
        }
    }

    /// `notice` for another thread (or a callback that must be `Send`): no status line to clear,
    /// which holds where no waiting line is drawn.
    pub fn notifier(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let verbosity = self.verbosity;
        move |msg: &str| match verbosity {
            Verbosity::Quiet => {}
            Verbosity::Normal => say(&format!("dlock: {msg}")),
            Verbosity::Verbose => say(&format!(
                "[{}] dlock: {msg}",
                humantime::format_rfc3339_millis(SystemTime::now())
            )),
        }
    }

    /// `event` for a callback that must be `Send` (see `notifier`).
    pub fn eventer(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let verbose = self.verbosity == Verbosity::Verbose;
        move |msg: &str| {
            if verbose {
                let now = humantime::format_rfc3339_millis(SystemTime::now());
                say(&format!("[{now}] dlock: {msg}"));
            }
        }
    }

    /// A timestamped event, shown only with `--verbose`.
    pub fn event(&self, msg: &str) {
        if self.verbosity == Verbosity::Verbose {
            self.clear_status();
            let now = humantime::format_rfc3339_millis(SystemTime::now());
            say(&format!("[{now}] dlock: {msg}"));
        }
    }

    /// A line about a wait in progress (src/supervise/progress.rs): for a log, not a terminal,
    /// where the status line says it; a timestamped event with --verbose; nothing with --quiet.
    pub fn progress(&self, msg: &str) {
        match self.verbosity {
            Verbosity::Quiet => {}
            Verbosity::Verbose => self.event(msg),
            Verbosity::Normal if self.terminal => {}
            Verbosity::Normal => say(&format!("dlock: {msg}")),
        }
    }

    /// The line that ends a logged wait, for a log only: --verbose has its own "acquired" event,
    /// and a terminal's status line just goes away.
    pub fn progress_end(&self, msg: &str) {
        if self.verbosity == Verbosity::Normal && !self.terminal {
            say(&format!("dlock: {msg}"));
        }
    }

    /// `progress` for a callback that must be `Send` (see `notifier`).
    pub fn progress_logger(&self) -> std::sync::Arc<dyn Fn(&str) + Send + Sync> {
        let (verbosity, terminal) = (self.verbosity, self.terminal);
        let event = self.eventer();
        std::sync::Arc::new(move |msg: &str| match verbosity {
            Verbosity::Quiet => {}
            Verbosity::Verbose => event(msg),
            Verbosity::Normal if terminal => {}
            Verbosity::Normal => say(&format!("dlock: {msg}")),
        })
    }

    /// Draws the waiting status line in place, made by `line` for the terminal's width, on a
    /// terminal only and never with --verbose or --quiet (where it would interleave with event
    /// lines or break the silence). One column is left free: a line that fills the last one
    /// wraps on some terminals.
    pub fn status_line(&self, line: impl FnOnce(usize) -> String) {
        if !self.draws_waiting_line() {
            return;
        }
        let columns = rustix::termios::tcgetwinsize(std::io::stderr())
            .map(|size| usize::from(size.ws_col))
            .ok()
            .filter(|&c| c > 0)
            .unwrap_or(80);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{}", line(columns - 1));
        let _ = err.flush();
        self.status_shown.set(true);
    }

    pub fn clear_status(&self) {
        if self.status_shown.replace(false) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }

    /// Whether anything shows who holds a lock waited for (the waiting line, the status line, the
    /// message on giving up): not under `--quiet`.
    pub fn shows_holders(&self) -> bool {
        self.verbosity != Verbosity::Quiet
    }

    /// True when a waiting line could be drawn, so the caller knows to tick it.
    pub fn draws_waiting_line(&self) -> bool {
        self.terminal && self.verbosity == Verbosity::Normal
    }
}

/// An I/O error as words for a message, without Rust's "(os error N)": "not a directory".
pub fn plain(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text.to_owned(),
    }
}

/// How a connection to a server failed, in the words every network backend uses: `connection
/// refused`, `connection reset`, `the server closed the connection`, `no answer within 2s` (`no
/// answer in time` where the call's budget is not known); else the system's words, as `plain`.
pub fn connection_failure(e: &std::io::Error, budget: Option<std::time::Duration>) -> String {
    connection_words(e, budget).unwrap_or_else(|| plain(e))
}

/// `connection_failure`'s words for the kinds every client meets alike; `None` for another kind,
/// which a client with better words of its own may word itself.
pub fn connection_words(e: &std::io::Error, budget: Option<std::time::Duration>) -> Option<String> {
    use std::io::ErrorKind;
    Some(match e.kind() {
        ErrorKind::ConnectionRefused => "connection refused".into(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => "connection reset".into(),
        ErrorKind::UnexpectedEof | ErrorKind::BrokenPipe => {
            "the server closed the connection".into()
        }
        ErrorKind::TimedOut | ErrorKind::WouldBlock => match budget {
            Some(budget) => format!("no answer within {}", crate::text::duration(budget)),
            None => "no answer in time".into(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn io_errors_read_without_rust_internals() {
        let e = std::io::Error::from_raw_os_error(libc::ENOTDIR);
        assert_eq!(super::plain(&e), "not a directory");
    }

    #[test]
    fn connection_failures_read_alike_whatever_the_client() {
        use std::io::{Error, ErrorKind};
        use std::time::Duration;

        use super::connection_failure;

        let os = |errno| Error::from_raw_os_error(errno);
        assert_eq!(
            connection_failure(&os(libc::ECONNREFUSED), None),
            "connection refused"
        );
        assert_eq!(
            connection_failure(&os(libc::ECONNRESET), None),
            "connection reset"
        );
        assert_eq!(
            connection_failure(&os(libc::EPIPE), None),
            "the server closed the connection"
        );
        let eof = Error::from(ErrorKind::UnexpectedEof);
        assert_eq!(
            connection_failure(&eof, None),
            "the server closed the connection"
        );
        let late = Error::from(ErrorKind::TimedOut);
        assert_eq!(connection_failure(&late, None), "no answer in time");
        assert_eq!(
            connection_failure(&late, Some(Duration::from_secs(2))),
            "no answer within 2s"
        );
        let dns = Error::other("failed to lookup address information: Name or service not known");
        assert_eq!(
            connection_failure(&dns, None),
            "failed to lookup address information: Name or service not known"
        );
        assert_eq!(
            connection_failure(&os(libc::EHOSTUNREACH), None),
            "no route to host"
        );
    }
}
