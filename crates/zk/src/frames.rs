//! A check of every reply ZooKeeper sends, before the client reads it. zookeeper-client sizes a
//! list (children, ACL entries, users) by the count inside a reply before it reads the items, so a
//! forged count in a short reply would make it ask for gigabytes and end dlock. Each server of the
//! connect string is reached through a relay on loopback, in the session's runtime: on the way out
//! it notes which operation each request is (by its xid); on the way back it reads each reply whole
//! (growing with the bytes that arrive, at most `MAX_FRAME`) and checks every list count against
//! the bytes that carry it. A reply that lies ends its connection, and every later one, and names
//! the server for the user (`lie`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest reply accepted, in bytes (ZooKeeper's own default bound, jute.maxbuffer, is 1 MiB).
const MAX_FRAME: usize = 16 << 20;

/// Requests awaiting a reply on one connection, at most: the client has a few in flight.
const MAX_IN_FLIGHT: usize = 1 << 16;

// The operations whose replies hold a list, as zookeeper-client reads them.
const GET_ACL: i32 = 6;
const GET_CHILDREN: i32 = 8;
const GET_CHILDREN2: i32 = 12;
const MULTI_READ: i32 = 22;
const GET_EPHEMERALS: i32 = 103;
const WHO_AM_I: i32 = 107;
const GET_DATA: i32 = 4;
const ERROR: i32 = -1;

/// The size of a znode's Stat on the wire.
const STAT_BYTES: usize = 68;

/// Why a server's reply was refused, once one was: the relays then take no more connections.
static LIE: OnceLock<String> = OnceLock::new();

/// How many connections a server ended before its first answer: one at its cap of connections
/// from one host (`maxClientCnxns`) accepts each connection past it and closes it at once.
static ENDED_UNANSWERED: AtomicUsize = AtomicUsize::new(0);

/// How many connections a server has ended before its first answer, so far.
pub(super) fn ended_unanswered() -> usize {
    ENDED_UNANSWERED.load(Ordering::SeqCst)
}

/// Why dlock stopped believing a server, if it did: for the user, naming the server.
pub(super) fn lie() -> Option<&'static str> {
    LIE.get().map(String::as_str)
}

/// Starts one relay on loopback for each of `hosts` (`host:port`), in the current runtime, and
/// returns the connect string that reaches them in the same order.
pub(super) async fn relay(hosts: &[String]) -> std::io::Result<String> {
    let mut local = Vec::with_capacity(hosts.len());
    for host in hosts {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        local.push(listener.local_addr()?.to_string());
        let host = host.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if lie().is_some() {
                    continue;
                }
                let host = host.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&host).await {
                        carry(client, server, &host).await;
                    }
                });
            }
        });
    }
    Ok(local.join(","))
}

/// Carries one connection both ways until either side ends it or a reply lies.
async fn carry(client: TcpStream, server: TcpStream, host: &str) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let in_flight = Arc::new(Mutex::new(HashMap::new()));
    let answered = AtomicBool::new(false);
    let server_ended = tokio::select! {
        ended = requests(client_read, server_write, in_flight.clone()) => ended,
        verdict = replies(server_read, client_write, in_flight, &answered) => match verdict {
            Ok(ended) => ended,
            Err(why) => {
                let _ = LIE.set(format!("ZooKeeper at {host} sent {why}; not using it"));
                false
            }
        },
    };
    if server_ended && !answered.load(Ordering::SeqCst) {
        ENDED_UNANSWERED.fetch_add(1, Ordering::SeqCst);
    }
}

/// Client to server: each request's operation noted by its xid before its bytes go on, so that its
/// reply is never checked without it. Whether the server's side ended it (not the client's).
async fn requests(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    in_flight: Arc<Mutex<HashMap<i32, i32>>>,
) -> bool {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    // The first frame is the connect request, which has no header; then each frame is its length,
    // xid and operation, then the request.
    let mut first = true;
    let mut left_of_frame = 0usize;
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        pending.extend_from_slice(&chunk[..n]);
        loop {
            if left_of_frame > 0 {
                let take = left_of_frame.min(pending.len());
                if take == 0 {
                    break;
                }
                if to.write_all(&pending[..take]).await.is_err() {
                    return true;
                }
                pending.drain(..take);
                left_of_frame -= take;
                continue;
            }
            let header = if first { 4 } else { 12 };
            if pending.len() < header {
                break;
            }
            let len = be_i32(&pending[0..4]).max(0) as usize;
            if !first {
                let (xid, op) = (be_i32(&pending[4..8]), be_i32(&pending[8..12]));
                if xid > 0 {
                    let mut map = dlock_sys::sync::lock(&in_flight);
                    if map.len() >= MAX_IN_FLIGHT {
                        return false;
                    }
                    map.insert(xid, op);
                }
            }
            first = false;
            left_of_frame = 4 + len;
        }
    }
}

/// Server to client: each reply read whole, checked, and passed on (`answered` once the first
/// is). Whether the server's side ended it (not the client's).
async fn replies(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    in_flight: Arc<Mutex<HashMap<i32, i32>>>,
    answered: &AtomicBool,
) -> Result<bool, String> {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    // The first reply is the connect response, which has no reply header.
    let mut first = true;
    loop {
        while pending.len() >= 4 {
            let len = be_i32(&pending[0..4]);
            if len < 0 || len as usize > MAX_FRAME {
                return Err(format!("a reply of {len} bytes"));
            }
            let end = 4 + len as usize;
            if pending.len() < end {
                break;
            }
            if !first {
                check(&pending[4..end], &in_flight)?;
            }
            first = false;
            if to.write_all(&pending[..end]).await.is_err() {
                return Ok(false);
            }
            answered.store(true, Ordering::SeqCst);
            pending.drain(..end);
        }
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(true),
            Ok(n) => n,
        };
        pending.extend_from_slice(&chunk[..n]);
    }
}

/// Checks one reply (without its length): the reply header (xid, zxid, error), then the body of
/// the operation its xid names.
fn check(frame: &[u8], in_flight: &Mutex<HashMap<i32, i32>>) -> Result<(), String> {
    if frame.len() < 16 {
        return Err(format!(
            "a reply of {} bytes, shorter than its header",
            frame.len()
        ));
    }
    let xid = be_i32(&frame[0..4]);
    let error = be_i32(&frame[12..16]);
    // A positive xid is a request's (the others: watch events, pings, authentication): one
    // dlock never sent, or answered already, would make the client give up with an internal
    // error rather than a server's.
    let op = match xid > 0 {
        true => match dlock_sys::sync::lock(in_flight).remove(&xid) {
            Some(op) => Some(op),
            None => return Err(format!("a reply to no request of dlock's (xid {xid})")),
        },
        false => None,
    };
    match (op, error) {
        (Some(op), 0) => check_body(op, &frame[16..]),
        _ => Ok(()),
    }
}

/// Checks the list counts of a reply to `op`.
fn check_body(op: i32, body: &[u8]) -> Result<(), String> {
    let mut at = Reader { bytes: body, at: 0 };
    match op {
        GET_CHILDREN | GET_CHILDREN2 | GET_EPHEMERALS => at.list(4, "names").map(drop),
        // An ACL entry: its permissions, then the scheme and the id (each a length, then bytes).
        GET_ACL => at.list(12, "ACL entries").map(drop),
        // A user: the scheme and the id.
        WHO_AM_I => at.list(8, "users").map(drop),
        MULTI_READ => multi_read(&mut at),
        _ => Ok(()),
    }
}

/// The results of a multi-read, walked as the client reads them: a header (operation, done,
/// error) before each. Where the walk cannot go on (bytes short, an operation the client refuses
/// too), the client fails the reply itself without reserving anything.
fn multi_read(at: &mut Reader) -> Result<(), String> {
    while let (Some(op), Some(done), Some(_)) = (at.i32(), at.u8(), at.i32()) {
        if done != 0 {
            return Ok(());
        }
        let walked = match op {
            GET_DATA => at.buffer().and_then(|()| at.skip(STAT_BYTES)),
            GET_CHILDREN => at.list(4, "names")?.then_some(()),
            ERROR => at.i32().map(drop),
            _ => None,
        };
        if walked.is_none() {
            return Ok(());
        }
    }
    Ok(())
}

/// Reads a reply's fields, big-endian, as far as its bytes go.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn i32(&mut self) -> Option<i32> {
        let field = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(be_i32(field))
    }

    fn u8(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        (self.left() >= n).then(|| self.at += n)
    }

    /// A length, then that many bytes (-1 or less: none).
    fn buffer(&mut self) -> Option<()> {
        let len = self.i32()?;
        self.skip(len.max(0) as usize)
    }

    /// A list's count, which must fit the bytes left at `min_item` bytes an item; then, where the
    /// items are strings (`min_item` 4), the items themselves. `Ok(true)`: walked to its end.
    fn list(&mut self, min_item: usize, what: &str) -> Result<bool, String> {
        let Some(count) = self.i32() else {
            return Ok(false);
        };
        if count <= 0 {
            return Ok(true);
        }
        let room = self.left() / min_item;
        if count as usize > room {
            return Err(format!(
                "a list of {count} {what} in {} bytes",
                self.left() + 4
            ));
        }
        if min_item != 4 {
            return Ok(false);
        }
        for _ in 0..count {
            if self.buffer().is_none() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn be_i32(bytes: &[u8]) -> i32 {
    i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(xid: i32, body: &[u8]) -> Vec<u8> {
        let mut frame = xid.to_be_bytes().to_vec();
        frame.extend_from_slice(&7i64.to_be_bytes());
        frame.extend_from_slice(&0i32.to_be_bytes());
        frame.extend_from_slice(body);
        frame
    }

    fn names(count: i32, items: &[&str]) -> Vec<u8> {
        let mut body = count.to_be_bytes().to_vec();
        for item in items {
            body.extend_from_slice(&(item.len() as i32).to_be_bytes());
            body.extend_from_slice(item.as_bytes());
        }
        body
    }

    fn checked(op: i32, body: &[u8]) -> Result<(), String> {
        let in_flight = Mutex::new(HashMap::from([(5, op)]));
        check(&reply(5, body), &in_flight)
    }

    #[test]
    fn honest_lists_pass() {
        assert_eq!(checked(GET_CHILDREN, &names(2, &["a", "lock-1"])), Ok(()));
        assert_eq!(checked(GET_CHILDREN2, &names(0, &[])), Ok(()));
        assert_eq!(checked(GET_CHILDREN, &names(-1, &[])), Ok(()));
    }

    #[test]
    fn a_count_larger_than_its_bytes_is_a_lie() {
        for op in [
            GET_CHILDREN,
            GET_CHILDREN2,
            GET_EPHEMERALS,
            GET_ACL,
            WHO_AM_I,
        ] {
            let why = checked(op, &names(i32::MAX, &["a"])).unwrap_err();
            assert!(why.starts_with("a list of 2147483647 "), "{why}");
        }
        // Two names need at least 8 bytes after the count.
        assert!(checked(GET_CHILDREN, &names(2, &[])).is_err());
    }

    #[test]
    fn lists_inside_a_multi_read_are_checked_too() {
        let mut body = Vec::new();
        // A getData result: header, data, stat.
        body.extend_from_slice(&GET_DATA.to_be_bytes());
        body.push(0);
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&(3i32).to_be_bytes());
        body.extend_from_slice(b"abc");
        body.extend_from_slice(&[0; STAT_BYTES]);
        // Then a forged getChildren result.
        body.extend_from_slice(&GET_CHILDREN.to_be_bytes());
        body.push(0);
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&names(1 << 30, &[]));
        assert!(checked(MULTI_READ, &body)
            .unwrap_err()
            .contains("1073741824"));
    }

    #[test]
    fn replies_to_other_operations_and_errors_pass() {
        assert_eq!(checked(GET_DATA, &names(i32::MAX, &[])), Ok(()));
        let in_flight = Mutex::new(HashMap::from([(5, GET_CHILDREN)]));
        let mut failed = reply(5, &[]);
        failed[12..16].copy_from_slice(&(-101i32).to_be_bytes());
        assert_eq!(check(&failed, &in_flight), Ok(()));
        assert!(check(&[0; 8], &in_flight).is_err());
    }

    #[test]
    fn a_reply_to_no_request_is_a_lie() {
        let in_flight = Mutex::new(HashMap::from([(5, GET_DATA)]));
        let why = check(&reply(6, &[]), &in_flight).unwrap_err();
        assert!(why.contains("xid 6"), "{why}");
        // Answered once: a second reply to it is to no request either.
        assert_eq!(check(&reply(5, &[]), &in_flight), Ok(()));
        assert!(check(&reply(5, &[]), &in_flight).is_err());
        // Watch events (-1) and pings (-2) answer no request of their own.
        assert_eq!(check(&reply(-1, &[]), &in_flight), Ok(()));
        assert_eq!(check(&reply(-2, &[]), &in_flight), Ok(()));
    }
}
