//! A small HTTP/1.1 client of dlock's own, over a std socket (TLS through rustls): every call is
//! bounded in time (its budget, read and written in slices of at most `SLICE`) and in size (a
//! head of at most `MAX_HEAD` bytes, a body of at most what the caller allows), so that a node that
//! answers slowly or without end neither holds dlock past its budget nor grows its memory; a stop
//! signal that comes while a call runs abandons it (one that came before it began spares it: a
//! release still gets through). One keep-alive connection, to the first node that answers; a node
//! that cannot be reached passes the call to the next.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_core::backend::stop::Stop;

/// Longest a read or a write blocks before the call looks at its budget and the stop again.
const SLICE: Duration = Duration::from_millis(50);
/// Most bytes of an answer's status line and headers.
const MAX_HEAD: usize = 64 << 10;

/// An answer: its status and its body.
pub(super) struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a call got no answer.
#[derive(Debug)]
pub(super) enum Fault {
    /// No node could be reached, or the one reached did not answer in time, or answered what is no
    /// HTTP (how, for the user).
    Unreachable(String),
    /// A stop signal came while the call ran.
    Stopped,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

struct Conn {
    stream: Stream,
    host: usize,
    /// Whether it carried a call already (a kept-alive connection the node may have closed).
    used: bool,
}

/// The client: the nodes, how to speak to them, and the connection kept alive.
pub(super) struct Http {
    hosts: Vec<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// `Basic ...`
    authorization: Option<String>,
    connect_timeout: Duration,
    stop: Stop,
    conn: Option<Conn>,
    /// The node to try first.
    first: usize,
}

impl Http {
    pub(super) fn new(
        hosts: Vec<String>,
        tls: Option<Arc<rustls::ClientConfig>>,
        credentials: Option<&(String, String)>,
        connect_timeout: Duration,
        stop: Stop,
    ) -> Http {
        Http {
            hosts,
            tls,
            authorization: credentials
                .map(|(user, password)| format!("Basic {}", base64(&format!("{user}:{password}")))),
            connect_timeout,
            stop,
            conn: None,
            first: 0,
        }
    }

    pub(super) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// `METHOD PATH` with the JSON `body`, answered within `budget` with at most `most` bytes of
    /// body. `path` is sent as given (percent-encoded by the caller).
    pub(super) fn call(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        budget: Duration,
        most: usize,
    ) -> Result<Answer, Fault> {
        self.call_unless(method, path, body, budget, most, &|| false)
    }

    /// As `call`, given up (as if stopped) as soon as `give_up` says so: a wait's cancellation,
    /// looked at every `SLICE`.
    pub(super) fn call_unless(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        budget: Duration,
        most: usize,
        give_up: &dyn Fn() -> bool,
    ) -> Result<Answer, Fault> {
        let deadline = Instant::now() + budget;
        // A stop that came before the call began spares it (a release still gets through).
        let stoppable = !self.stop.requested();
        let stop = self.stop.clone();
        let halt = move || (stoppable && stop.requested()) || give_up();
        // Bounded: a second turn only after a kept-alive connection failed before any answer.
        for _ in 0..2 {
            let conn = match self.conn.take() {
                Some(conn) => conn,
                None => self.connect(deadline, &halt)?,
            };
            let reused = conn.used;
            match self.exchange(conn, method, path, body, deadline, most, &halt) {
                Ok(answer) => return Ok(answer),
                Err((Fault::Unreachable(_), false)) if reused => continue,
                Err((fault, _)) => return Err(fault),
            }
        }
        Err(Fault::Unreachable("the connection was closed twice".into()))
    }

    /// A connection to the first node that takes one, starting with the last that did.
    fn connect(&mut self, deadline: Instant, halt: &dyn Fn() -> bool) -> Result<Conn, Fault> {
        let mut why = String::new();
        for turn in 0..self.hosts.len() {
            let host = (self.first + turn) % self.hosts.len();
            if halt() {
                return Err(Fault::Stopped);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.dial(host, left.min(self.connect_timeout), deadline, halt) {
                Ok(stream) => {
                    self.first = host;
                    return Ok(Conn {
                        stream,
                        host,
                        used: false,
                    });
                }
                Err(Fault::Stopped) => return Err(Fault::Stopped),
                Err(Fault::Unreachable(e)) => {
                    if !why.is_empty() {
                        why.push_str("; ");
                    }
                    why.push_str(&format!("{}: {e}", self.hosts[host]));
                }
            }
        }
        if why.is_empty() {
            why = "no time left to connect".into();
        }
        Err(Fault::Unreachable(why))
    }

    fn dial(
        &self,
        host: usize,
        timeout: Duration,
        deadline: Instant,
        halt: &dyn Fn() -> bool,
    ) -> Result<Stream, Fault> {
        let name = &self.hosts[host];
        let unreachable = |e: std::io::Error| Fault::Unreachable(io_words(&e));
        let addresses: Vec<_> = name.to_socket_addrs().map_err(unreachable)?.collect();
        let mut last = Fault::Unreachable("no address".into());
        for address in addresses {
            let socket = match TcpStream::connect_timeout(&address, timeout) {
                Ok(socket) => socket,
                Err(e) => {
                    last = unreachable(e);
                    continue;
                }
            };
            let _ = socket.set_nodelay(true);
            let Some(tls) = &self.tls else {
                return Ok(Stream::Plain(socket));
            };
            let server = host_only(name);
            let server = rustls::pki_types::ServerName::try_from(server.to_owned())
                .map_err(|e| Fault::Unreachable(format!("TLS: {e}")))?;
            let connection = rustls::ClientConnection::new(tls.clone(), server)
                .map_err(|e| Fault::Unreachable(format!("TLS: {e}")))?;
            let mut stream = Stream::Tls(Box::new(rustls::StreamOwned::new(connection, socket)));
            // The handshake, bounded as a call is.
            if let Stream::Tls(tls) = &mut stream {
                while tls.conn.is_handshaking() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Fault::Unreachable("the TLS handshake timed out".into()));
                    }
                    if halt() {
                        return Err(Fault::Stopped);
                    }
                    let _ = tls.sock.set_read_timeout(Some(left.min(SLICE)));
                    let _ = tls.sock.set_write_timeout(Some(left.min(SLICE)));
                    match tls.conn.complete_io(&mut tls.sock) {
                        Ok(_) => {}
                        Err(e) if transient(&e) => {}
                        Err(e) => return Err(Fault::Unreachable(format!("TLS: {}", io_words(&e)))),
                    }
                }
            }
            return Ok(stream);
        }
        Err(last)
    }

    /// One request and its answer on `conn`; an error says whether any of the answer came.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &mut self,
        mut conn: Conn,
        method: &str,
        path: &str,
        body: &[u8],
        deadline: Instant,
        most: usize,
        halt: &dyn Fn() -> bool,
    ) -> Result<Answer, (Fault, bool)> {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n",
            self.hosts[conn.host],
            body.len()
        );
        if let Some(auth) = &self.authorization {
            request.push_str(&format!("Authorization: {auth}\r\n"));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        let check = |started: bool| -> Result<Duration, (Fault, bool)> {
            if halt() {
                return Err((Fault::Stopped, started));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err((
                    Fault::Unreachable("no answer in time (--connect-timeout)".into()),
                    started,
                ));
            }
            Ok(left.min(SLICE))
        };
        let mut written = 0;
        while written < bytes.len() {
            let slice = check(false)?;
            let _ = conn.stream.socket().set_write_timeout(Some(slice));
            match conn.stream.write(&bytes[written..]) {
                Ok(0) => return Err((Fault::Unreachable("connection closed".into()), false)),
                Ok(n) => written += n,
                Err(e) if transient(&e) => {}
                Err(e) => return Err((Fault::Unreachable(io_words(&e)), false)),
            }
        }
        loop {
            let slice = check(false)?;
            let _ = conn.stream.socket().set_write_timeout(Some(slice));
            match conn.stream.flush() {
                Ok(()) => break,
                Err(e) if transient(&e) => {}
                Err(e) => return Err((Fault::Unreachable(io_words(&e)), false)),
            }
        }
        let mut reader = Reader::default();
        let mut chunk = vec![0u8; 16 << 10];
        let parsed = loop {
            let slice = check(!reader.buf.is_empty())?;
            let _ = conn.stream.socket().set_read_timeout(Some(slice));
            match conn.stream.read(&mut chunk) {
                Ok(0) => {
                    let started = !reader.buf.is_empty();
                    return Err((Fault::Unreachable("connection closed".into()), started));
                }
                Ok(n) => reader.buf.extend_from_slice(&chunk[..n]),
                Err(e) if transient(&e) => continue,
                Err(e) => {
                    let started = !reader.buf.is_empty();
                    return Err((Fault::Unreachable(io_words(&e)), started));
                }
            }
            match reader.parse(most) {
                Ok(Some(parsed)) => break parsed,
                Ok(None) => {}
                Err(why) => return Err((Fault::Unreachable(why), true)),
            }
        };
        conn.used = true;
        if parsed.keep {
            self.conn = Some(conn);
        }
        Ok(Answer {
            status: parsed.status,
            body: parsed.body,
        })
    }
}

/// A read or write that timed out for this slice, or was interrupted by a signal: look at the
/// budget and the stop, and go on.
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// An I/O error in words, without Rust's `(os error N)`.
fn io_words(e: &std::io::Error) -> String {
    dlock_core::text::without_internals(&e.to_string())
}

/// `host` of `host:port` or `[v6]:port`.
fn host_only(hostport: &str) -> &str {
    let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// An answer read so far.
#[derive(Default)]
struct Reader {
    buf: Vec<u8>,
    /// Where the body starts, the head once read.
    head: Option<Head>,
    /// A chunked body: where the next chunk's size line starts, and the body so far.
    chunk_at: usize,
    body: Vec<u8>,
}

struct Head {
    status: u16,
    end: usize,
    length: Option<usize>,
    chunked: bool,
    keep: bool,
}

struct Parsed {
    status: u16,
    body: Vec<u8>,
    keep: bool,
}

impl Reader {
    /// The whole answer, once it has come; an error for an answer that is no HTTP or is too big.
    fn parse(&mut self, most: usize) -> Result<Option<Parsed>, String> {
        if self.head.is_none() {
            let Some(end) = find(&self.buf, b"\r\n\r\n") else {
                if self.buf.len() > MAX_HEAD {
                    return Err(format!("an answer's head over {MAX_HEAD} bytes"));
                }
                return Ok(None);
            };
            let head = Head::parse(&self.buf[..end], end + 4)?;
            if head.length.is_some_and(|l| l > most) {
                return Err(format!("an answer over {most} bytes"));
            }
            self.chunk_at = head.end;
            self.head = Some(head);
        }
        let Some(head) = &self.head else {
            return Ok(None);
        };
        let body = &self.buf[head.end..];
        if body.len() > most.saturating_add(MAX_HEAD) {
            return Err(format!("an answer over {most} bytes"));
        }
        let done = |body: Vec<u8>| Parsed {
            status: head.status,
            body,
            keep: head.keep,
        };
        if let Some(length) = head.length {
            if body.len() < length {
                return Ok(None);
            }
            return Ok(Some(done(body[..length].to_vec())));
        }
        if !head.chunked {
            return Err("an answer without a length".into());
        }
        // Bounded: each turn takes one whole chunk out of the buffer read so far.
        loop {
            let rest = &self.buf[self.chunk_at..];
            let Some(line) = find(rest, b"\r\n") else {
                return Ok(None);
            };
            let size = std::str::from_utf8(&rest[..line])
                .ok()
                .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok())
                .ok_or("a chunked answer that does not read")?;
            if size == 0 {
                let body = std::mem::take(&mut self.body);
                return Ok(Some(done(body)));
            }
            if self.body.len().saturating_add(size) > most {
                return Err(format!("an answer over {most} bytes"));
            }
            let start = line + 2;
            if rest.len() < start + size + 2 {
                return Ok(None);
            }
            self.body.extend_from_slice(&rest[start..start + size]);
            self.chunk_at += start + size + 2;
        }
    }
}

impl Head {
    fn parse(head: &[u8], end: usize) -> Result<Head, String> {
        let text = std::str::from_utf8(head).map_err(|_| "an answer that is no HTTP")?;
        let mut lines = text.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let mut words = status_line.split(' ');
        let version = words.next().unwrap_or_default();
        let status = words
            .next()
            .and_then(|s| s.parse::<u16>().ok())
            .filter(|_| version.starts_with("HTTP/1."))
            .ok_or("an answer that is no HTTP")?;
        let mut head = Head {
            status,
            end,
            length: None,
            chunked: false,
            keep: version == "HTTP/1.1",
        };
        for line in lines {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key.trim().to_ascii_lowercase().as_str() {
                "content-length" => {
                    head.length = Some(value.parse().map_err(|_| "a bad Content-Length")?)
                }
                "transfer-encoding" => head.chunked = value.eq_ignore_ascii_case("chunked"),
                "connection" => head.keep = !value.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        Ok(head)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Standard base64, for the Basic authorization header.
fn base64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in text.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_standard_one() {
        assert_eq!(base64("elastic:changeme"), "ZWxhc3RpYzpjaGFuZ2VtZQ==");
        assert_eq!(base64("ab"), "YWI=");
        assert_eq!(base64("abc"), "YWJj");
        assert_eq!(base64(""), "");
    }

    fn read(raw: &[u8], most: usize) -> Result<Option<Parsed>, String> {
        let mut reader = Reader::default();
        reader.buf.extend_from_slice(raw);
        reader.parse(most)
    }

    #[test]
    fn answers_with_a_length_or_in_chunks_are_read_and_bounded() {
        let plain = read(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", 10)
            .unwrap()
            .unwrap();
        assert_eq!(
            (plain.status, plain.body.as_slice(), plain.keep),
            (200, &b"{}"[..], true)
        );
        assert!(read(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n{}", 10)
            .unwrap()
            .is_none());
        let chunked =
            b"HTTP/1.1 409 C\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n1\r\n \r\n0\r\n\r\n";
        let parsed = read(chunked, 10).unwrap().unwrap();
        assert_eq!((parsed.status, parsed.body.as_slice()), (409, &b"{} "[..]));
        assert!(read(b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n", 10).is_err());
        assert!(read(chunked, 2).is_err());
        assert!(read(b"SSH-2.0-OpenSSH\r\n\r\n", 10).is_err());
        assert!(read(&vec![b'x'; MAX_HEAD + 1], 10).is_err());
    }
}
