//! Reading a value in a Redis server's reply or message as text: what the scripts' replies, the
//! pub/sub messages and `CLUSTER SLOTS` are read with.

use redis::Value;

/// `value` as text: a string (if UTF-8) or a whole number; `None` for anything else.
pub(super) fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}
