//! Path templates: `/orders/{order_id}/exchanges`, where `{name}` captures one segment, or
//! the part of one segment between a literal prefix and suffix (`/Calls/{Sid}.json`,
//! `/v{version}/orders`).
//!
//! Matching is deliberately forgiving (percent-decoded, case-insensitive literals, empty
//! segments and a trailing slash ignored): an upstream that treats `/Orders//o1/exchanges/`
//! like `/orders/o1/exchanges` must not let such a spelling slip past its policy unapproved.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Capture(Capture),
}

/// A `{name}`, alone in its segment or between a literal `prefix` and `suffix` (ASCII, lower
/// case, matched case-insensitively as literals are). A capture never matches an empty value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Capture {
    name: String,
    prefix: String,
    suffix: String,
}

impl Capture {
    /// The value this capture reads from a decoded segment, if the segment is its shape. The
    /// shape is decided on the folded segment, as the route index decides it; the value keeps
    /// the request's letter case.
    fn read(&self, segment: &str) -> Option<String> {
        let folded = segment.to_lowercase();
        if !has_affixes(&folded, &self.prefix, &self.suffix) {
            return None;
        }
        let (p, s) = (self.prefix.len(), self.suffix.len());
        let bytes = segment.as_bytes();
        let in_place = folded.len() == segment.len()
            && bytes[..p].eq_ignore_ascii_case(self.prefix.as_bytes())
            && bytes[bytes.len() - s..].eq_ignore_ascii_case(self.suffix.as_bytes());
        let value = match segment.get(p..segment.len() - s) {
            Some(value) if in_place => value,
            // A character that folds onto an affix's letter (the Kelvin sign onto `k`):
            // refused in any Personal Agent target, read as folded here.
            _ => &folded[p..folded.len() - s],
        };
        Some(value.to_owned())
    }

    /// Whether the capture has a literal prefix or suffix in its segment.
    fn is_affixed(&self) -> bool {
        !self.prefix.is_empty() || !self.suffix.is_empty()
    }

    /// Whether some value makes this capture's segment the literal (decoded, folded) one.
    fn admits(&self, literal: &str) -> bool {
        has_affixes(literal, &self.prefix, &self.suffix)
    }

    /// Whether some segment is both this capture's and `other`'s: their prefixes agree (one
    /// starts the other), and so do their suffixes.
    fn meets(&self, other: &Capture) -> bool {
        (self.prefix.starts_with(&other.prefix) || other.prefix.starts_with(&self.prefix))
            && (self.suffix.ends_with(&other.suffix) || other.suffix.ends_with(&self.suffix))
    }

    /// Whether every segment `other` captures, this captures too.
    fn holds(&self, other: &Capture) -> bool {
        other.prefix.starts_with(&self.prefix) && other.suffix.ends_with(&self.suffix)
    }
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

/// Characters a capture's literal prefix or suffix may have: a path segment's own (RFC 3986
/// `pchar`) but `%` (an affix is written as sent) and `;` (refused in every target).
fn is_affix_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,=:@".contains(&b)
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

/// Whether a decoded and case-folded segment is `prefix`, a value, then `suffix`.
fn has_affixes(folded: &str, prefix: &str, suffix: &str) -> bool {
    folded.len() > prefix.len() + suffix.len()
        && folded.starts_with(prefix)
        && folded.ends_with(suffix)
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

impl PathTemplate {
    /// Whether some request path matches both templates. Exact for [`PathTemplate::matches`]:
    /// each template matches only paths of its own number of (non-empty) segments; a literal
    /// the segments that decode and fold to it; a capture the segments longer than its
    /// prefix and suffix that start and end with them. So two literals share a segment only
    /// when equal, a literal and a capture when the capture admits the literal, and two
    /// captures when their prefixes agree and their suffixes agree.
    pub(crate) fn overlaps(&self, other: &PathTemplate) -> bool {
        self.segment_by_segment(other, |pair| match pair {
            (Segment::Literal(a), Segment::Literal(b)) => a == b,
            (Segment::Literal(l), Segment::Capture(c))
            | (Segment::Capture(c), Segment::Literal(l)) => c.admits(l),
            (Segment::Capture(a), Segment::Capture(b)) => a.meets(b),
        })
    }

    /// Whether every path `other` matches, this matches too.
    pub(crate) fn covers(&self, other: &PathTemplate) -> bool {
        self.segment_by_segment(other, |pair| match pair {
            (Segment::Capture(a), Segment::Capture(b)) => a.holds(b),
            (Segment::Capture(c), Segment::Literal(l)) => c.admits(l),
            (Segment::Literal(a), Segment::Literal(b)) => a == b,
            (Segment::Literal(_), Segment::Capture(_)) => false,
        })
    }

    /// The same number of segments, and `holds` for each pair of them.
    fn segment_by_segment(
        &self,
        other: &PathTemplate,
        holds: impl Fn((&Segment, &Segment)) -> bool,
    ) -> bool {
        self.segments.len() == other.segments.len()
            && self.segments.iter().zip(&other.segments).all(holds)
    }

    /// A path both templates match, for messages (`x` for a capture's value); `None` when
    /// they do not overlap.
    pub(crate) fn shared_path(&self, other: &PathTemplate) -> Option<String> {
        if !self.overlaps(other) {
            return None;
        }
        let mut path = String::new();
        for pair in self.segments.iter().zip(&other.segments) {
            path.push('/');
            let segment = match pair {
                (Segment::Literal(literal), _) | (_, Segment::Literal(literal)) => literal.clone(),
                (Segment::Capture(a), Segment::Capture(b)) => {
                    let longer = |x: &str, y: &str| {
                        if x.len() >= y.len() {
                            x.to_owned()
                        } else {
                            y.to_owned()
                        }
                    };
                    format!(
                        "{}x{}",
                        longer(&a.prefix, &b.prefix),
                        longer(&a.suffix, &b.suffix)
                    )
                }
            };
            // Encoded, so that a literal `%2F` stays one segment.
            for byte in segment.bytes() {
                if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                    path.push(char::from(byte));
                } else {
                    path.push_str(&format!("%{byte:02X}"));
                }
            }
        }
        if path.is_empty() {
            path.push('/');
        }
        Some(path)
    }
}

/// `{name}`, `prefix{name}`, `{name}suffix` or `prefix{name}suffix`.
fn parse_capture(raw: &str) -> Result<Capture, TemplateError> {
    let bad = || TemplateError::BadCapture(raw.to_owned());
    let (prefix, rest) = raw.split_once('{').ok_or_else(bad)?;
    let (name, suffix) = rest.split_once('}').ok_or_else(bad)?;
    let name_ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let affixes_ok = prefix.bytes().chain(suffix.bytes()).all(is_affix_byte);
    if !name_ok || !affixes_ok {
        return Err(bad());
    }
    Ok(Capture {
        name: name.to_owned(),
        prefix: prefix.to_ascii_lowercase(),
        suffix: suffix.to_ascii_lowercase(),
    })
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
        // Captures inside a segment: by their literals.
        for (a, b, overlap) in [
            ("/Calls/{Sid}.json", "/Calls/{Sid}", true),
            ("/Calls/{Sid}.json", "/Calls/active", false),
            ("/Calls/{Sid}.json", "/Calls/x.JSON", true),
            ("/Calls/{Sid}.json", "/Calls/{Sid}.xml", false),
            ("/Calls/{Sid}.json", "/Calls/{Sid}-v2.json", true),
            ("/v{a}/x", "/{b}.json/x", true),
            ("/v{a}/x", "/w{b}/x", false),
            ("/v{a}", "/v", false),
        ] {
            let (a, b) = (t(a), t(b));
            assert_eq!(a.overlaps(&b), overlap, "{a} {b}");
            assert_eq!(b.overlaps(&a), overlap, "{b} {a}");
            if let Some(shared) = a.shared_path(&b) {
                assert!(
                    a.matches(&shared).is_some() && b.matches(&shared).is_some(),
                    "{a} {b}: {shared}"
                );
            }
        }
        assert!(t("/Calls/{a}").covers(&t("/Calls/{b}.json")));
        assert!(t("/Calls/{a}.json").covers(&t("/Calls/{b}-v2.json")));
        assert!(t("/Calls/{a}.json").covers(&t("/Calls/x.json")));
        assert!(!t("/Calls/{a}.json").covers(&t("/Calls/{b}")));
        assert!(!t("/Calls/{a}.json").covers(&t("/Calls/.json")));
        let general = t("/orders/{order}/{action}");
        let specific = t("/Orders/{id}/exchanges");
        assert!(general.covers(&specific));
        assert!(!specific.covers(&general));
        assert!(t("/orders/{a}").covers(&t("/orders/{b}")));
        assert!(!t("/a/{x}/c").covers(&t("/a/b/{y}")));
        assert!(!t("/a/b/{y}").covers(&t("/a/{x}/c")));
    }

    fn template_of(segments: &[usize]) -> PathTemplate {
        const PARTS: [&str; 10] = [
            "a",
            "A",
            "%61",
            "b",
            "{x}",
            "{y}",
            "{x}.json",
            "v{y}",
            "v{x}.JSON",
            "a.json",
        ];
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
            a in proptest::collection::vec(0usize..10, 0..4),
            b in proptest::collection::vec(0usize..10, 0..4),
            path in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "A", "%61", "%41", "b", "B", "c", "", "a.json", "A.JSON", "v", "v1",
                    "V.json", "va.json", ".json", "%76a%2Ejson",
                ]),
                0..5,
            ),
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
        for text in [
            "orders",
            "/orders/{a b}",
            "/a/{id}/{id}",
            "/a/{id}.json/{id}",
            "/a/{x}{y}",
            "/a/{x}.{y}",
            "/a/{x",
            "/a/x}",
            "/a/}x{",
            "/a/{}",
            "/a/{x}%2Ejson",
            "/a/{x};v=1",
            "/a/{x}.j[s]on",
        ] {
            assert!(PathTemplate::parse(text).is_err(), "{text}");
        }
    }

    /// A capture with a literal prefix or suffix reads the part of its segment between
    /// them, never an empty value; the literals match as literal segments do.
    #[test]
    fn captures_inside_a_segment() {
        let t = PathTemplate::parse("/Accounts/{AccountSid}/Calls/{Sid}.json").unwrap();
        assert_eq!(
            t.matches("/Accounts/AC1/Calls/CA1.json"),
            Some(vec![
                ("AccountSid".into(), "AC1".into()),
                ("Sid".into(), "CA1".into())
            ])
        );
        assert_eq!(
            t.matches("/accounts/AC1/calls/CA1.JSON").unwrap()[1].1,
            "CA1"
        );
        assert_eq!(
            t.matches("/Accounts/AC1/Calls/CA%31.json").unwrap()[1].1,
            "CA1"
        );
        assert_eq!(
            t.matches("/Accounts/AC1/Calls/a.b.json").unwrap()[1].1,
            "a.b"
        );
        for path in [
            "/Accounts/AC1/Calls/.json",
            "/Accounts/AC1/Calls/CA1",
            "/Accounts/AC1/Calls/CA1.xml",
            "/Accounts/AC1/Calls/CA1.json/x",
        ] {
            assert_eq!(t.matches(path), None, "{path}");
        }
        let v = PathTemplate::parse("/v{version}/orders/{id}:cancel").unwrap();
        assert_eq!(
            v.matches("/V2/orders/o1:cancel"),
            Some(vec![
                ("version".into(), "2".into()),
                ("id".into(), "o1".into())
            ])
        );
        assert_eq!(v.matches("/v/orders/o1:cancel"), None);
        assert_eq!(v.matches("/x2/orders/o1:cancel"), None);
        assert!(v.capture_names().eq(["version", "id"]));
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
