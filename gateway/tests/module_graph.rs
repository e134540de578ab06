//! The layering of `gateway/src`, kept true: no import cycles among the modules of any
//! module (the crate's top-level modules included), only the server wires `proxy` in, the
//! driver (`run`) and the upstream client use no interface, the pure modules never name
//! pingora, and the Session format's modules do no I/O.
//!
//! Reads the sources: every `use crate::…`/`use super::…` tree and every inline
//! `crate::…`/`super::…` path outside test modules is an edge to the module it names, seen
//! through `pub use` re-exports of a module's children. A module's own file (`mod.rs`) may
//! use its children and they may use it (that is one module); siblings may not use each
//! other both ways, directly or around a longer cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// Modules that decide without I/O: never pingora, never `proxy`.
const PURE: [&str; 6] = [
    "protocol",
    "policy",
    "mcp",
    "ingress",
    "operation",
    "config",
];

/// The modules that do I/O or hold the process's state: a decision module (below) names none
/// of them, so the core owns its vocabulary (records, claims, outcomes) and the I/O around it
/// uses that, not the other way round.
const IO_MODULES: [&str; 21] = [
    "health",
    "quiet_log",
    "proxy",
    "listener",
    "run",
    "upstream",
    "store",
    "metrics",
    "receipts",
    "server",
    "conversations",
    "approval_page",
    "admin",
    "reload",
    "hangup",
    "tls",
    "clock",
    "drain",
    "explain",
    "events",
    "telemetry",
];

/// The pure modules that decide (`config` reads files, and is checked for pingora only).
const DECIDING: [&str; 5] = ["protocol", "policy", "mcp", "ingress", "operation"];

/// The modules of `identity` that read and verify Sessions, delegations and keys: pure
/// functions of the token, the keys and the clock (docs/sessions.md), so that every check is
/// unit-tested without a network and the format stays in one place.
const SESSION_FORMAT: [&[&str]; 5] = [
    &["identity", "format"],
    &["identity", "cnf"],
    &["identity", "delegations"],
    &["identity", "jwks"],
    &["identity", "verify"],
];

/// The webhook's event, its signature and its retry rule (`events/`): pure, so that the
/// schema, the Standard Webhooks signature and each retry rule are unit-tested without a
/// receiver; the queue and the sender around them do the I/O.
const EVENT_FORMAT: [&[&str]; 3] = [
    &["events", "event"],
    &["events", "signature"],
    &["events", "retry"],
];

/// The life of one operation (`operation::flow`): a state machine fed what the store and
/// the upstream answered, driven by the executor; it names none of them, nor the runtime, so
/// that its table tests run every path with a simulated clock.
const FLOW: [&[&str]; 3] = [
    &["operation", "flow"],
    &["operation", "flow", "steps"],
    &["operation", "flow", "claim"],
];

/// What doing I/O looks like in a source: fetching, files, sockets, the runtime, or the
/// modules of `identity` that do them.
const IO: [&str; 8] = [
    "reqwest",
    "tokio",
    "std::fs",
    "std::net",
    "pingora",
    "super::http",
    "super::source",
    "super::metadata",
];

/// The only module that may use `proxy`: the server builds the service. Every interface runs
/// its requests through `run`, which never uses `proxy`, and the listeners share their limits
/// through `listener`.
const USES_PROXY: [&str; 1] = ["server"];

struct Source {
    module: ModPath,
    code: String,
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let graph = Graph::read();
    let mut cycles = Vec::new();
    for parent in graph.parents() {
        if let Some(cycle) = graph.cycle_among_children(&parent) {
            cycles.push(format!("in {}: {}", display(&parent), cycle.join(" → ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn only_the_server_uses_proxy() {
    // `run` and `upstream` are not among them: the driver is below the interfaces.
    let graph = Graph::read();
    let users: BTreeSet<String> = graph
        .edges
        .iter()
        .filter(|(from, to)| to.first().is_some_and(|m| m == "proxy") && from[0] != "proxy")
        .map(|(from, _)| from[0].clone())
        .collect();
    assert!(
        users.iter().all(|user| USES_PROXY.contains(&user.as_str())),
        "modules other than {USES_PROXY:?} use proxy: {users:?}"
    );
}

/// The driver and the upstream client are below every interface: they name none of them,
/// so one entry (`run::run`) serves the HTTP API, MCP and the conversations service alike.
#[test]
fn the_driver_and_the_upstream_client_never_use_an_interface() {
    let graph = Graph::read();
    let interfaces = ["proxy", "conversations", "approval_page", "admin", "server"];
    let found: Vec<String> = graph
        .edges
        .iter()
        .filter(|(from, _)| ["run", "upstream"].contains(&from[0].as_str()))
        .filter(|(_, to)| to.first().is_some_and(|m| interfaces.contains(&m.as_str())))
        .map(|(from, to)| format!("{} uses {}", display(from), display(to)))
        .collect();
    assert!(found.is_empty(), "the driver using an interface: {found:?}");
    let upward: Vec<String> = graph
        .edges
        .iter()
        .filter(|(from, to)| from[0] == "upstream" && to.first().is_some_and(|m| m == "run"))
        .map(|(from, to)| format!("{} uses {}", display(from), display(to)))
        .collect();
    assert!(
        upward.is_empty(),
        "the upstream client using the driver: {upward:?}"
    );
}

#[test]
fn pure_modules_never_name_pingora() {
    let graph = Graph::read();
    let impure: Vec<String> = graph
        .sources
        .iter()
        .filter(|s| s.module.first().is_some_and(|m| PURE.contains(&m.as_str())))
        .filter(|s| s.code.contains("pingora"))
        .map(|s| display(&s.module))
        .collect();
    assert!(impure.is_empty(), "pure modules naming pingora: {impure:?}");
}

#[test]
fn pure_modules_never_import_io_modules() {
    let graph = Graph::read();
    let found: Vec<String> = graph
        .edges
        .iter()
        .filter(|(from, _)| from.first().is_some_and(|m| DECIDING.contains(&m.as_str())))
        .filter(|(_, to)| to.first().is_some_and(|m| IO_MODULES.contains(&m.as_str())))
        .map(|(from, to)| format!("{} uses {}", display(from), display(to)))
        .collect();
    assert!(
        found.is_empty(),
        "pure modules using I/O modules: {found:?}"
    );
}

#[test]
fn the_session_format_does_no_io() {
    let impure = io_named(&SESSION_FORMAT, &[]);
    assert!(
        impure.is_empty(),
        "the Session format doing I/O: {impure:?}"
    );
}

#[test]
fn the_webhook_event_format_does_no_io() {
    let impure = io_named(
        &EVENT_FORMAT,
        &["super::queue", "super::sender", "crate::metrics"],
    );
    assert!(impure.is_empty(), "the event format doing I/O: {impure:?}");
}

#[test]
fn the_operation_flow_does_no_io() {
    let extra = [
        "crate::store",
        "crate::proxy",
        "crate::run",
        "crate::upstream",
        "crate::clock",
        "async fn",
        ".await",
    ];
    let impure = io_named(&FLOW, &extra);
    assert!(
        impure.is_empty(),
        "the operation flow doing I/O: {impure:?}"
    );
}

/// What of [`IO`] and `extra` the sources of `modules` name (each module must be read).
fn io_named(modules: &[&[&str]], extra: &[&str]) -> Vec<String> {
    let graph = Graph::read();
    let mut found = 0;
    let mut impure = Vec::new();
    for source in &graph.sources {
        if !modules.iter().any(|m| source.module == path(m)) {
            continue;
        }
        found += 1;
        impure.extend(
            IO.iter()
                .chain(extra)
                .filter(|needle| source.code.contains(*needle))
                .map(|needle| format!("{} names {needle}", display(&source.module))),
        );
    }
    assert_eq!(found, modules.len(), "every module of {modules:?} is read");
    impure
}

/// The checker sees what it should: a cycle it must report, and re-exports it must follow.
#[test]
fn the_reader_finds_cycles_through_re_exports() {
    let sources = vec![
        source(
            &["a"],
            "mod x; mod y; pub use x::X; pub(crate) use y::{Y, Z};",
        ),
        source(&["a", "x"], "use super::Y; pub struct X;"),
        source(
            &["a", "y"],
            "use crate::a::X;\nfn f() { let _ = crate::b::g(); }",
        ),
        source(&["b"], "pub fn g() {}"),
    ];
    let graph = Graph::from_sources(sources);
    assert!(
        graph
            .edges
            .contains(&(path(&["a", "x"]), path(&["a", "y"])))
    );
    assert!(
        graph
            .edges
            .contains(&(path(&["a", "y"]), path(&["a", "x"])))
    );
    assert!(graph.edges.contains(&(path(&["a", "y"]), path(&["b"]))));
    assert_eq!(
        graph.cycle_among_children(&path(&["a"])),
        Some(vec!["a::x".into(), "a::y".into(), "a::x".into()])
    );
    assert_eq!(graph.cycle_among_children(&Vec::new()), None);
}

fn source(module: &[&str], code: &str) -> Source {
    Source {
        module: path(module),
        code: code.to_owned(),
    }
}

fn path(parts: &[&str]) -> ModPath {
    parts.iter().map(|p| p.to_string()).collect()
}

fn display(module: &ModPath) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

struct Graph {
    sources: Vec<Source>,
    modules: BTreeSet<ModPath>,
    edges: BTreeSet<(ModPath, ModPath)>,
}

impl Graph {
    fn read() -> Graph {
        // `MODULE_GRAPH_SRC` checks another tree (e.g. an older checkout's `gateway/src`).
        let root = std::env::var_os("MODULE_GRAPH_SRC")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
        let mut sources = Vec::new();
        for file in rust_files(&root) {
            let relative = file.strip_prefix(&root).unwrap_or(&file);
            let Some(module) = module_of(relative) else {
                continue;
            };
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            sources.push(Source {
                module,
                code: without_tests(&strip_comments_and_strings(&text)),
            });
        }
        assert!(
            sources.len() > 50,
            "read {} files under {root:?}",
            sources.len()
        );
        Graph::from_sources(sources)
    }

    fn from_sources(sources: Vec<Source>) -> Graph {
        let modules: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
        // `pub use child::Item` in a module: `module::Item` is `module::child`.
        let mut reexports: BTreeMap<(ModPath, String), ModPath> = BTreeMap::new();
        for source in &sources {
            for used in use_paths(&source.code, true) {
                let Some(absolute) = absolute(&modules, &source.module, &used) else {
                    continue;
                };
                if let Some(item) = absolute.last() {
                    let target = resolve_module(&modules, &absolute);
                    if target != source.module {
                        reexports.insert((source.module.clone(), item.clone()), target);
                    }
                }
            }
        }
        let mut edges = BTreeSet::new();
        for source in &sources {
            let mut paths = use_paths(&source.code, false);
            paths.extend(inline_paths(&source.code));
            for used in paths {
                let Some(absolute) = absolute(&modules, &source.module, &used) else {
                    continue;
                };
                let mut target = resolve_module(&modules, &absolute);
                // Through re-exports, as far as they go.
                for _ in 0..4 {
                    let next = absolute
                        .get(target.len())
                        .and_then(|item| reexports.get(&(target.clone(), item.clone())));
                    match next {
                        Some(child) if child.len() > target.len() && child.starts_with(&target) => {
                            target = child.clone()
                        }
                        _ => break,
                    }
                }
                if target != source.module {
                    edges.insert((source.module.clone(), target));
                }
            }
        }
        Graph {
            sources,
            modules,
            edges,
        }
    }

    /// Every module that has modules inside it (the crate root included).
    fn parents(&self) -> BTreeSet<ModPath> {
        self.modules
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| m[..m.len() - 1].to_vec())
            .collect()
    }

    /// A cycle among `parent`'s children, each standing for everything inside it.
    fn cycle_among_children(&self, parent: &ModPath) -> Option<Vec<String>> {
        let child_of = |module: &ModPath| -> Option<ModPath> {
            (module.len() > parent.len() && module.starts_with(parent))
                .then(|| module[..=parent.len()].to_vec())
        };
        let mut next: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
        for (from, to) in &self.edges {
            if let (Some(a), Some(b)) = (child_of(from), child_of(to))
                && a != b
            {
                next.entry(a).or_default().insert(b);
            }
        }
        // Depth-first search; a node on the current path seen again closes a cycle.
        fn visit(
            node: &ModPath,
            next: &BTreeMap<ModPath, BTreeSet<ModPath>>,
            on_path: &mut Vec<ModPath>,
            done: &mut BTreeSet<ModPath>,
        ) -> Option<Vec<String>> {
            if let Some(at) = on_path.iter().position(|n| n == node) {
                let mut cycle: Vec<String> = on_path[at..].iter().map(display).collect();
                cycle.push(display(node));
                return Some(cycle);
            }
            if !done.insert(node.clone()) {
                return None;
            }
            on_path.push(node.clone());
            for to in next.get(node).into_iter().flatten() {
                if let Some(cycle) = visit(to, next, on_path, done) {
                    return Some(cycle);
                }
            }
            on_path.pop();
            None
        }
        let mut done = BTreeSet::new();
        for node in next.keys() {
            if let Some(cycle) = visit(node, &next, &mut Vec::new(), &mut done) {
                return Some(cycle);
            }
        }
        None
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|read| read.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            files.extend(rust_files(&entry));
        } else if entry.extension().is_some_and(|e| e == "rs") {
            files.push(entry);
        }
    }
    files
}

/// `a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` is the crate; the binary's `main.rs` and
/// test modules (`tests.rs`, and `NAME_tests.rs` beside the module they test) are not part of
/// the library's layering.
fn module_of(relative: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop()?;
    match file.as_str() {
        "main.rs" if parts.is_empty() => return None,
        "lib.rs" if parts.is_empty() => {}
        "mod.rs" => {}
        "tests.rs" => return None,
        other if other.ends_with("_tests.rs") => return None,
        other => parts.push(other.strip_suffix(".rs")?.to_owned()),
    }
    Some(parts)
}

/// The code without comments, and with string and char literals emptied.
fn strip_comments_and_strings(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            i += end;
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = &rest[2 + hashes..];
            let end = body
                .find(&close)
                .map_or(rest.len(), |e| 2 + hashes + e + close.len());
            out.push_str("\"\"");
            i += end;
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() {
                match rest.as_bytes()[j] {
                    b'\\' => j += 2,
                    b'"' => break,
                    _ => j += 1,
                }
            }
            out.push_str("\"\"");
            i += (j + 1).min(rest.len());
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br##"`…: how many `#`.
fn raw_string_start(rest: &str) -> Option<usize> {
    let rest = rest.strip_prefix('b').unwrap_or(rest);
    let after_r = rest.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    after_r[hashes..].starts_with('"').then_some(hashes)
}

/// The code before an inline `#[cfg(test)] mod tests { … }` (always a file's last item).
fn without_tests(code: &str) -> String {
    let mut search = 0;
    while let Some(at) = code[search..].find("#[cfg(test)]") {
        let at = search + at;
        let after = code[at + "#[cfg(test)]".len()..].trim_start();
        if after.starts_with("mod ") && !after.split('\n').next().unwrap_or("").contains(';') {
            return code[..at].to_owned();
        }
        search = at + 1;
    }
    code.to_owned()
}

/// The paths of `use` trees: all of them, or only the re-exports (`pub use`, `pub(…) use`).
fn use_paths(code: &str, only_reexports: bool) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("use ") {
        let before = &code[..at];
        let boundary = before
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || c == ';' || c == '{' || c == '}');
        if !boundary {
            continue;
        }
        let line_start = before.rfind(['\n', ';', '{', '}']).map_or(0, |i| i + 1);
        let prefix = before[line_start..].trim();
        let reexport = prefix.starts_with("pub");
        let wanted = if only_reexports {
            reexport
        } else {
            reexport || prefix.is_empty()
        };
        if !wanted {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            continue;
        };
        let tree = code[at + 4..at + end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        expand(&tree, &mut Vec::new(), &mut paths);
    }
    paths
}

/// Expand a use tree (`a::{b, c::{d, e as f}}`) into its paths.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim().trim_matches(',').trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let depth = prefix.len();
        prefix.extend(head);
        for part in split_top_level(inner) {
            expand(part, prefix, out);
        }
        prefix.truncate(depth);
        return;
    }
    let name = tree.split(" as ").next().unwrap_or(tree);
    let mut path = prefix.clone();
    path.extend(
        name.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*")
            .map(str::to_owned),
    );
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    out.push(path);
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `crate::a::b` and `super::a` written inline in code.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for start in ["crate::", "super::"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let text: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(
                text.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
            );
        }
    }
    paths
}

/// A path relative to `module` (`crate::…`, `super::…`, `self::…`, `child::…`) as an
/// absolute one; `None` for other crates' paths.
fn absolute(modules: &BTreeSet<ModPath>, module: &ModPath, path: &[String]) -> Option<ModPath> {
    let first = path.first()?;
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => module.clone(),
        child if modules.contains(&[module.as_slice(), &[child.to_owned()]].concat()) => {
            let mut base = module.clone();
            base.extend(path.iter().cloned());
            return Some(base);
        }
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop();
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The deepest module an absolute path names.
fn resolve_module(modules: &BTreeSet<ModPath>, path: &ModPath) -> ModPath {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
        .unwrap_or_default()
}
