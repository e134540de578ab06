//! Load-time checks of `[operation.lookup]`, `[operation.lookups.NAME]` and `lookup` terms: a
//! lookup that could not be filled, whose answer no term reads, or a quote sent to the action
//! itself, is a policy error, not a runtime surprise.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::file::{LookupFile, TermFile};
use crate::policy::{Lookup, LookupTemplate, PathTemplate};

/// Problems, each with the span to report it at.
pub(crate) type Problems = Vec<(Range<usize>, String)>;

/// Where a term's value comes from, as far as lookups care.
enum Kind<'a> {
    /// A lookup term, and the lookup it reads (`""`: the unnamed one).
    Lookup(&'a str),
    Computed,
    Request,
}

fn kind(term: &TermFile) -> Kind<'_> {
    match (&term.lookup, &term.at) {
        (Some(name), Some(_)) => Kind::Lookup(name),
        (Some(_), None) => Kind::Lookup(""),
        _ if term.compute.is_some() => Kind::Computed,
        _ => Kind::Request,
    }
}

/// The compiled lookups, the unnamed one first, then the named in name order; or every
/// problem with them and with the `lookup` terms. `route`: the policy's own path, which a
/// quote must never be sent to.
pub(crate) fn compile_lookups(
    unnamed: Option<&Spanned<LookupFile>>,
    named: &BTreeMap<Spanned<String>, Spanned<LookupFile>>,
    terms: &BTreeMap<Spanned<String>, Spanned<TermFile>>,
    route: Option<&PathTemplate>,
) -> Result<Vec<Lookup>, Problems> {
    let mut problems = Problems::new();
    let mut lookups = Vec::new();
    let all = unnamed
        .map(|file| (String::new(), file))
        .into_iter()
        .chain(named.iter().map(|(n, f)| (n.get_ref().clone(), f)));
    for (name, file) in all {
        let label = if name.is_empty() {
            "lookup".to_owned()
        } else {
            format!("lookups.{name}")
        };
        if let Some(lookup) = compile_one(&label, name, file, terms, route, &mut problems) {
            lookups.push(lookup);
        }
    }
    for name in named.keys() {
        let n = name.get_ref();
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            problems.push((
                name.span(),
                format!("lookups.{n}: a lookup name uses A-Z a-z 0-9 _"),
            ));
        }
    }

    let exists = |wanted: &str| {
        if wanted.is_empty() {
            unnamed.is_some()
        } else {
            named.keys().any(|n| n.get_ref() == wanted)
        }
    };
    for (name, term) in terms {
        let Kind::Lookup(wanted) = kind(term.get_ref()) else {
            continue;
        };
        if exists(wanted) {
            continue;
        }
        let problem = if wanted.is_empty() {
            format!(
                "terms.{}: a `lookup` term reads the answer of [operation.lookup], and this operation has none (add [operation.lookup] url = \"/…\")",
                name.get_ref()
            )
        } else {
            format!(
                "terms.{}: lookup `{wanted}` is not one of this operation's lookups (add [operation.lookups.{wanted}] url = \"/…\")",
                name.get_ref()
            )
        };
        problems.push((term.span(), problem));
    }
    if problems.is_empty() {
        Ok(lookups)
    } else {
        Err(problems)
    }
}

fn compile_one(
    label: &str,
    name: String,
    file: &Spanned<LookupFile>,
    terms: &BTreeMap<Spanned<String>, Spanned<TermFile>>,
    route: Option<&PathTemplate>,
    problems: &mut Problems,
) -> Option<Lookup> {
    let start = problems.len();
    let url = &file.get_ref().url;
    let quote = match &file.get_ref().method {
        None => false,
        Some(method) if method.get_ref().eq_ignore_ascii_case("GET") => false,
        Some(method) if method.get_ref().eq_ignore_ascii_case("POST") => true,
        Some(method) => {
            problems.push((
                method.span(),
                format!(
                    "{label}.method: `{}` is not GET (a record) or POST (a quote, sent the request's own body)",
                    method.get_ref()
                ),
            ));
            false
        }
    };
    let template = match LookupTemplate::parse(url.get_ref()) {
        Ok(template) => Some(template),
        Err(e) => {
            problems.push((url.span(), format!("{label}.url: {e}")));
            None
        }
    };
    if let Some(template) = &template {
        for placeholder in template.placeholders() {
            let found = terms.iter().find(|(n, _)| n.get_ref() == placeholder);
            let problem = match found.map(|(_, t)| kind(t.get_ref())) {
                None => Some(format!(
                    "{label}.url: placeholder `{{{placeholder}}}` names no term"
                )),
                // The lookups' answers can't be needed to know where to look them up.
                Some(Kind::Lookup(_)) => Some(format!(
                    "{label}.url: placeholder `{{{placeholder}}}` names a term that itself comes from a lookup; use a term from the request"
                )),
                Some(Kind::Computed) => Some(format!(
                    "{label}.url: placeholder `{{{placeholder}}}` names a computed term; use a term from the request"
                )),
                Some(Kind::Request)
                    if found.is_some_and(|(_, t)| {
                        t.get_ref().optional.as_ref().is_some_and(|o| *o.get_ref())
                    }) =>
                {
                    Some(format!(
                        "{label}.url: placeholder `{{{placeholder}}}` names an optional term: a request without it would have no record to look up"
                    ))
                }
                Some(Kind::Request) => None,
            };
            if let Some(problem) = problem {
                problems.push((url.span(), problem));
            }
        }
    }
    if quote {
        // A quote is sent the action's own body: sent to the action's own path, it would
        // perform the action before anybody approved it.
        let path = url.get_ref().split('?').next().unwrap_or_default();
        let same = match (route, PathTemplate::parse(path)) {
            (Some(route), Ok(quote_path)) => route.overlaps(&quote_path),
            // A path no template can express can't be told apart: refuse it.
            (Some(_), Err(_)) => true,
            (None, _) => false,
        };
        if same {
            problems.push((
                url.span(),
                format!(
                    "{label}.url: a quote (method = \"POST\") is never sent to the action's own path `{}`: use the upstream's preview endpoint",
                    route.map(ToString::to_string).unwrap_or_default()
                ),
            ));
        }
    }
    let read = terms
        .values()
        .any(|t| matches!(kind(t.get_ref()), Kind::Lookup(n) if n == name));
    if !read {
        let example = if name.is_empty() {
            "{ lookup = \"$.price\" }".to_owned()
        } else {
            format!("{{ lookup = \"{name}\", at = \"$.price\" }}")
        };
        problems.push((
            file.span(),
            format!("{label}: no term reads its answer; add a term like {example} or remove it"),
        ));
    }
    if problems.len() > start {
        return None;
    }
    Some(Lookup {
        name,
        quote,
        url: template?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::parse_policy_file;
    use crate::policy::TermSource;

    /// An exchange policy with the given extra terms and lookup tables.
    fn policy(terms: &str, tables: &str) -> String {
        format!(
            "[[operation]]\nname = \"exchange\"\nmethod = \"POST\"\npath = \"/orders/{{order_id}}/exchanges\"\nid_prefix = \"exc\"\nexpires_in = \"15m\"\nsame_action = [\"order_id\"]\nsummary = \"{{order_id}} {{sku}} {{new_price}} {{old_price}} {{difference}}\"\n[operation.terms]\norder_id = {{ path = \"order_id\" }}\nsku = {{ body = \"$.sku\" }}\n{terms}\n{tables}"
        )
    }

    const TERMS: &str = "new_price = { lookup = \"$.price\" }\nold_price = { lookup = \"order\", at = \"$.paid\" }\ndifference = { compute = \"new_price - old_price\" }\n";
    const TABLES: &str = "[operation.lookup]\nurl = \"/catalog/{sku}\"\n[operation.lookups.order]\nurl = \"/orders/{order_id}\"\n";

    fn errors(text: &str) -> Vec<String> {
        match parse_policy_file(std::path::Path::new("p.toml"), text) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    /// The one error, which must contain `needle` and be at `line:column`.
    fn refused(text: &str, needle: &str, line_column: &str) {
        let found = errors(text);
        assert!(
            found
                .iter()
                .any(|e| e.contains(needle) && e.starts_with(&format!("p.toml:{line_column}:"))),
            "wanted `{needle}` at {line_column}, got {found:?}"
        );
    }

    #[test]
    fn named_lookups_a_quote_and_computed_terms_load() {
        let text = policy(
            &format!("{TERMS}quoted = {{ lookup = \"quote\", at = \"$.total\" }}\n")
                .replace("{old_price}", "{old_price}"),
            &format!(
                "{TABLES}[operation.lookups.quote]\nmethod = \"POST\"\nurl = \"/orders/{{order_id}}/exchanges/preview\"\n"
            ),
        )
        .replace("{difference}\"", "{difference} {quoted}\"");
        let policies = parse_policy_file(std::path::Path::new("p.toml"), &text).unwrap();
        let lookups = &policies[0].lookups;
        let described: Vec<_> = lookups
            .iter()
            .map(|l| (l.name.as_str(), l.quote, l.url.to_string()))
            .collect();
        assert_eq!(
            described,
            [
                ("", false, "/catalog/{sku}".to_owned()),
                ("order", false, "/orders/{order_id}".to_owned()),
                (
                    "quote",
                    true,
                    "/orders/{order_id}/exchanges/preview".to_owned()
                ),
            ]
        );
        let source = |name: &str| {
            policies[0]
                .terms
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.describe())
                .unwrap()
        };
        assert_eq!(source("old_price"), "lookup `order` at `$.paid`");
        assert_eq!(source("new_price"), "lookup `$.price`");
        assert_eq!(source("difference"), "compute `new_price - old_price`");
        assert!(matches!(
            policies[0].terms.iter().find(|(n, _)| n == "difference"),
            Some((_, TermSource::Compute(_)))
        ));
    }

    #[test]
    fn lookup_problems_are_reported_where_they_are_written() {
        // Line 13 is `old_price`, 14 `difference`, 19 the named lookup's url.
        let text = policy(TERMS, TABLES);
        assert!(errors(&text).is_empty(), "{:?}", errors(&text));

        refused(
            &policy(TERMS, "[operation.lookup]\nurl = \"/catalog/{sku}\"\n"),
            "lookup `order` is not one of this operation's lookups",
            "13:13",
        );
        refused(
            &policy(
                TERMS,
                &TABLES.replace("/orders/{order_id}\"", "/orders/{old_price}\""),
            ),
            "names a term that itself comes from a lookup",
            "19:7",
        );
        refused(
            &policy(
                TERMS,
                &TABLES.replace("/orders/{order_id}\"", "/orders/{difference}\""),
            ),
            "names a computed term",
            "19:7",
        );
        refused(
            &policy(
                TERMS,
                &format!("{TABLES}[operation.lookups.unused]\nurl = \"/x\"\n"),
            ),
            "lookups.unused: no term reads its answer",
            "20:1",
        );
        refused(
            &policy(&TERMS.replace("at = \"$.paid\" ", ""), TABLES),
            "names a lookup: say where in its answer with at",
            "13:13",
        );
        refused(
            &policy(&TERMS.replace("lookup = \"order\", at", "at"), TABLES),
            "`at` goes with lookup",
            "13:13",
        );
        refused(
            &policy(
                TERMS,
                &TABLES.replace(
                    "[operation.lookups.order]\n",
                    "[operation.lookups.order]\nmethod = \"PUT\"\n",
                ),
            ),
            "lookups.order.method: `PUT` is not GET",
            "19:10",
        );
    }

    #[test]
    fn a_quote_is_never_sent_to_the_action_itself() {
        for url in [
            "/orders/{order_id}/exchanges",
            "/orders/{sku}/exchanges?preview=1",
            "/orders/x/exchanges",
        ] {
            let tables =
                format!("{TABLES}[operation.lookups.quote]\nmethod = \"post\"\nurl = \"{url}\"\n");
            let terms = format!("{TERMS}quoted = {{ lookup = \"quote\", at = \"$.total\" }}\n");
            let text = policy(&terms, &tables).replace("{difference}\"", "{difference} {quoted}\"");
            refused(
                &text,
                "a quote (method = \"POST\") is never sent to the action's own path",
                "23:7",
            );
        }
        // As a GET (a record), the same path is only read.
        let tables =
            format!("{TABLES}[operation.lookups.same]\nurl = \"/orders/{{order_id}}/exchanges\"\n");
        let terms = format!("{TERMS}listed = {{ lookup = \"same\", at = \"$.n\" }}\n");
        let text = policy(&terms, &tables).replace("{difference}\"", "{difference} {listed}\"");
        assert!(errors(&text).is_empty(), "{:?}", errors(&text));
    }

    #[test]
    fn computed_terms_are_checked() {
        refused(
            &policy(
                &TERMS.replace("new_price - old_price", "new_price - paid"),
                TABLES,
            ),
            "compute `new_price - paid` names `paid`, which is not a term",
            "14:14",
        );
        refused(
            &policy(
                &TERMS.replace("new_price - old_price", "new_price -"),
                TABLES,
            ),
            "compute `new_price -`: the expression ends where",
            "14:14",
        );
        refused(
            &policy(
                &TERMS.replace("new_price - old_price", "new_price % 2"),
                TABLES,
            ),
            "unexpected `%` at byte 10",
            "14:14",
        );
        // A cycle through two computed terms, and one that reads itself.
        let cycle = "new_price = { lookup = \"$.price\" }\nold_price = { compute = \"difference + 1\" }\ndifference = { compute = \"new_price - old_price\" }\n";
        let found = errors(&policy(
            cycle,
            "[operation.lookup]\nurl = \"/catalog/{sku}\"\n",
        ));
        assert!(
            found.iter().any(|e| e
                .contains("computed terms need each other (difference → old_price → difference)")),
            "{found:?}"
        );
        let found = errors(&policy(
            &TERMS.replace(
                "new_price - old_price",
                "difference * 2 + new_price + old_price",
            ),
            TABLES,
        ));
        assert!(
            found
                .iter()
                .any(|e| e.contains("need each other (difference → difference)")),
            "{found:?}"
        );
        // The summary must name a computed term, as any other.
        let found = errors(&policy(TERMS, TABLES).replace(" {difference}\"", "\""));
        assert!(
            found
                .iter()
                .any(|e| e.contains("summary leaves out term `difference`")),
            "{found:?}"
        );
    }
}
