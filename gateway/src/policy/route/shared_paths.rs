//! Comparing two path templates: whether some request path matches both, and whether one
//! matches every path the other does.

use super::{PathTemplate, Segment};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
