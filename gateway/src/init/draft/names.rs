//! Names in a draft: terms in snake case, policy names from operationIds, and unique names
//! and id prefixes for every draft of a file.

use std::collections::BTreeSet;

use super::{Draft, Target};

/// A term name (`A-Z a-z 0-9 _`) in snake case: `AccountSid` → `account_sid`,
/// `Customer[name]` → `customer_name`, `api-key` → `api_key`.
pub(crate) fn term_name(raw: &str) -> String {
    let chars: Vec<char> = raw.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_alphanumeric() {
            let boundary = c.is_ascii_uppercase()
                && i > 0
                && (chars[i - 1].is_ascii_lowercase()
                    || chars[i - 1].is_ascii_digit()
                    || (chars[i - 1].is_ascii_uppercase()
                        && chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase())));
            if boundary && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    let out = out.trim_end_matches('_').to_owned();
    if out.is_empty() {
        "value".to_owned()
    } else {
        out
    }
}

/// A policy name (`A-Z a-z 0-9 _ -`) from an operationId: other characters become `_`.
pub(crate) fn policy_name(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

/// `base`, or `base_2`, `base_3`… : the first not in `taken`, at most `max` characters.
pub(super) fn unique(base: &str, taken: &BTreeSet<String>, max: usize) -> String {
    let base: String = base.chars().take(max).collect();
    if !taken.contains(&base) {
        return base;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = max.saturating_sub(suffix.len()).min(base.len());
            format!("{}{suffix}", &base[..keep])
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_default()
}

/// Unique names and id prefixes, in draft order.
pub(super) fn assign_names(drafts: &[Draft]) -> Vec<(String, String)> {
    let mut names = BTreeSet::new();
    let mut prefixes = BTreeSet::new();
    drafts
        .iter()
        .map(|draft| {
            let mut base = policy_name(&draft.key);
            if base.is_empty() {
                base = match &draft.target {
                    Target::Operation { method, path } => {
                        policy_name(&format!("{}_{path}", method.to_lowercase()))
                    }
                    Target::Tool { tool } => policy_name(tool),
                };
            }
            if base.is_empty() {
                base = "action".to_owned();
            }
            let name = unique(&base, &names, usize::MAX);
            names.insert(name.clone());
            let alnum: String = name
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .map(|c| c.to_ascii_lowercase())
                .collect();
            let alnum = if alnum.is_empty() {
                "op".to_owned()
            } else {
                alnum
            };
            let prefix = unique_alnum(&alnum, &prefixes);
            prefixes.insert(prefix.clone());
            (name, prefix)
        })
        .collect()
}

/// An id prefix of 1 to 16 of `A-Z a-z 0-9`, not in `taken`.
fn unique_alnum(base: &str, taken: &BTreeSet<String>) -> String {
    let first: String = base.chars().take(16).collect();
    if !taken.contains(&first) {
        return first;
    }
    (2u32..)
        .map(|n| {
            let digits = n.to_string();
            let keep = 16usize.saturating_sub(digits.len()).min(base.len());
            format!("{}{digits}", &base[..keep])
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_default()
}

#[allow(clippy::unwrap_used)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_names_are_snake_case_and_valid() {
        assert_eq!(term_name("AccountSid"), "account_sid");
        assert_eq!(term_name("Customer[name]"), "customer_name");
        assert_eq!(term_name("api-key"), "api_key");
        assert_eq!(term_name("HTTPMethod"), "http_method");
        assert_eq!(term_name("email_id"), "email_id");
        assert_eq!(term_name("Tags[]"), "tags");
        assert_eq!(term_name("¿?"), "value");
    }

    #[test]
    fn policy_names_and_prefixes_are_sanitised_and_unique() {
        assert_eq!(policy_name("emails/send"), "emails_send");
        assert_eq!(policy_name("UpdateCall"), "UpdateCall");
        assert_eq!(policy_name("/x.y/"), "x_y");
        let op = |key: &str| {
            Draft::new(
                key,
                "",
                Target::Operation {
                    method: "POST".into(),
                    path: "/x".into(),
                },
            )
        };
        let names = assign_names(&[
            op("emails/send"),
            op("emails.send"),
            op(""),
            op("averyveryverylongoperationname"),
            op("averyveryverylongoperationname2"),
        ]);
        assert_eq!(names[0], ("emails_send".into(), "emailssend".into()));
        assert_eq!(names[1], ("emails_send_2".into(), "emailssend2".into()));
        assert_eq!(names[2].0, "post_x");
        assert_eq!(names[3].1, "averyveryverylon");
        assert_eq!(names[4].1, "averyveryverylo2");
    }
}
