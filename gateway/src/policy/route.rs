//! Path templates: `/orders/{order_id}/exchanges`, where `{name}` captures one segment.
//!
//! Matching is deliberately forgiving (percent-decoded, case-insensitive literals, empty
//! segments and a trailing slash ignored): an upstream that treats `/Orders//o1/exchanges/`
//! like `/orders/o1/exchanges` must not let such a spelling slip past its policy unapproved.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Capture(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("a path template starts with '/'")]
    NoLeadingSlash,
    #[error("segment `{0}`: a capture is a whole segment `{{name}}` with a name of A-Z a-z 0-9 _")]
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
}

impl SegmentKey {
    /// Whether a request's segment (decoded and folded) can stand here; literals are looked
    /// up by their text instead.
    pub(crate) fn accepts(&self, part: &str) -> bool {
        match self {
            SegmentKey::Literal(text) => text == part,
            SegmentKey::Capture => true,
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
                let name = raw
                    .strip_prefix('{')
                    .and_then(|s| s.strip_suffix('}'))
                    .filter(|n| {
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    })
                    .ok_or_else(|| TemplateError::BadCapture(raw.to_owned()))?;
                if segments
                    .iter()
                    .any(|s| matches!(s, Segment::Capture(n) if n == name))
                {
                    return Err(TemplateError::DuplicateCapture(name.to_owned()));
                }
                segments.push(Segment::Capture(name.to_owned()));
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
            Segment::Capture(name) => Some(name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Whether the last segment is a `{capture}`.
    pub(crate) fn ends_with_capture(&self) -> bool {
        matches!(self.segments.last(), Some(Segment::Capture(_)))
    }

    /// What the route index (`index.rs`) files this template under, segment by segment.
    pub(crate) fn segment_keys(&self) -> Vec<SegmentKey> {
        self.segments
            .iter()
            .map(|segment| match segment {
                Segment::Literal(text) => SegmentKey::Literal(text.clone()),
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
                Segment::Capture(name) => captures.push((name.clone(), part)),
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
    fn bad_templates() {
        assert!(PathTemplate::parse("orders").is_err());
        assert!(PathTemplate::parse("/orders/{a b}").is_err());
        assert!(PathTemplate::parse("/orders/x{id}").is_err());
        assert!(PathTemplate::parse("/a/{id}/{id}").is_err());
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
