//! `dlock release NAME` without `--force`: finds the keeper of this shell's `dlock hold` of NAME
//! (the nearest ancestor of this process with an entry in the registry), asks it to release, and
//! waits for its answer.

use std::fs;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;

use anyhow::anyhow;

use super::keeper::{read_answer, LOST, RELEASE, RELEASED};
use super::registry;
use crate::exit::Status;
use crate::lock::LockName;
use crate::report::{plain, Reporter};

/// The exit status: 0 released, 79 the hold had lost its lock, 1 no hold of this shell's.
pub fn release(name: &LockName, report: &Reporter) -> anyhow::Result<Status> {
    let dir = registry::dir(false)?;
    // This process itself holds nothing: its ancestors, nearest first.
    for process in registry::ancestry(std::process::id()).into_iter().skip(1) {
        let path = registry::entry(&dir, process, name);
        let conn = match UnixStream::connect(&path).and_then(|mut conn| {
            writeln!(conn, "{RELEASE}")?;
            Ok(conn)
        }) {
            Ok(conn) => conn,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                // Its keeper is gone (killed): the entry is stale.
                let _ = fs::remove_file(&path);
                continue;
            }
            Err(e) => {
                return Err(anyhow!(
                    "cannot reach the keeper of lock {:?} at {}: {}",
                    name.as_str(),
                    path.display(),
                    plain(&e)
                ))
            }
        };
        let answer = read_answer(conn).map_err(|e| {
            anyhow!(
                "the keeper of lock {:?} did not answer: {}",
                name.as_str(),
                plain(&e)
            )
        })?;
        if answer == RELEASED {
            report.event(&format!("released {:?}", name.as_str()));
            return Ok(Status::Done);
        }
        if let Some(why) = answer.strip_prefix(LOST) {
            report.error(&format!(
                "the hold of lock {:?} had lost it: {}",
                name.as_str(),
                why.trim()
            ));
            return Ok(Status::LockLost);
        }
        // Refused: not this shell's after all (a process reused an ancestor's pid and start).
    }
    report.error(&format!(
        "this shell holds no lock {:?} from dlock hold; to break it for whoever holds it, say \
         `dlock release --force {}`",
        name.as_str(),
        name.as_str()
    ));
    Ok(Status::Free)
}
