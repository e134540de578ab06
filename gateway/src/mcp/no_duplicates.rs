//! JSON with a member name twice is refused: parsers disagree on which value wins (serde_json
//! keeps the last, others the first), so the gateway could see `"name": "lookup_order"` where
//! the MCP server sees `"name": "exchange_item"`, and forward an unapproved call.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// The first member name found twice in one object, if any. `bytes` must be valid JSON.
pub(crate) fn duplicate_member(bytes: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Checked>(bytes) {
        Ok(Checked) => None,
        Err(e) => Some(
            e.to_string()
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.split_once('\u{0}'))
                .map(|(name, _)| name.to_owned())
                .unwrap_or_else(|| e.to_string()),
        ),
    }
}

/// Marks the error text as ours: `PREFIX name \0 …`.
const PREFIX: &str = "duplicate member ";

/// Walks any JSON value, failing on a repeated member name. Numbers, strings and the rest are
/// accepted as they come (so this holds whatever serde_json features are on).
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Checked, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i128<E>(self, _: i128) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u128<E>(self, _: u128) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_none<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if !seen.insert(name.clone()) {
                return Err(de::Error::custom(format!("{PREFIX}{name}\u{0}")));
            }
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_repeated_names_at_any_depth() {
        assert_eq!(duplicate_member(br#"{"a":1,"b":[{"c":1}]}"#), None);
        assert_eq!(duplicate_member(br#"{"a":1,"a":2}"#), Some("a".to_owned()));
        assert_eq!(
            duplicate_member(br#"[1,{"p":{"name":"x","name":"y"}}]"#),
            Some("name".to_owned())
        );
        // The same name spelled with an escape is the same name.
        assert_eq!(
            duplicate_member(br#"{"name":"x","n\u0061me":"y"}"#),
            Some("name".to_owned())
        );
        // Equal names in different objects are fine.
        assert_eq!(duplicate_member(br#"{"a":{"a":{"a":1}}}"#), None);
    }

    #[test]
    fn numbers_and_strings_of_every_kind_pass() {
        assert_eq!(
            duplicate_member(br#"[1, -1, 1.5e300, 18446744073709551616, "\u00e9", null, true]"#),
            None
        );
    }
}
