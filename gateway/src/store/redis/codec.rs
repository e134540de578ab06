//! The record format in Redis, and the replies the store reads.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use redis::Value;

use crate::store::{OperationRecord, RecordState, RecordedResponse, StoreError};

/// The record format written by this version; anything else reads as corrupt.
const FORMAT_VERSION: &[u8] = b"1";

pub(super) fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

/// What `complete.lua` and `release.lua` found (and did) with an in-flight record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Finished {
    /// Recorded (complete) or deleted (release).
    Yes,
    NoRecord,
    AlreadyDone,
    /// In flight under another owner: left alone.
    NotYours,
    /// In flight with a live lease (an operator's resolution): left alone.
    LeaseLive,
}

pub(super) fn finished(value: &Value) -> Result<Finished, StoreError> {
    match value {
        Value::Int(1) => Ok(Finished::Yes),
        Value::Int(0) => Ok(Finished::NoRecord),
        Value::Int(2) => Ok(Finished::AlreadyDone),
        Value::Int(3) => Ok(Finished::NotYours),
        Value::Int(4) => Ok(Finished::LeaseLive),
        _ => Err(corrupt("script returned an unexpected reply")),
    }
}

pub(super) fn bytes_of(value: Value) -> Result<Vec<u8>, StoreError> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        Value::VerbatimString { text, .. } => Ok(text.into_bytes()),
        Value::Int(n) => Ok(n.to_string().into_bytes()),
        _ => Err(corrupt("expected a string reply")),
    }
}

/// A hash reply (RESP2 flat pairs or RESP3 map) as field → value.
pub(super) fn into_fields(value: Value) -> Result<HashMap<String, Vec<u8>>, StoreError> {
    let mut fields = HashMap::new();
    let mut insert = |name: Value, value: Value| -> Result<(), StoreError> {
        let name = String::from_utf8(bytes_of(name)?).map_err(|_| corrupt("field name"))?;
        fields.insert(name, bytes_of(value)?);
        Ok(())
    };
    match value {
        Value::Array(items) => {
            let mut items = items.into_iter();
            while let Some(name) = items.next() {
                let value = items.next().ok_or_else(|| corrupt("odd hash reply"))?;
                insert(name, value)?;
            }
        }
        Value::Map(pairs) => {
            for (name, value) in pairs {
                insert(name, value)?;
            }
        }
        _ => return Err(corrupt("expected a hash reply")),
    }
    Ok(fields)
}

/// Hash fields: `v` (format version), `scope`, `policy`, `revision`, `created_at`, `state`
/// (`in_flight` or `done`); in flight: `owner`, `lease_until`; done: `status`, `headers`
/// (JSON array of `[name, base64 value]`), `body` (raw bytes). Optional: `credentials` (added
/// without a format change, so records written before it still read, with `None`), `trace`
/// (likewise: the executing span's `traceparent`), `request` (likewise: the digest of the
/// request a page approval approved).
pub(super) fn decode_record(
    mut fields: HashMap<String, Vec<u8>>,
) -> Result<OperationRecord, StoreError> {
    let credentials = match fields.remove("credentials") {
        None => None,
        Some(bytes) => Some(text(bytes, "credentials")?),
    };
    // Only ever a hint for a span link: an unreadable one is dropped, not corrupt.
    let trace = fields
        .remove("trace")
        .and_then(|bytes| String::from_utf8(bytes).ok());
    // Unreadable, it only means no replay before the lookup (the request goes the normal
    // way), so it is dropped, not corrupt.
    let request = fields
        .remove("request")
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let mut take = |name: &str| {
        fields
            .remove(name)
            .ok_or_else(|| StoreError::Corrupt(format!("record has no {name:?}")))
    };
    if take("v")? != FORMAT_VERSION {
        return Err(corrupt("unknown record format"));
    }
    let scope = text(take("scope")?, "scope")?;
    let policy = text(take("policy")?, "policy")?;
    let revision = text(take("revision")?, "revision")?;
    let created_at_ms = number(take("created_at")?, "created_at")?;
    let state = match take("state")?.as_slice() {
        b"in_flight" => RecordState::InFlight {
            owner: text(take("owner")?, "owner")?,
            lease_until_ms: number(take("lease_until")?, "lease_until")?,
        },
        b"done" => RecordState::Done(RecordedResponse {
            status: number(take("status")?, "status")?,
            headers: decode_headers(&take("headers")?)?,
            body: Bytes::from(take("body")?),
        }),
        _ => return Err(corrupt("unknown record state")),
    };
    Ok(OperationRecord {
        scope,
        policy,
        revision,
        created_at_ms,
        state,
        credentials,
        trace,
        request,
    })
}

fn text(bytes: Vec<u8>, name: &str) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|_| StoreError::Corrupt(format!("{name} is not UTF-8")))
}

fn number<T: std::str::FromStr>(bytes: Vec<u8>, name: &str) -> Result<T, StoreError> {
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("{name} is not a number")))
}

pub(super) fn encode_headers(headers: &[(String, Vec<u8>)]) -> Result<String, StoreError> {
    let encoded: Vec<(&str, String)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), BASE64.encode(value)))
        .collect();
    serde_json::to_string(&encoded)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode headers: {e}")))
}

fn decode_headers(json: &[u8]) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let encoded: Vec<(String, String)> =
        serde_json::from_slice(json).map_err(|_| corrupt("headers are not a JSON list"))?;
    encoded
        .into_iter()
        .map(|(name, value)| {
            BASE64
                .decode(value)
                .map(|value| (name, value))
                .map_err(|_| corrupt("header value is not base64"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done_fields() -> HashMap<String, Vec<u8>> {
        let headers = encode_headers(&[
            ("content-type".into(), b"application/json".to_vec()),
            ("x-raw".into(), vec![0xff, 0x00, 0x80]),
        ])
        .unwrap();
        [
            ("v", b"1".to_vec()),
            ("scope", b"s:1".to_vec()),
            ("policy", b"exchange".to_vec()),
            ("revision", b"rev_1".to_vec()),
            ("created_at", b"1700000000000".to_vec()),
            ("state", b"done".to_vec()),
            ("status", b"201".to_vec()),
            ("headers", headers.into_bytes()),
            ("body", vec![0, 159, 146, 150, 255]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    #[test]
    fn decodes_a_done_record() {
        let record = decode_record(done_fields()).unwrap();
        assert_eq!(record.created_at_ms, 1_700_000_000_000);
        let RecordState::Done(response) = record.state else {
            panic!("not done")
        };
        assert_eq!(response.status, 201);
        assert_eq!(
            response.headers[1],
            ("x-raw".into(), vec![0xff, 0x00, 0x80])
        );
        assert_eq!(response.body.as_ref(), &[0, 159, 146, 150, 255]);
    }

    /// Records written before the credentials digest existed read as having none (and so,
    /// with `[session] verify = "off"`, replay to nobody); a digest is read as written.
    #[test]
    fn credentials_are_optional() {
        assert_eq!(decode_record(done_fields()).unwrap().credentials, None);
        let mut fields = done_fields();
        fields.insert("credentials".into(), b"abc".to_vec());
        assert_eq!(
            decode_record(fields).unwrap().credentials.as_deref(),
            Some("abc")
        );
        let mut fields = done_fields();
        fields.insert("credentials".into(), vec![0xff]);
        assert!(matches!(decode_record(fields), Err(StoreError::Corrupt(_))));
    }

    /// Records written before page replays read as having no request digest (their page
    /// retries go the normal way, after the lookup).
    #[test]
    fn the_request_digest_is_optional() {
        assert_eq!(decode_record(done_fields()).unwrap().request, None);
        let mut fields = done_fields();
        fields.insert("request".into(), b"digest".to_vec());
        assert_eq!(
            decode_record(fields).unwrap().request.as_deref(),
            Some("digest")
        );
    }

    #[test]
    fn malformed_records_are_corrupt() {
        for (field, bad) in [
            ("v", &b"2"[..]),
            ("state", b"weird"),
            ("status", b"two hundred"),
            ("headers", b"{"),
            ("headers", b"[[\"a\",\"!!\"]]"),
            ("created_at", b""),
        ] {
            let mut fields = done_fields();
            fields.insert(field.into(), bad.to_vec());
            assert!(
                matches!(decode_record(fields), Err(StoreError::Corrupt(_))),
                "{field}"
            );
        }
        let mut fields = done_fields();
        fields.remove("body");
        assert!(matches!(decode_record(fields), Err(StoreError::Corrupt(_))));
    }

    #[test]
    fn hash_replies_in_both_protocols() {
        let flat = Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"1".to_vec()),
        ]);
        let map = Value::Map(vec![(
            Value::BulkString(b"a".to_vec()),
            Value::BulkString(b"1".to_vec()),
        )]);
        assert_eq!(into_fields(flat).unwrap(), into_fields(map).unwrap());
        assert!(into_fields(Value::Array(vec![Value::Nil])).is_err());
    }
}
