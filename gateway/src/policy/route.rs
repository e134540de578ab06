//! Path templates: `/orders/{order_id}/exchanges`, where `{name}` captures one segment, or
//! the part of one segment between a literal prefix and suffix (`/Calls/{Sid}.json`,
//! `/v{version}/orders`).
//!
//! Matching is deliberately forgiving (percent-decoded, case-insensitive literals, empty
//! segments and a trailing slash ignored): an upstream that treats `/Orders//o1/exchanges/`
//! like `/orders/o1/exchanges` must not let such a spelling slip past its policy unapproved.

use std::fmt;

mod capture;
mod shared_paths;

use capture::{Capture, has_affixes, parse_capture};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Capture(Capture),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("a path template starts with '/'")]
    NoLeadingSlash,
    #[error(
        "segment `{0}`: a capture is `{{name}}` with a name of A-Z a-z 0-9 _, one per segment, alone or with a literal prefix and suffix of A-Z a-z 0-9 and - . _ ~ ! $ & ' ( ) * + , = : @ (`{{sid}}.json`, `v{{version}}`)"
    )]
    BadCapture(String),
    #[error("capture `{0}` appears twice")]
    DuplicateCapture(String),
}

/// A template's segment as the route index files it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SegmentKey {
    /// Percent-decoded and case-folded.
    Literal(String),
    /// A whole-segment capture: any segment.
    Capture,
    /// A capture between a literal prefix and suffix (lower case): the segments that are
    /// longer than both and start and end with them.
    Affixed { prefix: String, suffix: String },
}

impl SegmentKey {
    /// Whether a request's segment (decoded and folded) can stand here; literals are looked
    /// up by their text instead.
    pub(crate) fn accepts(&self, part: &str) -> bool {
        match self {
            SegmentKey::Literal(text) => text == part,
            SegmentKey::Capture => true,
            SegmentKey::Affixed { prefix, suffix } => has_affixes(part, prefix, suffix),
        }
    }
}

/// A compiled path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    text: String,
    segments: Vec<Segment>,
}

/// The values a template captured, percent-decoded, in template order.
pub(crate) type Captures = Vec<(String, String)>;

impl PathTemplate {
    pub fn parse(text: &str) -> Result<PathTemplate, TemplateError> {
        if !text.starts_with('/') {
            return Err(TemplateError::NoLeadingSlash);
        }
        let mut segments = Vec::new();
        for raw in text.split('/').filter(|s| !s.is_empty()) {
            if raw.contains('{') || raw.contains('}') {
                let capture = parse_capture(raw)?;
                if segments
                    .iter()
                    .any(|s| matches!(s, Segment::Capture(c) if c.name == capture.name))
                {
                    return Err(TemplateError::DuplicateCapture(capture.name));
                }
                segments.push(Segment::Capture(capture));
            } else {
                segments.push(Segment::Literal(percent_decode(raw).to_lowercase()));
            }
        }
        Ok(PathTemplate {
            text: text.to_owned(),
            segments,
        })
    }

    /// The names this template captures.
    pub(crate) fn capture_names(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Capture(capture) => Some(capture.name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Whether the path ends in a capture's value (`/confirm/{code}`, `/api/v{version}`):
    /// a `.json` there could be a format suffix some frameworks strip from the value.
    pub(crate) fn ends_with_capture(&self) -> bool {
        matches!(self.segments.last(), Some(Segment::Capture(c)) if c.suffix.is_empty())
    }

    /// The format suffix the template's last segment ends with (`.json` of `/Calls.json` or
    /// `/Calls/{Sid}.json`): frameworks that read a format suffix (Rails, Django REST
    /// framework) run the same handler without it, or with another one.
    pub(crate) fn format_suffix(&self) -> Option<&str> {
        let text = match self.segments.last()? {
            Segment::Literal(literal) => literal.as_str(),
            Segment::Capture(capture) => capture.suffix.as_str(),
        };
        let dot = text.rfind('.')?;
        let ext = &text[dot + 1..];
        let extension_like =
            (1..=10).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphanumeric());
        // A literal segment that is all suffix (`.json`) is not a suffix of anything.
        let has_stem = dot > 0 || matches!(self.segments.last(), Some(Segment::Capture(_)));
        (extension_like && has_stem).then_some(&text[dot..])
    }

    /// The first segment of `path` (which this template matches) whose capture's literal
    /// prefix or suffix is spelled with `%` escapes: some frameworks match routes before
    /// decoding, and would read that segment as another route.
    pub(crate) fn escaped_affix<'p>(&self, path: &'p str) -> Option<&'p str> {
        let parts = path.split('/').filter(|s| !s.is_empty());
        self.segments
            .iter()
            .zip(parts)
            .find_map(|(segment, raw)| match segment {
                Segment::Capture(capture) if capture.is_affixed() => {
                    (!capture.admits(&raw.to_lowercase())).then_some(raw)
                }
                _ => None,
            })
    }

    /// What the route index (`index.rs`) files this template under, segment by segment.
    pub(crate) fn segment_keys(&self) -> Vec<SegmentKey> {
        self.segments
            .iter()
            .map(|segment| match segment {
                Segment::Literal(text) => SegmentKey::Literal(text.clone()),
                Segment::Capture(capture) if capture.is_affixed() => SegmentKey::Affixed {
                    prefix: capture.prefix.clone(),
                    suffix: capture.suffix.clone(),
                },
                Segment::Capture(_) => SegmentKey::Capture,
            })
            .collect()
    }

    /// A request path's segments as [`Self::matches`] compares them with literals: the empty
    /// ones left out, each percent-decoded and case-folded. Done once per request.
    pub(crate) fn request_segments(path: &str) -> Vec<String> {
        path.split('/')
            .filter(|s| !s.is_empty())
            .map(|part| percent_decode(part).to_lowercase())
            .collect()
    }

    /// Match a request path (without its query).
    pub fn matches(&self, path: &str) -> Option<Captures> {
        let mut captures = Vec::new();
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        for segment in &self.segments {
            let part = percent_decode(parts.next()?);
            match segment {
                Segment::Literal(literal) => {
                    if part.to_lowercase() != *literal {
                        return None;
                    }
                }
                Segment::Capture(capture) => {
                    captures.push((capture.name.clone(), capture.read(&part)?));
                }
            }
        }
        if parts.next().is_some() {
            return None;
        }
        Some(captures)
    }
}

impl fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Percent-decode a path segment; invalid escapes and invalid UTF-8 stay as they were.
pub fn percent_decode(text: &str) -> String {
    if !text.contains('%') {
        return text.to_owned();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(value) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(value);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_segments() {
        let t = PathTemplate::parse("/orders/{order_id}/exchanges").unwrap();
        assert_eq!(
            t.matches("/orders/ord_1/exchanges"),
            Some(vec![("order_id".into(), "ord_1".into())])
        );
        assert_eq!(t.matches("/orders/ord_1"), None);
        assert_eq!(t.matches("/orders/ord_1/exchanges/x"), None);
        assert_eq!(t.matches("/orders/ord_1/refunds"), None);
    }

    #[test]
    fn other_spellings_of_the_same_route_match() {
        let t = PathTemplate::parse("/orders/{order_id}/exchanges").unwrap();
        for path in [
            "/orders/o%31/exchanges/",
            "//orders//o1/exchanges",
            "/ORDERS/o1/Exchanges",
            "/orders/o1/%65xchanges",
        ] {
            assert!(t.matches(path).is_some(), "{path}");
        }
        assert_eq!(t.matches("/orders/o%31/exchanges").unwrap()[0].1, "o1");
    }

    #[test]
    fn format_suffixes_and_escaped_affixes() {
        let suffix = |text: &str| {
            PathTemplate::parse(text)
                .unwrap()
                .format_suffix()
                .map(str::to_owned)
        };
        assert_eq!(suffix("/Calls/{Sid}.json").as_deref(), Some(".json"));
        assert_eq!(suffix("/Accounts/{a}/Calls.json").as_deref(), Some(".json"));
        assert_eq!(suffix("/x/{id}-v2.XML").as_deref(), Some(".xml"));
        assert_eq!(suffix("/Calls/{Sid}"), None);
        assert_eq!(suffix("/v{version}"), None);
        assert_eq!(suffix("/x/.json"), None);
        assert_eq!(suffix("/x/{id}:cancel"), None);
        let t = PathTemplate::parse("/Calls/{Sid}.json").unwrap();
        assert!(!t.ends_with_capture());
        assert!(
            PathTemplate::parse("/api/v{version}")
                .unwrap()
                .ends_with_capture()
        );
        assert_eq!(t.escaped_affix("/Calls/CA1.json"), None);
        assert_eq!(t.escaped_affix("/calls/CA%31.JSON"), None);
        assert_eq!(t.escaped_affix("/Calls/CA1%2Ejson"), Some("CA1%2Ejson"));
        assert_eq!(t.escaped_affix("/Calls/CA1.%6Ason"), Some("CA1.%6Ason"));
        assert!(t.matches("/Calls/CA1%2Ejson").is_some());
    }

    #[test]
    fn percent_decoding_is_total() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%ff"), "%ff");
        assert_eq!(percent_decode("%"), "%");
    }
}
