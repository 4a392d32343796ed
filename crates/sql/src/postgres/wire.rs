//! The socket under the PostgreSQL client: dlock dials it (TCP, keepalives, a user timeout) and
//! reads the length of every message the server sends before the client does.
//!
//! tokio-postgres reserves a message's whole declared length as soon as it has read the 5-byte
//! header, before the body arrives: a server (or a stranger on the path, without TLS) that forges
//! a length near 4 GiB would make dlock allocate that much. A length above [`MAX_MESSAGE`] (none of
//! dlock's answers comes near it) ends the connection instead, as an unreadable answer. With TLS the
//! check sits above the TLS layer, where the messages are.
//!
//! A server that sends rows (or notices, or notifications) without end would make the client
//! collect them all: the messages between two ReadyForQuery are bounded too, at [`MAX_ANSWER`]
//! messages and [`MAX_ANSWER_BYTES`] bytes (dlock's largest answer, `list`, is one row a holder or
//! waiter), so a call holds at most that much, whatever the server sends.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

/// The longest message dlock accepts from a server, its length field included.
pub const MAX_MESSAGE: u32 = 16 << 20;

/// The most messages dlock reads between two ReadyForQuery (one answer): rows, notices and
/// notifications alike.
pub const MAX_ANSWER: u32 = 100_000;

/// The most bytes dlock reads between two ReadyForQuery, headers included.
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Connects to the URL's one TCP host (the address parser allows no other), with the config's
/// keepalive idle time and TCP user timeout.
pub async fn dial(config: &tokio_postgres::Config) -> io::Result<TcpStream> {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let stream = match (config.get_hostaddrs().first(), config.get_hosts().first()) {
        (Some(addr), _) => TcpStream::connect((*addr, port)).await?,
        (None, Some(tokio_postgres::config::Host::Tcp(host))) => {
            TcpStream::connect((host.as_str(), port)).await?
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no TCP host to connect to",
            ))
        }
    };
    stream.set_nodelay(true)?;
    let socket = socket2::SockRef::from(&stream);
    let keepalive = socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(config.get_tcp_user_timeout().copied())?;
    Ok(stream)
}

/// A stream whose reads fail on a server message longer than [`MAX_MESSAGE`] (or shorter than its
/// own length field), before the bytes that declare it reach the client.
pub struct Bounded<S> {
    inner: S,
    /// The header of the message being read: its type byte and 4-byte length, `have` of them so far.
    header: [u8; 5],
    have: usize,
    /// What remains of the current message's body.
    body_left: u64,
    /// The messages and bytes of the answer being read (since the last ReadyForQuery).
    answer: (u32, u64),
    /// Once a message was refused, every read fails, with this error.
    refused: Option<(io::ErrorKind, String)>,
}

impl<S> Bounded<S> {
    pub fn new(inner: S) -> Bounded<S> {
        Bounded {
            inner,
            header: [0; 5],
            have: 0,
            body_left: 0,
            answer: (0, 0),
            refused: None,
        }
    }

    /// Follows the messages through `bytes`, just read; fails on a forged length.
    fn follow(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = usize::try_from(self.body_left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                bytes = &bytes[n..];
                self.body_left -= n as u64;
                continue;
            }
            let n = (self.header.len() - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == self.header.len() {
                self.have = 0;
                let len = u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]);
                if !(4..=MAX_MESSAGE).contains(&len) {
                    return Err(self.refuse(forged(len)));
                }
                self.body_left = u64::from(len - 4);
                self.answer = match self.header[0] {
                    // ReadyForQuery: the answer is whole.
                    b'Z' => (0, 0),
                    _ => (self.answer.0 + 1, self.answer.1 + u64::from(len) + 1),
                };
                if self.answer.0 > MAX_ANSWER || self.answer.1 > MAX_ANSWER_BYTES {
                    return Err(self.refuse(endless()));
                }
            }
        }
        Ok(())
    }

    /// Fails this read and every later one with `e`.
    fn refuse(&mut self, e: io::Error) -> io::Error {
        self.refused = Some((e.kind(), e.to_string()));
        e
    }
}

/// The error for an answer past [`MAX_ANSWER`] messages or [`MAX_ANSWER_BYTES`].
fn endless() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the server sent more than {MAX_ANSWER} messages or {} MiB in one answer (dlock's \
             answers never come near); is it PostgreSQL?",
            MAX_ANSWER_BYTES >> 20
        ),
    )
}

/// The error for a message of `len` bytes.
fn forged(len: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the server announced a message of {len} bytes (at most {} MiB accepted); is it \
             PostgreSQL?",
            MAX_MESSAGE >> 20
        ),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some((kind, why)) = &self.refused {
            return Poll::Ready(Err(io::Error::new(*kind, why.clone())));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let this = &mut *self;
        Poll::Ready(this.follow(&buf.filled()[before..]))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Bounded<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose streams are [`Bounded`]: the check reads the messages inside TLS.
pub struct BoundedTls<T>(pub T);

impl<S, T> TlsConnect<S> for BoundedTls<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
    T::Stream: Send + 'static,
{
    type Stream = Bounded<T::Stream>;
    type Error = T::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, T::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let handshake = self.0.connect(stream);
        Box::pin(async move { handshake.await.map(Bounded::new) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn messages_split_anywhere_pass_and_a_forged_length_fails() {
        let mut wire = message(b'R', &[0, 0, 0, 0]);
        wire.extend(message(b'Z', b"I"));
        wire.extend(message(b'D', &[7; 300]));
        for cut in 0..wire.len() {
            let mut b = Bounded::new(());
            b.follow(&wire[..cut]).unwrap();
            b.follow(&wire[cut..]).unwrap();
            assert_eq!((b.have, b.body_left), (0, 0), "cut at {cut}");
        }
        let mut b = Bounded::new(());
        b.follow(&wire).unwrap();
        let huge = [b'D', 0x40, 0, 0, 0];
        b.follow(&huge[..3]).unwrap();
        let e = b.follow(&huge[3..]).unwrap_err();
        assert!(e.to_string().contains("1073741824 bytes"), "{e}");
        assert!(b.refused.is_some());
        let mut b = Bounded::new(());
        assert!(
            b.follow(&[b'E', 0, 0, 0, 3]).is_err(),
            "shorter than its length field"
        );
    }

    #[test]
    fn an_answer_is_bounded_until_ready_for_query() {
        let row = message(b'D', &[0, 1, 0, 0, 0, 1, b'x']);
        let ready = message(b'Z', b"I");
        // As many rows as an answer may have, then the next answer: the count starts again.
        let mut b = Bounded::new(());
        for _ in 0..2 {
            for _ in 0..MAX_ANSWER {
                b.follow(&row).unwrap();
            }
            b.follow(&ready).unwrap();
        }
        for _ in 0..MAX_ANSWER {
            b.follow(&row).unwrap();
        }
        let e = b.follow(&row).unwrap_err();
        assert!(e.to_string().contains("in one answer"), "{e}");
        // Bytes: three messages of 16 MiB fit, a fourth goes past 64 MiB.
        let mut b = Bounded::new(());
        let big = [b'D', 0x01, 0, 0, 0];
        for _ in 0..3 {
            b.follow(&big).unwrap();
            b.body_left = 0;
        }
        b.follow(&big).unwrap_err();
    }
}
