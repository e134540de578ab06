//! The strict JSON parser: one pass over the bytes, refusing at the first thing two parsers
//! could read differently, with the path of the field it is in.

use serde_json::{Map, Number, Value};

use super::{
    ELIDED, MAX_DEPTH, case_twin, field, fold_case, is_safe_integer_or_float, too_deep,
    unsafe_number,
};
use crate::ingress::Refusal;
use crate::protocol::json::{PathPart, json_path};

/// The value of a whole body; string values longer than `elide_over` read as [`ELIDED`].
pub(super) fn parse(bytes: &[u8], elide_over: Option<usize>) -> Result<Value, Refusal> {
    if bytes.starts_with(&[0xef, 0xbb, 0xbf]) {
        return Err(Refusal::body(
            "the JSON body starts with a byte order mark: send it without one",
        ));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Refusal::body(format!("the JSON body is not valid UTF-8 ({e})")))?;
    let mut parser = Parser {
        text,
        at: 0,
        path: vec![],
        elide_over,
    };
    parser.skip_space();
    let value = parser.value(0)?;
    parser.skip_space();
    if parser.at != text.len() {
        return Err(parser.syntax("text after the JSON value"));
    }
    Ok(value)
}

/// Whether any byte is a control character (below 0x20): no early exit within a chunk, so
/// the loop is vectorized.
fn has_control(bytes: &[u8]) -> bool {
    bytes
        .chunks(64)
        .any(|chunk| chunk.iter().fold(false, |any, &b| any | (b < 0x20)))
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    path: Vec<PathPart>,
    /// String values longer than this are checked, not copied (see [`parse_strict_eliding`]).
    elide_over: Option<usize>,
}

impl Parser<'_> {
    fn syntax(&self, what: &str) -> Refusal {
        field(
            Refusal::body(format!(
                "the body is not valid JSON: {what} at byte {}",
                self.at
            )),
            &self.path,
        )
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, literal: &str) -> Result<(), Refusal> {
        if self.text[self.at..].starts_with(literal) {
            self.at += literal.len();
            Ok(())
        } else {
            Err(self.syntax(&format!("expected `{literal}`")))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, Refusal> {
        if depth > MAX_DEPTH {
            return Err(too_deep(&self.path));
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string(self.elide_over).map(Value::String),
            Some(b't') => self.expect("true").map(|()| Value::Bool(true)),
            Some(b'f') => self.expect("false").map(|()| Value::Bool(false)),
            Some(b'n') => self.expect("null").map(|()| Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("unexpected character")),
            None => Err(self.syntax("unexpected end")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, Refusal> {
        self.at += 1;
        let mut map = Map::new();
        let mut folded: std::collections::HashMap<String, String> = Default::default();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_space();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a member name"));
            }
            let name = self.string(None)?;
            self.path.push(PathPart::Name(name.clone()));
            if map.contains_key(&name) {
                let at = json_path(&self.path);
                return Err(field(
                    Refusal::body(format!(
                        "`{at}` appears twice: parsers disagree on which value wins, send it once"
                    )),
                    &self.path,
                ));
            }
            if let Some(other) = folded.insert(fold_case(&name), name.clone()) {
                return Err(case_twin(&self.path, &other));
            }
            self.skip_space();
            self.expect(":")?;
            self.skip_space();
            let value = self.value(depth + 1)?;
            self.path.pop();
            map.insert(name, value);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.syntax("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, Refusal> {
        self.at += 1;
        let mut items = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_space();
            self.path.push(PathPart::Index(items.len()));
            items.push(self.value(depth + 1)?);
            self.path.pop();
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax("expected `,` or `]`")),
            }
        }
    }

    /// A string; longer than `elide_over` bytes, every rule is checked but it reads as
    /// [`ELIDED`].
    fn string(&mut self, elide_over: Option<usize>) -> Result<String, Refusal> {
        self.at += 1;
        let mut out = String::new();
        let mut elided = false;
        loop {
            let rest = &self.text[self.at..];
            // `"`, `\` and control characters are ASCII, never a byte of a longer UTF-8
            // sequence, so byte searches find them without decoding each character (which was
            // 39% of a mint with a 64 KiB ignored member).
            let Some(offset) = memchr::memchr2(b'"', b'\\', rest.as_bytes()) else {
                return Err(self.syntax("unterminated string"));
            };
            let plain = &rest[..offset];
            if has_control(plain.as_bytes()) {
                return Err(self.syntax("a control character in a string"));
            }
            elided = elided || elide_over.is_some_and(|over| out.len() + plain.len() > over);
            if !elided {
                out.push_str(plain);
            }
            self.at += offset;
            if self.peek() == Some(b'"') {
                self.at += 1;
                return Ok(if elided { ELIDED.to_owned() } else { out });
            }
            self.at += 1;
            let escaped = match self.peek() {
                Some(b'"') => '"',
                Some(b'\\') => '\\',
                Some(b'/') => '/',
                Some(b'b') => '\u{8}',
                Some(b'f') => '\u{c}',
                Some(b'n') => '\n',
                Some(b'r') => '\r',
                Some(b't') => '\t',
                Some(b'u') => {
                    self.at += 1;
                    let unit = self.hex4()?;
                    let c = if (0xd800..0xdc00).contains(&unit) {
                        self.expect("\\u")
                            .map_err(|_| self.syntax("a lone surrogate in a string"))?;
                        let low = self.hex4()?;
                        if !(0xdc00..0xe000).contains(&low) {
                            return Err(self.syntax("a lone surrogate in a string"));
                        }
                        char::from_u32(0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00))
                    } else {
                        char::from_u32(unit)
                    };
                    match c {
                        Some('\0') => {
                            return Err(field(
                                Refusal::body(
                                    "a string has \\u0000, where some servers cut it: leave it out",
                                ),
                                &self.path,
                            ));
                        }
                        Some(c) => {
                            if !elided {
                                out.push(c);
                            }
                            continue;
                        }
                        None => return Err(self.syntax("a lone surrogate in a string")),
                    }
                }
                _ => return Err(self.syntax("an invalid escape")),
            };
            if !elided {
                out.push(escaped);
            }
            self.at += 1;
        }
    }

    fn hex4(&mut self) -> Result<u32, Refusal> {
        let digits = self.text.get(self.at..self.at + 4).unwrap_or_default();
        let unit = (digits.len() == 4 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(digits, 16).ok())
            .flatten()
            .ok_or_else(|| self.syntax("an invalid \\u escape"))?;
        self.at += 4;
        Ok(unit)
    }

    fn number(&mut self) -> Result<Value, Refusal> {
        let start = self.at;
        let bytes = self.text.as_bytes();
        let digits = |at: &mut usize| {
            let from = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        let int_digits = digits(&mut at);
        let leading_zero = int_digits > 1 && bytes.get(at - int_digits) == Some(&b'0');
        if int_digits == 0 || leading_zero {
            return Err(self.syntax("an invalid number"));
        }
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            if digits(&mut at) == 0 {
                return Err(self.syntax("an invalid number"));
            }
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return Err(self.syntax("an invalid number"));
            }
        }
        self.at = at;
        let text = &self.text[start..at];
        let number: Number =
            serde_json::from_str(text).map_err(|_| unsafe_number(&self.path, text))?;
        if number.to_string() != text || !is_safe_integer_or_float(&number) {
            return Err(unsafe_number(&self.path, text));
        }
        Ok(Value::Number(number))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ingress::json::{has_elided, parse_strict, parse_strict_eliding};

    fn named(body: &str) -> Option<String> {
        parse_strict(body.as_bytes())
            .unwrap_err()
            .names
            .map(|(_, v)| v)
    }

    #[test]
    fn ordinary_json_reads_as_serde_reads_it() {
        for body in [
            r#"{"item_id":"itm_4Qa","qty":2,"price":10.5,"ok":true,"none":null}"#,
            r#" { "a" : [ 1 , -2 , 0.25 , 1.5 , "x\u00e9\n\ud83d\ude00" ] } "#,
            r#"{"n":9007199254740991,"m":-9007199254740991,"f":100.0}"#,
            r#""text""#,
            "[]",
        ] {
            let strict = parse_strict(body.as_bytes()).unwrap();
            let serde: Value = serde_json::from_str(body).unwrap();
            assert_eq!(strict, serde, "{body}");
        }
    }

    #[test]
    fn ambiguous_json_is_refused_naming_the_field() {
        assert_eq!(named(r#"{"a":1,"a":2}"#).as_deref(), Some("$.a"));
        assert_eq!(
            named(r#"{"x":{"b":[{"c":1,"c":2}]}}"#).as_deref(),
            Some("$.x.b[0].c")
        );
        assert_eq!(
            named(r#"{"amount":1,"AMOUNT":2}"#).as_deref(),
            Some("$.AMOUNT")
        );
        assert_eq!(
            named(r#"{"class":1,"claſſ":2}"#).as_deref(),
            Some("$['claſſ']")
        );
        assert_eq!(named(r#"{"n":9007199254740992}"#).as_deref(), Some("$.n"));
        assert_eq!(
            named(r#"{"n":18446744073709551616}"#).as_deref(),
            Some("$.n")
        );
        assert_eq!(named(r#"{"n":-9007199254740992}"#).as_deref(), Some("$.n"));
        for body in [
            r#"{"n":10.50}"#,
            r#"{"n":1e2}"#,
            r#"{"n":1E2}"#,
            r#"{"n":-0}"#,
            r#"{"n":1e400}"#,
            r#"{"n":0.1000000000000000055511151231257827}"#,
            r#"{"s":"a\u0000b"}"#,
            r#"{"s":"\ud800"}"#,
            r#"{"s":"\udc00x"}"#,
            "\u{feff}{}",
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":NaN}"#,
            "{\"a\":\"\t\"}",
            r#"{"a":1} {"a":2}"#,
            r#"{'a':1}"#,
        ] {
            assert!(parse_strict(body.as_bytes()).is_err(), "{body}");
        }
        assert!(parse_strict(b"{\"a\":\"\xff\"}").is_err());
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert!(parse_strict(deep.as_bytes()).is_err());
    }

    #[test]
    fn long_strings_are_checked_but_not_copied() {
        let long = "x".repeat(100);
        let body = format!(r#"{{"note":"{long}","id":"short","list":["{long}\n",1],"{long}":2}}"#);
        let elided = parse_strict_eliding(body.as_bytes(), 10).unwrap();
        assert_eq!(
            elided,
            json!({"note": ELIDED, "id": "short", "list": [ELIDED, 1], long.clone(): 2}),
            "values elided, member names kept"
        );
        assert!(has_elided(&elided["list"]) && !has_elided(&elided["id"]));
        assert_eq!(
            parse_strict_eliding(body.as_bytes(), 1000).unwrap(),
            parse_strict(body.as_bytes()).unwrap()
        );
        for bad in [
            format!(r#"{{"a":"{long}\u0000"}}"#),
            format!(r#"{{"a":"{long}\ud800"}}"#),
            format!(r#"{{"a":"{long}\q"}}"#),
            format!("{{\"a\":\"{long}\t\"}}"),
            format!(r#"{{"a":"{long}"#),
        ] {
            assert!(parse_strict_eliding(bad.as_bytes(), 10).is_err(), "{bad}");
        }
    }

    #[test]
    fn control_bytes_are_found_as_the_character_walk_found_them() {
        let long = "é".repeat(100);
        for text in [
            "",
            "plain",
            "tab\there",
            "\u{1f}",
            "ünïcödé ☃ 𝄞",
            &long,
            &format!("{long}\n"),
        ] {
            assert_eq!(
                has_control(text.as_bytes()),
                text.chars().any(|c| c < ' '),
                "{text:?}"
            );
        }
    }
}
