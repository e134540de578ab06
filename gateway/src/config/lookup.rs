//! Load-time checks of `[operation.lookup]` and `lookup` terms: a lookup that could not be
//! filled, or whose answer no term reads, is a policy error, not a runtime surprise.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::file::{LookupFile, TermFile};
use crate::policy::LookupTemplate;

/// Problems, each with the span to report it at.
pub(crate) type Problems = Vec<(Range<usize>, String)>;

/// The compiled lookup template, or every problem with it and with the `lookup` terms.
pub(crate) fn compile_lookup(
    lookup: Option<&Spanned<LookupFile>>,
    terms: &BTreeMap<Spanned<String>, Spanned<TermFile>>,
) -> Result<Option<LookupTemplate>, Problems> {
    let mut problems = Problems::new();
    let is_lookup = |term: &Spanned<TermFile>| term.get_ref().lookup.is_some();
    let lookup_terms: Vec<_> = terms.iter().filter(|(_, t)| is_lookup(t)).collect();

    let Some(lookup) = lookup else {
        for (name, term) in lookup_terms {
            problems.push((
                term.span(),
                format!(
                    "terms.{}: a `lookup` term reads the answer of [operation.lookup], and this operation has none (add [operation.lookup] url = \"/…\")",
                    name.get_ref()
                ),
            ));
        }
        return if problems.is_empty() {
            Ok(None)
        } else {
            Err(problems)
        };
    };

    let url = &lookup.get_ref().url;
    let template = match LookupTemplate::parse(url.get_ref()) {
        Ok(template) => Some(template),
        Err(e) => {
            problems.push((url.span(), format!("lookup.url: {e}")));
            None
        }
    };
    if let Some(template) = &template {
        for placeholder in template.placeholders() {
            match terms.iter().find(|(name, _)| name.get_ref() == placeholder) {
                None => problems.push((
                    url.span(),
                    format!("lookup.url: placeholder `{{{placeholder}}}` names no term"),
                )),
                // The lookup's answer can't be needed to know where to look it up.
                Some((_, term)) if is_lookup(term) => problems.push((
                    url.span(),
                    format!(
                        "lookup.url: placeholder `{{{placeholder}}}` names a term that itself comes from the lookup; use a term from the request"
                    ),
                )),
                Some(_) => {}
            }
        }
    }
    if lookup_terms.is_empty() {
        problems.push((
            lookup.span(),
            "lookup: no term reads its answer; add a term like { lookup = \"$.price\" } or remove [operation.lookup]".into(),
        ));
    }
    if problems.is_empty() {
        Ok(template)
    } else {
        Err(problems)
    }
}
