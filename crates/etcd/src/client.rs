//! The calls dlock makes to one etcd endpoint, through tonic's generic gRPC client with prost's
//! codec on the messages of `rpc`: a channel per endpoint (TLS through rustls with ring, trusting
//! the system's CAs or `SSL_CERT_FILE`), the user's token in each call's `token` metadata, and a
//! token the server no longer takes (expired, or the server restarted) obtained again once and
//! the call sent again, as etcd's own clients do. Each answer is bounded by tonic's decoding limit
//! before anything is allocated for it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::uri::PathAndQuery;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::client::Grpc;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status, Streaming};
use tonic_prost::ProstCodec;

use super::rpc::*;

/// The largest answer dlock reads (tonic's default, stated here): it bounds what a forged length
/// can make dlock allocate.
const MAX_ANSWER: usize = 4 << 20;

/// What etcd says of a token it does not take.
const INVALID_TOKEN: &str = "etcdserver: invalid auth token";

/// Why a call failed.
#[derive(Debug)]
pub(super) enum Error {
    /// The server's answer, or tonic's account of a connection that failed (`Unavailable`).
    Status(Status),
    /// A stream (a watch, a keep-alive) ended or could not be written to.
    StreamEnded(&'static str),
    /// The server said the lease does not exist (a keep-alive answered with TTL zero).
    LeaseNotFound,
    /// The server did something it should not have.
    Unexpected(String),
    /// The address could not make a gRPC endpoint.
    Endpoint(String),
}

/// A client of one endpoint; clones share the connection and the token.
#[derive(Clone)]
pub(super) struct Client {
    grpc: Grpc<Channel>,
    credentials: Option<Arc<(String, String)>>,
    token: Arc<RwLock<Option<MetadataValue<Ascii>>>>,
    /// One refresh at a time: concurrent calls refused the same token authenticate once.
    refreshing: Arc<tokio::sync::Mutex<()>>,
}

/// A lease's keep-alive stream: a request sent on the one side gets an answer on the other.
pub(super) type KeepAlive = (
    mpsc::Sender<LeaseKeepAliveRequest>,
    Streaming<LeaseKeepAliveResponse>,
);

/// An open watch: its answers, and the request side, which must stay open while watching.
pub(super) struct Watch {
    _requests: mpsc::Sender<WatchRequest>,
    pub(super) answers: Streaming<WatchResponse>,
}

impl Client {
    /// A client of `endpoint` (`http://host:port` or `https://host:port`) that connects on its
    /// first call, within `connect_timeout`. Nothing is sent until then.
    pub(super) fn new(
        endpoint: &str,
        tls: bool,
        connect_timeout: Duration,
        credentials: Option<(String, String)>,
    ) -> Result<Client, Error> {
        let mut endpoint = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| Error::Endpoint(e.to_string()))?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true);
        if tls {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_native_roots())
                .map_err(|e| Error::Endpoint(e.to_string()))?;
        }
        let grpc = Grpc::new(endpoint.connect_lazy()).max_decoding_message_size(MAX_ANSWER);
        Ok(Client {
            grpc,
            credentials: credentials.map(Arc::new),
            token: Arc::default(),
            refreshing: Arc::default(),
        })
    }

    /// Obtains a token with the user's credentials, if any (the first call of a connection).
    pub(super) async fn authenticate(&self) -> Result<(), Error> {
        let Some(credentials) = &self.credentials else {
            return Ok(());
        };
        let request = AuthenticateRequest {
            name: credentials.0.clone(),
            password: credentials.1.clone(),
        };
        let answer: AuthenticateResponse = self
            .once("/etcdserverpb.Auth/Authenticate", request, false)
            .await?;
        let token = answer
            .token
            .parse()
            .map_err(|_| Error::Unexpected("the server gave a token that is not text".into()))?;
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = Some(token);
        Ok(())
    }

    pub(super) async fn range(&self, range: RangeRequest) -> Result<RangeResponse, Error> {
        self.unary("/etcdserverpb.KV/Range", range).await
    }

    pub(super) async fn txn(&self, txn: TxnRequest) -> Result<TxnResponse, Error> {
        self.unary("/etcdserverpb.KV/Txn", txn).await
    }

    /// A lease of `ttl` seconds: its ID and the TTL granted.
    pub(super) async fn grant(&self, ttl: i64) -> Result<LeaseGrantResponse, Error> {
        self.unary("/etcdserverpb.Lease/LeaseGrant", LeaseGrantRequest { ttl })
            .await
    }

    pub(super) async fn revoke(&self, id: i64) -> Result<(), Error> {
        let _: LeaseRevokeResponse = self
            .unary("/etcdserverpb.Lease/LeaseRevoke", LeaseRevokeRequest { id })
            .await?;
        Ok(())
    }

    /// The seconds lease `id` has left (-1: gone).
    pub(super) async fn time_to_live(&self, id: i64) -> Result<i64, Error> {
        let answer: LeaseTimeToLiveResponse = self
            .unary(
                "/etcdserverpb.Lease/LeaseTimeToLive",
                LeaseTimeToLiveRequest { id },
            )
            .await?;
        Ok(answer.ttl)
    }

    /// Opens a keep-alive stream for lease `id` and sends the first keep-alive; fails with
    /// `LeaseNotFound` when its answer says the lease is gone.
    pub(super) async fn keep_alive(&self, id: i64) -> Result<KeepAlive, Error> {
        let (sender, mut answers): KeepAlive = self
            .stream(
                "/etcdserverpb.Lease/LeaseKeepAlive",
                LeaseKeepAliveRequest { id },
            )
            .await?;
        match answers.message().await.map_err(Error::Status)? {
            Some(answer) if answer.ttl > 0 => Ok((sender, answers)),
            Some(_) => Err(Error::LeaseNotFound),
            None => Err(Error::StreamEnded("the lease keep-alive stream ended")),
        }
    }

    /// Watches for deletions of `key` (with `range_end`, of the keys up to it), from now on.
    pub(super) async fn watch_deletions(
        &self,
        key: Vec<u8>,
        range_end: Vec<u8>,
    ) -> Result<Watch, Error> {
        let create = WatchCreateRequest {
            key,
            range_end,
            filters: vec![FilterType::NoPut as i32],
        };
        let (requests, answers) = self
            .stream("/etcdserverpb.Watch/Watch", WatchRequest::create(create))
            .await?;
        Ok(Watch {
            _requests: requests,
            answers,
        })
    }

    /// Watches every change (a put, a delete) of each of `keys`, from now on: one watch per key,
    /// all on one stream, each answering first with `created`. None is an error.
    pub(super) async fn watch_changes(&self, keys: Vec<Vec<u8>>) -> Result<Watch, Error> {
        let mut creates = keys.into_iter().map(|key| {
            WatchRequest::create(WatchCreateRequest {
                key,
                ..WatchCreateRequest::default()
            })
        });
        let first = creates
            .next()
            .ok_or_else(|| Error::Unexpected("a watch of no key".into()))?;
        let (requests, answers) = self.stream("/etcdserverpb.Watch/Watch", first).await?;
        // Bounded: one request per key; the stream takes them as the server reads them.
        for create in creates {
            requests
                .send(create)
                .await
                .map_err(|_| Error::StreamEnded("the watch stream closed"))?;
        }
        Ok(Watch {
            _requests: requests,
            answers,
        })
    }

    /// A unary call, sent again once with a fresh token when the server refused the one it
    /// carried.
    async fn unary<Q, A>(&self, path: &'static str, request: Q) -> Result<A, Error>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let sent_with = self.current_token();
        match self.once(path, request.clone(), true).await {
            Err(Error::Status(status)) if self.refused_token(&status) => {
                self.refresh(sent_with).await?;
                self.once(path, request, true).await
            }
            other => other,
        }
    }

    async fn once<Q, A>(&self, path: &'static str, request: Q, token: bool) -> Result<A, Error>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.ready().await?;
        let mut request = tonic::Request::new(request);
        if token {
            self.sign(&mut request);
        }
        let path = PathAndQuery::from_static(path);
        let answer = grpc
            .unary(request, path, ProstCodec::<Q, A>::default())
            .await
            .map_err(Error::Status)?;
        Ok(answer.into_inner())
    }

    /// Opens a stream with `first` as its first request; as `unary`, again once with a fresh
    /// token when the server refused the one it carried.
    async fn stream<Q, A>(
        &self,
        path: &'static str,
        first: Q,
    ) -> Result<(mpsc::Sender<Q>, Streaming<A>), Error>
    where
        Q: prost::Message + Clone + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        let sent_with = self.current_token();
        match self.stream_once(path, first.clone()).await {
            Err(Error::Status(status)) if self.refused_token(&status) => {
                self.refresh(sent_with).await?;
                self.stream_once(path, first).await
            }
            other => other,
        }
    }

    async fn stream_once<Q, A>(
        &self,
        path: &'static str,
        first: Q,
    ) -> Result<(mpsc::Sender<Q>, Streaming<A>), Error>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        // dlock sends one request per answer it waits for: a small buffer is plenty.
        let (sender, receiver) = mpsc::channel(4);
        sender
            .send(first)
            .await
            .map_err(|_| Error::StreamEnded("the request stream closed"))?;
        let mut grpc = self.ready().await?;
        let mut request = tonic::Request::new(ReceiverStream::new(receiver));
        self.sign(&mut request);
        let path = PathAndQuery::from_static(path);
        let answers = grpc
            .streaming(request, path, ProstCodec::<Q, A>::default())
            .await
            .map_err(Error::Status)?;
        Ok((sender, answers.into_inner()))
    }

    async fn ready(&self) -> Result<Grpc<Channel>, Error> {
        let mut grpc = self.grpc.clone();
        grpc.ready().await.map_err(|_| {
            Error::Status(Status::unavailable(
                "the connection is not ready for a call",
            ))
        })?;
        Ok(grpc)
    }

    fn current_token(&self) -> Option<MetadataValue<Ascii>> {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn sign<T>(&self, request: &mut tonic::Request<T>) {
        if let Some(token) = self.current_token() {
            request.metadata_mut().insert("token", token);
        }
    }

    /// Whether `status` refuses the token a call carried (worth a fresh one: only with
    /// credentials). etcd says `Unauthenticated`; services built on its in-process client say
    /// `Unknown` with the same words.
    fn refused_token(&self, status: &Status) -> bool {
        self.credentials.is_some()
            && match status.code() {
                Code::Unauthenticated => true,
                Code::Unknown => status.message() == INVALID_TOKEN,
                _ => false,
            }
    }

    /// A fresh token, unless a concurrent call has replaced `stale` already.
    async fn refresh(&self, stale: Option<MetadataValue<Ascii>>) -> Result<(), Error> {
        let _one_at_a_time = self.refreshing.lock().await;
        if self.current_token() != stale {
            return Ok(());
        }
        self.authenticate().await
    }
}
