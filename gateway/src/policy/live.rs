//! The running policies, swappable while requests are served: a reload replaces the whole
//! [`PolicySet`] at once, and every request reads one consistent set with a lock-free load.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Policy, PolicySet};

/// A handle on the running policies; clones share them.
#[derive(Debug, Clone)]
pub(crate) struct LivePolicies {
    current: Arc<ArcSwap<PolicySet>>,
}

impl LivePolicies {
    pub(crate) fn new(policies: PolicySet) -> LivePolicies {
        LivePolicies {
            current: Arc::new(ArcSwap::from_pointee(policies)),
        }
    }

    /// The set in force now. Hold it for the whole of one request, so that a reload in the
    /// middle cannot mix two sets.
    pub(crate) fn snapshot(&self) -> Arc<PolicySet> {
        self.current.load_full()
    }

    /// Put `policies` in force for every request that starts from now on.
    pub(crate) fn replace(&self, policies: PolicySet) {
        self.current.store(Arc::new(policies));
    }

    /// [`PolicySet::find_tool`] on the set in force.
    pub(crate) fn find_tool(&self, tool: &str) -> Option<Arc<Policy>> {
        self.current.load().find_tool(tool)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::policy::{PathTemplate, Route, SummaryTemplate, TermSource};
    use std::time::Duration;

    fn policy(name: &str, path: &str) -> Policy {
        Policy {
            name: name.into(),
            route: Some(Route {
                method: "POST".into(),
                path: PathTemplate::parse(path).unwrap(),
            }),
            tool: None,
            id_prefix: "x".into(),
            expires_in: Duration::from_secs(60),
            same_action: vec!["id".into()],
            summary: SummaryTemplate::parse("Do {id}.").unwrap(),
            terms: vec![("id".into(), TermSource::Path("id".into()))],
            optional: Vec::new(),
            source: "test".into(),
            lookups: Vec::new(),
            ignore: Vec::new(),
            ignore_query: Vec::new(),
            ignore_headers: Vec::new(),
            approval: Default::default(),
            condition: None,
            overrides: Vec::new(),
        }
    }

    #[test]
    fn a_replacement_applies_to_later_lookups_only() {
        let live = LivePolicies::new(PolicySet::new(vec![policy("old", "/old/{id}")]));
        let before = live.snapshot();
        live.clone()
            .replace(PolicySet::new(vec![policy("new", "/new/{id}")]));
        assert!(live.snapshot().find_route("POST", "/old/1").is_none());
        assert_eq!(
            live.snapshot().find_route("POST", "/new/1").unwrap().0.name,
            "new"
        );
        // A request that took its snapshot before the reload keeps the old set.
        assert!(before.find_route("POST", "/old/1").is_some());
    }
}
