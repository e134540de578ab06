//! An OpenAPI description's text as a `serde_json::Value`: JSON, or else YAML.
//!
//! YAML is read by `serde_norway` (the maintained fork of the deprecated `serde_yaml`) straight
//! into JSON values through [`Json`]: its own `Value`
//! refuses an integer beyond 64 bits (a published description's `maximum` or `example`), and
//! keys that YAML reads as numbers (response codes, `200:`) are kept as their text. A number
//! beyond 64 bits becomes the nearest float: `init` never reads such a number's digits.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// JSON, or else YAML.
pub(crate) fn parse(text: &str) -> Result<Value, String> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Ok(value);
    }
    serde_norway::from_str::<Json>(text)
        .map(|json| json.0)
        .map_err(|e| format!("neither JSON nor YAML: {e}"))
}

/// A JSON value read from any serde format, big integers and all.
struct Json(Value);

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor).map(Json)
    }
}

struct JsonVisitor;

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    #[allow(clippy::cast_precision_loss)] // such a number is never read exactly: see above
    fn visit_i128<E>(self, n: i128) -> Result<Value, E> {
        Ok(float(n as f64))
    }
    #[allow(clippy::cast_precision_loss)]
    fn visit_u128<E>(self, n: u128) -> Result<Value, E> {
        Ok(float(n as f64))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Value, E> {
        Ok(float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Json::deserialize(d).map(|j| j.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Json(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        // A key read as a string is its text as written (`200`, `true`).
        let mut object = Map::new();
        while let Some((key, Json(value))) = map.next_entry::<String, Json>()? {
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn yaml_descriptions_read_with_numeric_keys_as_text() {
        let doc = parse("openapi: 3.0.0\npaths:\n  /a:\n    post:\n      responses:\n        200:\n          description: ok\n").unwrap();
        assert_eq!(
            doc["paths"]["/a"]["post"]["responses"]["200"]["description"],
            "ok"
        );
        assert_eq!(
            parse("{\"openapi\": \"3.1.0\"}").unwrap()["openapi"],
            "3.1.0"
        );
        assert!(parse("{ not: [ yaml").is_err());
    }

    #[test]
    fn integers_beyond_64_bits_read() {
        let doc =
            parse("a: 99999999999999999999\nb: -99999999999999999999\nc: 1e400\nd: [1, ~, true]\n")
                .unwrap();
        assert_eq!(doc["a"].as_f64(), Some(1e20));
        assert_eq!(doc["b"].as_f64(), Some(-1e20));
        assert_eq!(doc["d"], serde_json::json!([1, null, true]));
    }
}
