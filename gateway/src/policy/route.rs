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

impl PathTemplate {
    /// Whether some request path matches both templates. Exact for [`PathTemplate::matches`]:
    /// each template matches only paths of its own number of (non-empty) segments, a capture
    /// any segment, and a literal the segments that decode and fold to it, so two literals
    /// share a segment only when they are equal.
    pub(crate) fn overlaps(&self, other: &PathTemplate) -> bool {
        self.segments.len() == other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|pair| match pair {
                    (Segment::Literal(a), Segment::Literal(b)) => a == b,
                    _ => true,
                })
    }

    /// Whether every path `other` matches, this matches too.
    pub(crate) fn covers(&self, other: &PathTemplate) -> bool {
        self.segments.len() == other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|pair| match pair {
                    (Segment::Capture(_), _) => true,
                    (Segment::Literal(a), Segment::Literal(b)) => a == b,
                    (Segment::Literal(_), Segment::Capture(_)) => false,
                })
    }

    /// A path both templates match, for messages (`x` for a segment both capture); `None`
    /// when they do not overlap.
    pub(crate) fn shared_path(&self, other: &PathTemplate) -> Option<String> {
        if !self.overlaps(other) {
            return None;
        }
        let mut path = String::new();
        for pair in self.segments.iter().zip(&other.segments) {
            path.push('/');
            match pair {
                (Segment::Literal(literal), _) | (_, Segment::Literal(literal)) => {
                    // Encoded, so that a literal `%2F` stays one segment.
                    for byte in literal.bytes() {
                        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                            path.push(char::from(byte));
                        } else {
                            path.push_str(&format!("%{byte:02X}"));
                        }
                    }
                }
                _ => path.push('x'),
            }
        }
        if path.is_empty() {
            path.push('/');
        }
        Some(path)
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

    /// Overlap is decided as matching decides: whatever spelling of a literal, and whatever
    /// a capture is named, two templates overlap exactly when some path matches both.
    #[test]
    fn overlapping_templates() {
        let t = |text: &str| PathTemplate::parse(text).unwrap();
        let overlapping = [
            ("/orders/{id}/exchanges", "/orders/{order}/{action}"),
            ("/orders/{id}", "/orders/{order}"),
            ("/orders/{id}/exchanges", "/ORDERS//{x}/%65xchanges/"),
            ("/a/{x}/c", "/a/b/{y}"),
            ("/", "//"),
        ];
        for (a, b) in overlapping {
            let (a, b) = (t(a), t(b));
            assert!(a.overlaps(&b) && b.overlaps(&a), "{a} {b}");
            let shared = a.shared_path(&b).unwrap();
            assert!(
                a.matches(&shared).is_some() && b.matches(&shared).is_some(),
                "{a} {b}: {shared}"
            );
        }
        for (a, b) in [
            ("/orders/{id}/exchanges", "/orders/{id}/refunds"),
            ("/orders/{id}", "/orders/{id}/exchanges"),
            ("/orders/{id}", "/carts/{id}"),
            ("/", "/{x}"),
        ] {
            let (a, b) = (t(a), t(b));
            assert!(!a.overlaps(&b) && !b.overlaps(&a), "{a} {b}");
            assert_eq!(a.shared_path(&b), None);
        }
        let general = t("/orders/{order}/{action}");
        let specific = t("/Orders/{id}/exchanges");
        assert!(general.covers(&specific));
        assert!(!specific.covers(&general));
        assert!(t("/orders/{a}").covers(&t("/orders/{b}")));
        assert!(!t("/a/{x}/c").covers(&t("/a/b/{y}")));
        assert!(!t("/a/b/{y}").covers(&t("/a/{x}/c")));
    }

    fn template_of(segments: &[usize]) -> PathTemplate {
        const PARTS: [&str; 6] = ["a", "A", "%61", "b", "{x}", "{y}"];
        let mut text = String::from("/");
        for (i, s) in segments.iter().enumerate() {
            let part = PARTS[s % PARTS.len()];
            // Captures are named apart: a template may not capture one name twice.
            let part = part.replace('}', &format!("{i}}}"));
            text.push_str(&part);
            text.push('/');
        }
        PathTemplate::parse(&text).unwrap()
    }

    proptest::proptest! {
        /// Overlap detection is at least as broad as matching (and no broader): a path both
        /// templates match means they overlap; overlapping templates share `shared_path`;
        /// and a template that covers another matches every path the other does.
        #[test]
        fn overlap_agrees_with_matching(
            a in proptest::collection::vec(0usize..6, 0..4),
            b in proptest::collection::vec(0usize..6, 0..4),
            path in proptest::collection::vec(
                proptest::sample::select(vec!["a", "A", "%61", "%41", "b", "B", "c", ""]), 0..5),
        ) {
            let (a, b) = (template_of(&a), template_of(&b));
            let path = format!("/{}", path.join("/"));
            let both = a.matches(&path).is_some() && b.matches(&path).is_some();
            if both {
                proptest::prop_assert!(a.overlaps(&b), "{} {} {}", a, b, path);
            }
            if let Some(shared) = a.shared_path(&b) {
                proptest::prop_assert!(a.matches(&shared).is_some() && b.matches(&shared).is_some());
            }
            proptest::prop_assert_eq!(a.overlaps(&b), a.shared_path(&b).is_some());
            if a.covers(&b) && b.matches(&path).is_some() {
                proptest::prop_assert!(a.matches(&path).is_some(), "{} {} {}", a, b, path);
            }
        }
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
