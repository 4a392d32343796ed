//! A fake etcd server: just enough of etcd's gRPC API, over plain HTTP/2, for `dlock run` to take
//! a free lock and renew it, with the lease TTL it answers chosen by the test (what no real etcd
//! can be made to answer). Every Range finds one key, created at `REVISION`; LeaseGrant and each
//! keep-alive answer `ttl`; the acquiring Txn succeeds as on a free lock. Once `fall_silent` is
//! called it answers nothing more (its connections stay open). The messages are written by hand
//! in protobuf's wire format, with etcd's field numbers (`api/etcdserverpb/rpc.proto`).

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;

/// The revision of every answer, and of the key every Range finds: the token dlock gets.
pub const REVISION: i64 = 7;
const LEASE_ID: i64 = 0x2a;

pub struct FakeEtcd {
    port: u16,
    state: Arc<State>,
    runtime: Option<tokio::runtime::Runtime>,
}

struct State {
    ttl: i64,
    silent: AtomicBool,
    keep_alives: AtomicUsize,
}

impl FakeEtcd {
    /// A fake answering LeaseGrant and keep-alives with `ttl`.
    pub fn start(ttl: i64) -> FakeEtcd {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the fake etcd");
        let port = listener.local_addr().expect("its address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the fake etcd's runtime");
        let state = Arc::new(State {
            ttl,
            silent: AtomicBool::new(false),
            keep_alives: AtomicUsize::new(0),
        });
        let serving = state.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(connection(socket, serving.clone()));
            }
        });
        FakeEtcd {
            port,
            state,
            runtime: Some(runtime),
        }
    }

    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// From now on, no answer to anything.
    pub fn fall_silent(&self) {
        self.state.silent.store(true, Ordering::SeqCst);
    }

    /// Keep-alives answered so far.
    pub fn keep_alives(&self) -> usize {
        self.state.keep_alives.load(Ordering::SeqCst)
    }
}

impl Drop for FakeEtcd {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn connection(socket: tokio::net::TcpStream, state: Arc<State>) {
    let Ok(mut conn) = h2::server::handshake(socket).await else {
        return;
    };
    while let Some(Ok((request, respond))) = conn.accept().await {
        let path = request.uri().path().to_owned();
        tokio::spawn(call(path, request.into_body(), respond, state.clone()));
    }
}

/// One call: each request message gets its answer (a stream's too), until the client ends it.
async fn call(
    path: String,
    mut body: RecvStream,
    mut respond: SendResponse<Bytes>,
    state: Arc<State>,
) {
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("a response head");
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    let unary = !path.ends_with("/LeaseKeepAlive");
    let mut pending = Vec::new();
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
        pending.extend_from_slice(&data);
        // One answer for each whole message (5 bytes of framing, then the message).
        while pending.len() >= 5 {
            let len = u32::from_be_bytes([pending[1], pending[2], pending[3], pending[4]]) as usize;
            if pending.len() < 5 + len {
                break;
            }
            pending.drain(..5 + len);
            if state.silent.load(Ordering::SeqCst) {
                continue;
            }
            if !unary {
                state.keep_alives.fetch_add(1, Ordering::SeqCst);
            }
            let Some(answer) = answer(&path, state.ttl) else {
                let _ = send.send_trailers(trailers("12"));
                return;
            };
            if send.send_data(framed(&answer), false).is_err() {
                return;
            }
            if unary {
                let _ = send.send_trailers(trailers("0"));
                return;
            }
        }
    }
    if state.silent.load(Ordering::SeqCst) {
        // Dropping the stream would reset it: a silent server keeps it open, answering nothing.
        std::future::pending::<()>().await;
    }
    let _ = send.send_trailers(trailers("0"));
}

fn trailers(status: &str) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    map.insert("grpc-status", status.parse().expect("a status"));
    map
}

fn framed(message: &[u8]) -> Bytes {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// The answer to a call of `path`; `None` for a call the fake does not know (UNIMPLEMENTED).
fn answer(path: &str, ttl: i64) -> Option<Vec<u8>> {
    let header = bytes_field(1, &int_field(3, REVISION));
    let kv = [
        bytes_field(1, b"/dlock/fake/2a"),
        int_field(2, REVISION),
        int_field(3, REVISION),
        int_field(4, 1),
        int_field(6, LEASE_ID),
    ]
    .concat();
    let range = [header.clone(), bytes_field(2, &kv), int_field(4, 1)].concat();
    Some(match path.rsplit('/').next()? {
        "Range" => range,
        // LeaseGrantResponse and LeaseKeepAliveResponse: header, ID, TTL.
        "LeaseGrant" | "LeaseKeepAlive" => {
            [header, int_field(2, LEASE_ID), int_field(3, ttl)].concat()
        }
        "LeaseRevoke" => header,
        // Succeeded, a put's answer, then the answers of the acquiring transaction's ranges.
        "Txn" => [
            header,
            int_field(2, 1),
            bytes_field(3, &bytes_field(2, &[])),
            bytes_field(3, &bytes_field(1, &range)),
            bytes_field(3, &bytes_field(1, &range)),
        ]
        .concat(),
        _ => return None,
    })
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A varint field (int64: a negative number is its two's complement, ten bytes).
fn int_field(number: u64, value: i64) -> Vec<u8> {
    [varint(number << 3), varint(value as u64)].concat()
}

/// A length-delimited field (bytes, a string, a message).
fn bytes_field(number: u64, value: &[u8]) -> Vec<u8> {
    [
        varint((number << 3) | 2),
        varint(value.len() as u64),
        value.to_vec(),
    ]
    .concat()
}
