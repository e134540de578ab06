//! JSON that others sent the gateway (a client's envelope or message, an upstream's lookup
//! answer, an identity provider's document), read one way: a member name twice in one object
//! is refused. Parsers disagree on which value wins (serde_json keeps the last, others the
//! first), so the gateway could act on `"amount": "0.01"` where the sender meant `"10.00"`,
//! or approve what another reader takes as another call.
//!
//! serde_json has no switch for this, and a derived struct only catches its own fields twice
//! (not a `Value` inside it, nor ignored members), so every such body is walked once for
//! repeated names before it is deserialized. Request bodies of operations are read by the
//! stricter `ingress::json`, which refuses these too, with more.

use std::collections::HashSet;
use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor,
};

/// Why a JSON text was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// A member name twice in one object, at this JSON path (`$.a.b`).
    #[error(
        "`{0}` appears twice in one object: readers disagree on which value wins, send it once"
    )]
    Duplicate(String),
    /// Not JSON, or not of the shape asked for (serde_json's words).
    #[error("{0}")]
    Invalid(#[from] serde_json::Error),
}

/// `serde_json::from_slice`, refusing a member name twice in any object.
pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ReadError> {
    if let Some(path) = duplicate_member(bytes) {
        return Err(ReadError::Duplicate(path));
    }
    Ok(serde_json::from_slice(bytes)?)
}

/// The JSON path of the first member name found twice in one object, if any. Text that is not
/// JSON has none (its reader says what is wrong with it).
pub(crate) fn duplicate_member(bytes: &[u8]) -> Option<String> {
    let mut walk = Walk::default();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    match Checked(&mut walk).deserialize(&mut deserializer) {
        Ok(()) => None,
        Err(_) => walk.duplicate,
    }
}

/// One step of a JSONPath, for error messages.
#[derive(Debug, Clone)]
pub(crate) enum PathPart {
    Name(String),
    Index(usize),
}

/// `$.a.b[0]`, or `$['odd name']` where a name is not a plain identifier.
pub(crate) fn json_path(parts: &[PathPart]) -> String {
    let mut out = String::from("$");
    for part in parts {
        match part {
            PathPart::Name(name)
                if !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                out.push('.');
                out.push_str(name);
            }
            PathPart::Name(name) => {
                out.push_str("['");
                out.push_str(&name.replace('\\', "\\\\").replace('\'', "\\'"));
                out.push_str("']");
            }
            PathPart::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Where the walk is, and what it found.
#[derive(Default)]
struct Walk {
    path: Vec<PathPart>,
    duplicate: Option<String>,
}

/// Walks any JSON value, failing on a repeated member name. Numbers, strings and the rest are
/// accepted as they come (so this holds whatever serde_json features are on).
struct Checked<'w>(&'w mut Walk);

impl<'de> DeserializeSeed<'de> for Checked<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let walk = self.0;
        let mut index = 0;
        loop {
            walk.path.push(PathPart::Index(index));
            if seq.next_element_seed(Checked(walk))?.is_none() {
                walk.path.pop();
                return Ok(());
            }
            walk.path.pop();
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let walk = self.0;
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            walk.path.push(PathPart::Name(name.clone()));
            if !seen.insert(name) {
                walk.duplicate = Some(json_path(&walk.path));
                return Err(de::Error::custom("a member name twice"));
            }
            map.next_value_seed(Checked(walk))?;
            walk.path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn finds_repeated_names_at_any_depth() {
        assert_eq!(duplicate_member(br#"{"a":1,"b":[{"c":1}]}"#), None);
        assert_eq!(
            duplicate_member(br#"{"a":1,"a":2}"#).as_deref(),
            Some("$.a")
        );
        assert_eq!(
            duplicate_member(br#"[1,{"p":{"name":"x","name":"y"}}]"#).as_deref(),
            Some("$[1].p.name")
        );
        // The same name spelled with an escape is the same name.
        assert_eq!(
            duplicate_member(br#"{"name":"x","n\u0061me":"y"}"#).as_deref(),
            Some("$.name")
        );
        // Equal names in different objects are fine.
        assert_eq!(duplicate_member(br#"{"a":{"a":{"a":1}}}"#), None);
        assert_eq!(duplicate_member(br#"[{"a":1},{"a":2}]"#), None);
    }

    #[test]
    fn numbers_and_strings_of_every_kind_pass() {
        assert_eq!(
            duplicate_member(br#"[1, -1, 1.5e300, 18446744073709551616, "\u00e9", null, true]"#),
            None
        );
    }

    #[test]
    fn reading_refuses_duplicates_and_says_why_else() {
        let twice = from_slice::<Value>(br#"{"amount":"10.00","amount":"0.01"}"#).unwrap_err();
        assert!(matches!(&twice, ReadError::Duplicate(path) if path == "$.amount"));
        assert!(twice.to_string().contains("`$.amount` appears twice"));
        let broken = from_slice::<Value>(br#"{"a":1,"#).unwrap_err();
        assert!(
            matches!(broken, ReadError::Invalid(_)),
            "not JSON is not a duplicate"
        );
        assert_eq!(
            from_slice::<Value>(br#"{"a":[1,{"b":2}]}"#).unwrap(),
            serde_json::json!({"a": [1, {"b": 2}]})
        );
    }

    #[test]
    fn json_paths_are_readable() {
        let parts = vec![
            PathPart::Name("a".into()),
            PathPart::Index(2),
            PathPart::Name("odd key's".into()),
        ];
        assert_eq!(json_path(&parts), r"$.a[2]['odd key\'s']");
    }
}
