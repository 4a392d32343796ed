//! The messages of etcd's v3 gRPC API that dlock sends and reads, written by hand as prost
//! messages: only the fields dlock uses, with the field numbers of etcd v3 (3.4 and later) as
//! declared in etcd's `api/etcdserverpb/rpc.proto` (KV, Lease, Watch, Auth), `api/mvccpb/kv.proto`
//! (KeyValue, Event). A field left out here is skipped when read and never sent, as protobuf
//! allows, so no protoc and no generated code are needed. The service paths are in `client`.

// The field names and numbers follow the .proto files; each struct holds what dlock needs. Every
// enum starts with its zero value, as in the .proto: prost takes the first variant for the default
// it leaves unsent, and the server reads an unsent field as zero.

/// Every answer's header: the store's revision when the call was served.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ResponseHeader {
    #[prost(int64, tag = "3")]
    pub(super) revision: i64,
}

/// mvccpb.KeyValue: one key as stored.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub(super) create_revision: i64,
    #[prost(int64, tag = "3")]
    pub(super) mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub(super) value: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub(super) lease: i64,
}

/// mvccpb.Event.EventType.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(super) enum EventType {
    Put = 0,
    Delete = 1,
}

/// mvccpb.Event: a change a watch reports.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Event {
    #[prost(enumeration = "EventType", tag = "1")]
    pub(super) r#type: i32,
}

/// RangeRequest.SortOrder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(super) enum SortOrder {
    None = 0,
    Ascend = 1,
    Descend = 2,
}

/// RangeRequest.SortTarget (dlock sorts only by create revision).
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(super) enum SortTarget {
    Key = 0,
    Create = 2,
}

/// KV.Range: the keys from `key` up to `range_end` (empty: `key` alone).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub(super) limit: i64,
    /// The revision to read at (0: the latest).
    #[prost(int64, tag = "4")]
    pub(super) revision: i64,
    #[prost(enumeration = "SortOrder", tag = "5")]
    pub(super) sort_order: i32,
    #[prost(enumeration = "SortTarget", tag = "6")]
    pub(super) sort_target: i32,
    #[prost(bool, tag = "9")]
    pub(super) count_only: bool,
    #[prost(int64, tag = "13")]
    pub(super) max_create_revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub(super) header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub(super) kvs: Vec<KeyValue>,
    #[prost(bool, tag = "3")]
    pub(super) more: bool,
}

/// KV.Put (dlock puts only inside a transaction).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) value: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub(super) lease: i64,
}

/// KV.DeleteRange (dlock deletes only inside a transaction).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct DeleteRangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
}

/// Compare.CompareResult.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(super) enum CompareResult {
    Equal = 0,
}

/// Compare.CompareTarget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(super) enum CompareTarget {
    Version = 0,
    Create = 1,
    Mod = 2,
}

/// A transaction's condition on one key, or on every key of a range (dlock compares only
/// create and mod revisions).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Compare {
    #[prost(enumeration = "CompareResult", tag = "1")]
    pub(super) result: i32,
    #[prost(enumeration = "CompareTarget", tag = "2")]
    pub(super) target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub(super) key: Vec<u8>,
    #[prost(oneof = "TargetUnion", tags = "5, 6")]
    pub(super) target_union: Option<TargetUnion>,
    /// With it, the condition holds for every key from `key` up to this (with no key there, for
    /// none: the revisions compared are then zero).
    #[prost(bytes = "vec", tag = "64")]
    pub(super) range_end: Vec<u8>,
}

/// Compare.target_union: what the key's target is compared with.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum TargetUnion {
    #[prost(int64, tag = "5")]
    CreateRevision(i64),
    #[prost(int64, tag = "6")]
    ModRevision(i64),
}

/// One operation of a transaction (RequestOp.request).
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum Request {
    #[prost(message, tag = "1")]
    Range(RangeRequest),
    #[prost(message, tag = "2")]
    Put(PutRequest),
    #[prost(message, tag = "3")]
    DeleteRange(DeleteRangeRequest),
    /// A transaction inside a transaction (etcd 3.3 and later): its conditions are judged with the
    /// outer ones, on the store as it was before any write of the whole.
    #[prost(message, tag = "4")]
    Txn(TxnRequest),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RequestOp {
    #[prost(oneof = "Request", tags = "1, 2, 3, 4")]
    pub(super) request: Option<Request>,
}

/// One operation's answer (ResponseOp.response): dlock reads only those of its ranges.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum Response {
    #[prost(message, tag = "1")]
    Range(RangeResponse),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ResponseOp {
    #[prost(oneof = "Response", tags = "1")]
    pub(super) response: Option<Response>,
}

/// KV.Txn: `success` if every comparison holds, else `failure`, in one revision.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub(super) compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub(super) success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub(super) failure: Vec<RequestOp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub(super) header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub(super) succeeded: bool,
    #[prost(message, repeated, tag = "3")]
    pub(super) responses: Vec<ResponseOp>,
}

/// Lease.LeaseGrant: a lease of `ttl` seconds (the server picks its ID).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseGrantRequest {
    #[prost(int64, tag = "1")]
    pub(super) ttl: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseGrantResponse {
    #[prost(int64, tag = "2")]
    pub(super) id: i64,
    #[prost(int64, tag = "3")]
    pub(super) ttl: i64,
}

/// Lease.LeaseRevoke: ends a lease and deletes its keys.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseRevokeRequest {
    #[prost(int64, tag = "1")]
    pub(super) id: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseRevokeResponse {}

/// Lease.LeaseKeepAlive (a stream each way): one per renewal.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseKeepAliveRequest {
    #[prost(int64, tag = "1")]
    pub(super) id: i64,
}

/// The lease's TTL in seconds from now; zero or less when it is gone.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseKeepAliveResponse {
    #[prost(int64, tag = "3")]
    pub(super) ttl: i64,
}

/// Lease.LeaseTimeToLive: how long a lease has left.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseTimeToLiveRequest {
    #[prost(int64, tag = "1")]
    pub(super) id: i64,
}

/// Seconds left; -1 when the lease is gone.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeaseTimeToLiveResponse {
    #[prost(int64, tag = "3")]
    pub(super) ttl: i64,
}

/// WatchCreateRequest.FilterType: which events the server leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(super) enum FilterType {
    NoPut = 0,
}

/// A watch on `key` (up to `range_end`), from the present.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) range_end: Vec<u8>,
    #[prost(enumeration = "FilterType", repeated, tag = "5")]
    pub(super) filters: Vec<i32>,
}

/// WatchRequest.request_union: dlock only creates watches (all dropped with their stream).
#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum WatchRequestUnion {
    #[prost(message, tag = "1")]
    CreateRequest(WatchCreateRequest),
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct WatchRequest {
    #[prost(oneof = "WatchRequestUnion", tags = "1")]
    pub(super) request_union: Option<WatchRequestUnion>,
}

impl WatchRequest {
    pub(super) fn create(create: WatchCreateRequest) -> WatchRequest {
        WatchRequest {
            request_union: Some(WatchRequestUnion::CreateRequest(create)),
        }
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    pub(super) header: Option<ResponseHeader>,
    #[prost(bool, tag = "3")]
    pub(super) created: bool,
    #[prost(bool, tag = "4")]
    pub(super) canceled: bool,
    #[prost(message, repeated, tag = "11")]
    pub(super) events: Vec<Event>,
}

/// Auth.Authenticate: a token for a user and password.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct AuthenticateRequest {
    #[prost(string, tag = "1")]
    pub(super) name: String,
    #[prost(string, tag = "2")]
    pub(super) password: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct AuthenticateResponse {
    #[prost(string, tag = "2")]
    pub(super) token: String,
}

/// The end of the range of every key that starts with `prefix` (etcd's `GetPrefixRangeEnd`):
/// the prefix with its last byte below 0xff incremented, and what follows dropped; all keys
/// (`\0`) when every byte is 0xff.
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

impl RangeRequest {
    /// Every key under `prefix`, oldest first.
    pub(super) fn prefix(prefix: &str) -> RangeRequest {
        RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            sort_order: SortOrder::Ascend as i32,
            sort_target: SortTarget::Create as i32,
            ..RangeRequest::default()
        }
    }

    /// The one key `key`.
    pub(super) fn key(key: &str) -> RangeRequest {
        RangeRequest {
            key: key.as_bytes().to_vec(),
            ..RangeRequest::default()
        }
    }

    pub(super) fn newest_first(self) -> RangeRequest {
        RangeRequest {
            sort_order: SortOrder::Descend as i32,
            ..self
        }
    }

    pub(super) fn limit(self, limit: i64) -> RangeRequest {
        RangeRequest { limit, ..self }
    }
}

impl Compare {
    /// Holds when `key`'s create revision is `revision` (0: the key does not exist).
    pub(super) fn created_at(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
        Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: key.into(),
            target_union: Some(TargetUnion::CreateRevision(revision)),
            range_end: Vec::new(),
        }
    }

    /// Holds when `key` was last written at `revision` (0: the key does not exist).
    pub(super) fn modified_at(key: impl Into<Vec<u8>>, revision: i64) -> Compare {
        Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Mod as i32,
            key: key.into(),
            target_union: Some(TargetUnion::ModRevision(revision)),
            range_end: Vec::new(),
        }
    }

    /// Holds when no key starts with `prefix`.
    pub(super) fn none_under(prefix: &str) -> Compare {
        Compare {
            range_end: prefix_end(prefix.as_bytes()),
            ..Compare::created_at(prefix, 0)
        }
    }
}

impl RequestOp {
    pub(super) fn range(range: RangeRequest) -> RequestOp {
        RequestOp {
            request: Some(Request::Range(range)),
        }
    }

    pub(super) fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> RequestOp {
        RequestOp {
            request: Some(Request::Put(PutRequest {
                key: key.into(),
                value: value.into(),
                lease,
            })),
        }
    }

    pub(super) fn delete(key: impl Into<Vec<u8>>) -> RequestOp {
        RequestOp {
            request: Some(Request::DeleteRange(DeleteRangeRequest { key: key.into() })),
        }
    }

    pub(super) fn txn(txn: TxnRequest) -> RequestOp {
        RequestOp {
            request: Some(Request::Txn(txn)),
        }
    }
}

impl TxnRequest {
    /// `success` if every comparison in `when` holds (none: always).
    pub(super) fn new(when: Vec<Compare>, success: Vec<RequestOp>) -> TxnRequest {
        TxnRequest {
            compare: when,
            success,
            failure: Vec::new(),
        }
    }

    /// With `failure` done when a comparison does not hold.
    pub(super) fn otherwise(self, failure: Vec<RequestOp>) -> TxnRequest {
        TxnRequest { failure, ..self }
    }
}

impl TxnResponse {
    pub(super) fn revision(&self) -> i64 {
        self.header.as_ref().map_or(0, |h| h.revision)
    }

    /// The answers of the transaction's ranges, in order.
    pub(super) fn ranges(self) -> impl Iterator<Item = RangeResponse> {
        self.responses
            .into_iter()
            .filter_map(|r| r.response)
            .map(|Response::Range(range)| range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_prefix_ends_where_etcd_ends_it() {
        assert_eq!(prefix_end(b"/dlock/a/"), b"/dlock/a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    /// The bytes etcd's own encoding gives (field number << 3 | wire type, then the value).
    #[test]
    fn messages_encode_with_etcds_field_numbers() {
        let compare = Compare::created_at("k", 7);
        // result EQUAL and target VERSION are zero, not sent; target CREATE=1 (field 2), key
        // (field 3), create_revision (field 5).
        assert_eq!(compare.encode_to_vec(), b"\x10\x01\x1a\x01k\x28\x07");
        // target MOD=2, key, mod_revision (field 6).
        let compare = Compare::modified_at("k", 7);
        assert_eq!(compare.encode_to_vec(), b"\x10\x02\x1a\x01k\x30\x07");
        // create_revision 0 is sent (a oneof member), then range_end (field 64: two-byte tag).
        let compare = Compare::none_under("a");
        assert_eq!(
            compare.encode_to_vec(),
            b"\x10\x01\x1a\x01a\x28\x00\x82\x04\x01b"
        );
        let range = RangeRequest::prefix("a").limit(1);
        assert_eq!(
            range.encode_to_vec(),
            b"\x0a\x01a\x12\x01b\x18\x01\x28\x01\x30\x02"
        );
        let watch = WatchRequest {
            request_union: Some(WatchRequestUnion::CreateRequest(WatchCreateRequest {
                key: b"k".to_vec(),
                range_end: Vec::new(),
                filters: vec![FilterType::NoPut as i32],
            })),
        };
        assert_eq!(watch.encode_to_vec(), b"\x0a\x06\x0a\x01k\x2a\x01\x00");
        let kv = KeyValue::decode(&b"\x0a\x01k\x10\x05\x18\x06\x20\x01\x2a\x01v\x30\x09"[..])
            .expect("decodes");
        assert_eq!(
            (kv.key, kv.create_revision, kv.value, kv.lease),
            (b"k".to_vec(), 5, b"v".to_vec(), 9)
        );
    }
}
