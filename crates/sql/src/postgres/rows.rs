//! What the rows of `holders.sql` say: each holder's or waiter's fields, read one by one and never
//! trusted (other clients may write these tables), and the holders a busy attempt reports.

use tokio_postgres::Row;

use crate::record::RowText;
use dlock_core::lock::{time_from_millis, Holder, Kept};

/// The holders among `entries`, as a busy attempt reports them (without their lease's end, which
/// moves at each renewal, so that a waiter reports a change of holders only).
pub fn holders_of(entries: Vec<Entry>) -> Vec<Holder> {
    entries
        .into_iter()
        .filter(|e| !e.waiting)
        .map(|e| Holder {
            expires_at: None,
            ..e.holder
        })
        .collect()
}

/// A holder's or a waiter's row, as read.
pub struct Entry {
    pub name: String,
    pub waiting: bool,
    pub holder: Holder,
}

/// A row of `holders.sql` (kind, name, owner, mode, token, since, pid, host, message, expires,
/// then kept_until in ms and kept_note where the statement reads them;
/// all text, any content: other clients may write these tables), checked field by field. What
/// does not read is an unreadable holder, counted as the server counts it. `None`: a row of
/// another shape (not 10 or 12 columns), which no statement of dlock's returns: the server is
/// not answering dlock's statements.
pub(super) fn entry_of(row: &Row) -> Option<Entry> {
    if !matches!(row.len(), 10 | 12) {
        return None;
    }
    let text = |i: usize| row.try_get::<_, Option<String>>(i).ok().flatten();
    let millis = |i: usize| {
        text(i)
            .and_then(|ms| ms.parse().ok())
            .and_then(time_from_millis)
    };
    let waiting = text(0).as_deref() == Some("w");
    let name = text(1).unwrap_or_default();
    let fields = RowText {
        owner: text(2).unwrap_or_default(),
        mode: text(3).unwrap_or_default(),
        token: text(4),
        since: text(5).unwrap_or_default(),
        pid: text(6).unwrap_or_default(),
        host: text(7).unwrap_or_default(),
        message: text(8),
        expires_at: millis(9),
        kept_until: millis(10),
        kept: text(11).and_then(|note| Kept::from_note(&note)),
    };
    let holder = fields
        .holder(waiting)
        .unwrap_or_else(|| fields.unreadable());
    Some(Entry {
        name,
        waiting,
        holder,
    })
}
