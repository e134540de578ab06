//! Drafted routes that can match one request, settled as `check` wants: the more specific
//! overrides the other, else the later is commented out.

use super::{Draft, Target};
use crate::policy::PathTemplate;

/// Two live drafts of one method whose paths can match the same request: the more specific
/// overrides the other; the same route twice, or two that neither covers, leave the later
/// commented out (`check` would refuse them, and which should win is the operator's call).
pub(super) fn settle_overlaps(drafts: &mut [Draft], names: &[(String, String)]) {
    let templates: Vec<Option<(String, PathTemplate)>> = drafts
        .iter()
        .map(|d| match &d.target {
            Target::Operation { method, path } => PathTemplate::parse(path)
                .ok()
                .map(|t| (method.to_ascii_uppercase(), t)),
            Target::Tool { .. } => None,
        })
        .collect();
    for later in 0..drafts.len() {
        for earlier in 0..later {
            let (Some((m1, a)), Some((m2, b))) = (&templates[earlier], &templates[later]) else {
                continue;
            };
            if m1 != m2
                || drafts[earlier].unexpressible.is_some()
                || drafts[later].unexpressible.is_some()
                || !a.overlaps(b)
            {
                continue;
            }
            let (a_covers, b_covers) = (a.covers(b), b.covers(a));
            let other = |i: usize| names[i].0.clone();
            match (a_covers, b_covers) {
                (true, false) => drafts[later].overrides.push(other(earlier)),
                (false, true) => drafts[earlier].overrides.push(other(later)),
                (true, true) => {
                    drafts[later].refuse(format!(
                        "the same route as `{}` ({m1} {a}): one policy per request",
                        other(earlier)
                    ));
                    drafts[later].held_by = Some(other(earlier));
                }
                (false, false) => drafts[later].refuse(format!(
                    "can match the same requests as `{}` ({m1} {a}) and neither is more specific: choose which holds them",
                    other(earlier)
                )),
            }
        }
    }
    // A draft commented out after another came to override it is overridden by none.
    let commented: Vec<String> = drafts
        .iter()
        .zip(names)
        .filter(|(d, _)| d.unexpressible.is_some())
        .map(|(_, (name, _))| name.clone())
        .collect();
    for draft in drafts.iter_mut() {
        draft.overrides.retain(|name| !commented.contains(name));
        if draft
            .held_by
            .as_ref()
            .is_some_and(|h| commented.contains(h))
        {
            draft.held_by = None;
        }
    }
}

#[allow(clippy::unwrap_used)]
#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::draft::{Source, render};

    #[test]
    fn overlapping_routes_get_overrides_or_are_commented_out() {
        let op = |key: &str, path: &str| {
            let mut d = Draft::new(
                key,
                "",
                Target::Operation {
                    method: "POST".into(),
                    path: path.into(),
                },
            );
            for capture in path.split('{').skip(1) {
                let name = capture.split('}').next().unwrap_or_default();
                d.add_term(name, Source::Path(name.into()), false);
            }
            if d.terms.is_empty() {
                d.add_term("x", Source::Body("$.x".into()), false);
            }
            d
        };
        let (file, outcomes) = render(
            "test",
            vec![
                op("general", "/domains/{id}"),
                op("claim", "/domains/claim"),
                op("again", "/domains/{other}"),
                op("cross_a", "/a/{x}/c"),
                op("cross_b", "/a/b/{y}"),
            ],
        );
        assert_eq!(outcomes[0].commented, None);
        assert_eq!(outcomes[1].commented, None, "{file}");
        assert!(file.contains("overrides = [\"general\"]"));
        assert!(
            outcomes[2]
                .commented
                .as_deref()
                .unwrap()
                .contains("same route")
        );
        assert_eq!(outcomes[3].commented, None);
        assert!(
            outcomes[4]
                .commented
                .as_deref()
                .unwrap()
                .contains("neither is more specific")
        );
        assert!(file.contains("# NOT DRAFTED: the same route as `general`"));
    }
}
