//! Files dlock takes settings or a secret from (the configuration file, the password file): read
//! only when whoever wrote them could have run dlock's user's commands anyway. A file another user
//! owns or may write could send this user's password, or root's, to that user's server.
//!
//! Each is opened without blocking and checked on the descriptor opened, so a FIFO, a device or a
//! file swapped in between check and read is refused, never waited on.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// What kind of file, for messages and for the checks that depend on it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Config,
    Password,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Config => "the configuration file",
            Kind::Password => "the password file",
        }
    }

    /// The largest file of this kind dlock reads.
    fn limit(self) -> u64 {
        match self {
            Kind::Config => 64 * 1024,
            Kind::Password => 4 * 1024,
        }
    }
}

/// The text of `path`, a `kind` file: a regular file of at most its limit, owned by this user or
/// root, that neither its group nor others may write, and (a password file) that others may not
/// read. Otherwise the one line saying why.
pub fn read(path: &Path, kind: Kind) -> Result<String, String> {
    let name = kind.name();
    let shown = path.display();
    let cannot =
        |e: std::io::Error| format!("cannot read {name} {shown}: {}", crate::report::plain(&e));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    let limit = kind.limit();
    if !meta.is_file() || meta.len() > limit {
        return Err(format!(
            "{name} {shown} is not a regular file of at most {} KiB",
            limit / 1024
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "refusing {name} {shown}: it belongs to uid {}, not to you or root",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "refusing {name} {shown}: other users may write to it (mode {mode:o}); \
             chmod go-w it"
        ));
    }
    if kind == Kind::Password && mode & 0o004 != 0 {
        return Err(format!(
            "refusing {name} {shown}: every user may read it (mode {mode:o}); chmod o-r it"
        ));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "{name} {shown} is not a regular file of at most {} KiB",
            limit / 1024
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{name} {shown} is not UTF-8"))
}
