//! A connection to one Redis server and what a waiter hears on it: the grants published to it
//! (classic or sharded pub/sub, RESP3 pushes read beside the replies), the grant channels it
//! listens on, and a channel the server dropped when the lock's slot moved away.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::mpsc::Receiver;

use redis::{Connection, PushInfo, PushKind, Value};

use super::reply::text_of;
use dlock_core::backend::watch::Socket;

/// A connection to one server (RESP3), and the messages read on it.
pub(super) struct Link {
    pub(super) conn: Connection,
    /// Messages published to this dlock, as whoever reads the connection comes upon them.
    pub(super) messages: Receiver<PushInfo>,
    /// The grant channels the connection listens on (one for all locks; on Redis Cluster one
    /// per lock); a channel the server drops (its slot moved away) leaves it.
    pub(super) listening: RefCell<HashSet<String>>,
    /// Switched to RESP3 (HELLO 3).
    pub(super) resp3: bool,
    /// A cluster node without sharded pub/sub: its waiters listen on the classic channel.
    pub(super) classic: bool,
    /// The connection's socket, for the watch over each call (`watch`), when found.
    pub(super) socket: Option<Socket>,
}

/// What a waiter heard.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// A message says its lock was granted to it: a sign to look, never a proof (any client may
    /// publish it).
    Grant,
    /// The server stopped carrying the lock's grant channel (its slot moved to another master):
    /// time to look again, and to listen where the lock is now.
    Dropped,
}

impl Link {
    /// What was heard of the lock `base` among the messages read so far; other messages (stale
    /// grants of other locks, subscription confirmations) are dropped.
    pub(super) fn heard(&self, base: &str) -> Option<Heard> {
        for message in self.messages.try_iter() {
            if is_grant(&message, base) {
                return Some(Heard::Grant);
            }
            if message.kind == PushKind::SUnsubscribe {
                let Some(channel) = message.data.first().and_then(text_of) else {
                    continue;
                };
                let ours = channel.starts_with(&format!("{base}:wake:"));
                self.listening.borrow_mut().remove(&channel);
                if ours {
                    return Some(Heard::Dropped);
                }
            }
        }
        None
    }
}

impl Link {
    /// Whether a message came on one of `channels` among those read so far (any message: its
    /// payload is not read); the others are dropped.
    pub(super) fn told(&self, channels: &[String]) -> bool {
        let mut told = false;
        for message in self.messages.try_iter() {
            let channel = message.data.first().and_then(text_of);
            told |=
                message.kind == PushKind::Message && channel.is_some_and(|c| channels.contains(&c));
        }
        told
    }
}

/// Whether `message` says the lock `base` was granted ("dlock:{NAME} TOKEN"; the token is not
/// read: the next attempt takes it from the store).
fn is_grant(message: &PushInfo, base: &str) -> bool {
    if !matches!(message.kind, PushKind::Message | PushKind::SMessage) {
        return false;
    }
    let payload = message.data.get(1).and_then(text_of);
    payload
        .as_deref()
        .and_then(|p| p.rsplit_once(' '))
        .is_some_and(|(lock, _)| lock == base)
}

/// How a SUBSCRIBE or SSUBSCRIBE went.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Subscribed {
    Yes,
    /// Refused (a slot that moved: the attempt beside it says where to go).
    No,
    /// The server has no such command.
    Unknown,
}

/// The answer to a (S)SUBSCRIBE of `channel`: its confirmation, a message, or an error reply.
/// Other messages that come first (grants on channels already listened to) go to the link's
/// `messages` as always.
pub(super) fn confirmation(conn: &mut Connection, channel: &str) -> redis::RedisResult<Subscribed> {
    loop {
        match conn.recv_response()? {
            Value::Push { kind, data }
                if matches!(kind, PushKind::Subscribe | PushKind::SSubscribe)
                    && data.first().and_then(text_of).as_deref() == Some(channel) =>
            {
                return Ok(Subscribed::Yes)
            }
            Value::Push { .. } => continue,
            other => {
                return Ok(match other.extract_error() {
                    Ok(_) => Subscribed::No,
                    Err(e) if e.to_string().to_lowercase().contains("unknown command") => {
                        Subscribed::Unknown
                    }
                    Err(_) => Subscribed::No,
                })
            }
        }
    }
}
