//! Policies that can hold the same request. Were the first in file order simply to win, a
//! looser policy (`/orders/{order}/{action}`) could hold a request whose own policy
//! (`/orders/{id}/exchanges`) puts an item in the summary that the looser one leaves out. So
//! two policies of one route may not match the same request unless the more specific one says
//! so (`overrides = ["looser"]`); it then wins wherever both match, whatever the file order.

use std::collections::BTreeSet;

use super::Policy;

/// A problem with the policies of one route: the message, and which policy it is about
/// (an index into the slice given to [`conflicts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    pub(crate) at: usize,
    pub(crate) message: String,
}

/// Whether some request would match both policies: the same method and overlapping path
/// templates, or the same MCP tool.
fn shared_request(a: &Policy, b: &Policy) -> Option<String> {
    if let (Some(x), Some(y)) = (&a.tool, &b.tool) {
        return (x == y).then(|| format!("tools/call of `{x}`"));
    }
    let (x, y) = (a.route.as_ref()?, b.route.as_ref()?);
    if !x.method.eq_ignore_ascii_case(&y.method) {
        return None;
    }
    x.path
        .shared_path(&y.path)
        .map(|path| format!("{} {path}", x.method))
}

fn describe(policy: &Policy) -> String {
    match (&policy.route, &policy.tool) {
        (Some(route), _) => format!(
            "`{}` ({} {}, {})",
            policy.name, route.method, route.path, policy.source
        ),
        (None, Some(tool)) => format!("`{}` (tool {tool}, {})", policy.name, policy.source),
        (None, None) => format!("`{}` ({})", policy.name, policy.source),
    }
}

/// Whether `a` names `b` in `overrides`.
fn names(a: &Policy, b: &Policy) -> bool {
    a.overrides.contains(&b.name)
}

/// Every problem with the policies of one route: two that can match the same request with
/// neither overriding the other, an `overrides` that names no policy, one that can never
/// match the same request, or one that would leave the other nothing to match; and cycles.
pub(crate) fn conflicts(policies: &[Policy]) -> Vec<Conflict> {
    let mut found = Vec::new();
    for (i, policy) in policies.iter().enumerate() {
        for named in &policy.overrides {
            let Some(other) = policies.iter().find(|p| p.name == *named) else {
                found.push(Conflict {
                    at: i,
                    message: format!(
                        "operation {}: overrides `{named}`, which is not a policy of this route",
                        describe(policy)
                    ),
                });
                continue;
            };
            if shared_request(policy, other).is_none() {
                found.push(Conflict {
                    at: i,
                    message: format!(
                        "operation {}: overrides {}, but no request matches both (another method, or paths that never meet): remove it",
                        describe(policy),
                        describe(other)
                    ),
                });
            } else if let (Some(x), Some(y)) = (&policy.route, &other.route)
                && x.path.covers(&y.path)
            {
                found.push(Conflict {
                    at: i,
                    message: format!(
                        "operation {}: overrides {}, yet matches every request that one does, so it would never apply: only a more specific policy may override",
                        describe(policy),
                        describe(other)
                    ),
                });
            }
        }
    }
    for (j, later) in policies.iter().enumerate() {
        for earlier in &policies[..j] {
            // The same tool twice is refused where tools are checked (with `[mcp]`).
            if earlier.tool.is_some() || later.tool.is_some() {
                continue;
            }
            let Some(request) = shared_request(earlier, later) else {
                continue;
            };
            let message = match (names(earlier, later), names(later, earlier)) {
                (false, false) => format!(
                    "operations {} and {} can match the same request (e.g. {request}), and the first in file order would hold it under its own summary and terms: make them distinct, or write `overrides = [\"…\"]` on the more specific one (policies/README.md, \"Overlapping routes\")",
                    describe(earlier),
                    describe(later)
                ),
                (true, true) => format!(
                    "operations {} and {} override each other: only the more specific one may",
                    describe(earlier),
                    describe(later)
                ),
                _ => continue,
            };
            found.push(Conflict { at: j, message });
        }
    }
    if found.is_empty() {
        let order = precedence(policies);
        let cycle: Vec<usize> = (0..policies.len()).filter(|i| !order.contains(i)).collect();
        if let Some(&at) = cycle.first() {
            found.push(Conflict {
                at,
                message: format!(
                    "operations {} override one another in a circle: only the more specific of two may override the other",
                    cycle
                        .iter()
                        .map(|i| describe(&policies[*i]))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    found
}

/// The order in which policies are tried: file order, except that a policy comes before the
/// ones it overrides. Policies in a cycle of `overrides` are left out ([`conflicts`] refuses
/// them; [`super::PolicySet`] then tries them last, in file order).
pub(crate) fn precedence(policies: &[Policy]) -> Vec<usize> {
    // Kahn's algorithm, always taking the earliest ready policy: stable for file order. The
    // edges are the `overrides` lists (a policy before each it names), found by name: linear
    // in the policies, which may be thousands, and their few `overrides`.
    let mut by_name: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for (i, policy) in policies.iter().enumerate() {
        by_name.entry(policy.name.as_str()).or_default().push(i);
    }
    let named = |i: usize| {
        policies[i]
            .overrides
            .iter()
            .flat_map(|name| by_name.get(name.as_str()).into_iter().flatten().copied())
            .filter(move |j| *j != i)
    };
    let mut waiting = vec![0usize; policies.len()];
    for i in 0..policies.len() {
        for j in named(i) {
            waiting[j] += 1;
        }
    }
    let mut ready: BTreeSet<usize> = (0..policies.len()).filter(|i| waiting[*i] == 0).collect();
    let mut order = Vec::with_capacity(policies.len());
    while let Some(next) = ready.pop_first() {
        order.push(next);
        for j in named(next) {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert(j);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::policy::{PathTemplate, PolicySet, Route, SummaryTemplate, TermSource};

    fn policy(name: &str, method: &str, path: &str, overrides: &[&str]) -> Policy {
        Policy {
            name: name.into(),
            route: Some(Route {
                method: method.into(),
                path: PathTemplate::parse(path).unwrap(),
            }),
            tool: None,
            id_prefix: "x".into(),
            expires_in: Duration::from_secs(60),
            same_action: vec!["id".into()],
            summary: SummaryTemplate::parse("Do it.").unwrap(),
            terms: vec![("id".into(), TermSource::Value(serde_json::json!(1)))],
            optional: Vec::new(),
            source: format!("p.toml:{}:1", name.len()),
            lookups: Vec::new(),
            ignore: Vec::new(),
            ignore_query: Vec::new(),
            ignore_headers: Vec::new(),
            approval: Default::default(),
            condition: None,
            overrides: overrides.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn messages(policies: &[Policy]) -> Vec<String> {
        conflicts(policies).into_iter().map(|c| c.message).collect()
    }

    #[test]
    fn overlapping_routes_are_refused_naming_both() {
        let policies = [
            policy("general", "POST", "/orders/{order}/{action}", &[]),
            policy("exchange", "POST", "/orders/{id}/exchanges", &[]),
        ];
        let found = conflicts(&policies);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].at, 1);
        let message = &found[0].message;
        assert!(
            message.contains("`general`")
                && message.contains("`exchange`")
                && message.contains("POST /orders/x/exchanges"),
            "{message}"
        );
        // Identical templates, whatever their captures are called or how literals are spelt.
        let same = [
            policy("a", "POST", "/orders/{id}", &[]),
            policy("b", "post", "/ORDERS/{order}/", &[]),
        ];
        assert_eq!(conflicts(&same).len(), 1);
        // Another method, or paths that never meet: no conflict.
        let apart = [
            policy("a", "POST", "/orders/{id}", &[]),
            policy("b", "PUT", "/orders/{id}", &[]),
            policy("c", "POST", "/orders/{id}/exchanges", &[]),
            policy("d", "POST", "/orders/{id}/refunds", &[]),
        ];
        assert_eq!(messages(&apart), Vec::<String>::new());
    }

    #[test]
    fn the_more_specific_may_override_and_then_wins_in_any_order() {
        for specific_first in [true, false] {
            let general = policy("general", "POST", "/orders/{order}/{action}", &[]);
            let specific = policy("exchange", "POST", "/orders/{id}/exchanges", &["general"]);
            let policies = if specific_first {
                vec![specific, general]
            } else {
                vec![general, specific]
            };
            assert_eq!(messages(&policies), Vec::<String>::new());
            let set = PolicySet::new(policies);
            let found = |path: &str| set.find_route("POST", path).unwrap().0.name.clone();
            assert_eq!(found("/orders/o1/exchanges"), "exchange");
            assert_eq!(found("/Orders//o1/%65xchanges/"), "exchange");
            assert_eq!(found("/orders/o1/refunds"), "general");
            // File order is kept for listing.
            assert_eq!(
                set.iter().next().unwrap().name,
                if specific_first {
                    "exchange"
                } else {
                    "general"
                }
            );
        }
    }

    #[test]
    fn bad_overrides_are_refused() {
        let cases: [(Vec<Policy>, &str); 5] = [
            (
                vec![policy("a", "POST", "/a/{x}", &["nope"])],
                "`nope`, which is not a policy",
            ),
            (
                vec![
                    policy("a", "POST", "/a/{x}", &["b"]),
                    policy("b", "PUT", "/a/{x}", &[]),
                ],
                "no request matches both",
            ),
            (
                // The looser one may not override: the other would never apply.
                vec![
                    policy("general", "POST", "/orders/{o}/{a}", &["exchange"]),
                    policy("exchange", "POST", "/orders/{id}/exchanges", &[]),
                ],
                "would never apply",
            ),
            (
                vec![
                    policy("a", "POST", "/a/{x}/c", &["b"]),
                    policy("b", "POST", "/a/b/{y}", &["a"]),
                ],
                "override each other",
            ),
            (
                // Three partial overlaps, each overriding the next: a circle.
                vec![
                    policy("a", "POST", "/{p}/b/c", &["b"]),
                    policy("b", "POST", "/a/{q}/c", &["c"]),
                    policy("c", "POST", "/a/b/{r}", &["a"]),
                ],
                "in a circle",
            ),
        ];
        for (policies, needle) in cases {
            let found = messages(&policies);
            assert!(
                found.iter().any(|m| m.contains(needle)),
                "{needle}: {found:?}"
            );
        }
    }

    #[test]
    fn partial_overlaps_need_a_choice_too() {
        let unmarked = [
            policy("a", "POST", "/a/{x}/c", &[]),
            policy("b", "POST", "/a/b/{y}", &[]),
        ];
        assert_eq!(conflicts(&unmarked).len(), 1);
        let marked = [
            policy("a", "POST", "/a/{x}/c", &[]),
            policy("b", "POST", "/a/b/{y}", &["a"]),
        ];
        assert_eq!(messages(&marked), Vec::<String>::new());
        let set = PolicySet::new(marked.to_vec());
        assert_eq!(set.find_route("POST", "/a/b/c").unwrap().0.name, "b");
        assert_eq!(set.find_route("POST", "/a/z/c").unwrap().0.name, "a");
    }
}
