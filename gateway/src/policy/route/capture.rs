//! A capture of a path template: `{name}`, alone in its segment or between a literal
//! prefix and suffix, and what it reads from a request's segment.

use super::TemplateError;

/// A `{name}`, alone in its segment or between a literal `prefix` and `suffix` (ASCII, lower
/// case, matched case-insensitively as literals are). A capture never matches an empty value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Capture {
    pub(super) name: String,
    pub(super) prefix: String,
    pub(super) suffix: String,
}

impl Capture {
    /// The value this capture reads from a decoded segment, if the segment is its shape. The
    /// shape is decided on the folded segment, as the route index decides it; the value keeps
    /// the request's letter case.
    pub(super) fn read(&self, segment: &str) -> Option<String> {
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
    pub(super) fn is_affixed(&self) -> bool {
        !self.prefix.is_empty() || !self.suffix.is_empty()
    }

    /// Whether some value makes this capture's segment the literal (decoded, folded) one.
    pub(super) fn admits(&self, literal: &str) -> bool {
        has_affixes(literal, &self.prefix, &self.suffix)
    }

    /// Whether some segment is both this capture's and `other`'s: their prefixes agree (one
    /// starts the other), and so do their suffixes.
    pub(super) fn meets(&self, other: &Capture) -> bool {
        (self.prefix.starts_with(&other.prefix) || other.prefix.starts_with(&self.prefix))
            && (self.suffix.ends_with(&other.suffix) || other.suffix.ends_with(&self.suffix))
    }

    /// Whether every segment `other` captures, this captures too.
    pub(super) fn holds(&self, other: &Capture) -> bool {
        other.prefix.starts_with(&self.prefix) && other.suffix.ends_with(&self.suffix)
    }
}

/// `{name}`, `prefix{name}`, `{name}suffix` or `prefix{name}suffix`.
pub(super) fn parse_capture(raw: &str) -> Result<Capture, TemplateError> {
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

/// Characters a capture's literal prefix or suffix may have: a path segment's own (RFC 3986
/// `pchar`) but `%` (an affix is written as sent) and `;` (refused in every target).
fn is_affix_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,=:@".contains(&b)
}

/// Whether a decoded and case-folded segment is `prefix`, a value, then `suffix`.
pub(super) fn has_affixes(folded: &str, prefix: &str, suffix: &str) -> bool {
    folded.len() > prefix.len() + suffix.len()
        && folded.starts_with(prefix)
        && folded.ends_with(suffix)
}

#[cfg(test)]
mod tests {
    use super::super::PathTemplate;

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
}
