//! The documentation holds together: every relative link in the repository's Markdown reaches a
//! file that exists and, with a `#fragment`, a heading of that page (GitHub's anchors);
//! docs/README.md, the index, names every page in docs/; and the README's small configuration
//! passes `poppy-gateway check`. The README's references live in docs/ pages that link into
//! each other (issue 40): a renamed heading, a moved page or a stale example fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use poppy_e2e::markdown::{self, Page};
use poppy_e2e::{binaries, run_binary};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// The Markdown files git tracks or would track (new pages too; not node_modules or venvs).
fn markdown_files(repo: &Path) -> Vec<PathBuf> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "*.md",
        ])
        .current_dir(repo)
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| repo.join(line))
        .filter(|path| path.is_file())
        .collect()
}

fn read_page(path: &Path) -> Page {
    markdown::page(&std::fs::read_to_string(path).unwrap())
}

/// A link to another site or scheme (`https:`, `mailto:`), not a path in this repository.
fn is_external(dest: &str) -> bool {
    dest.split(['/', '#'])
        .next()
        .is_some_and(|first| first.contains(':'))
}

#[test]
fn every_relative_link_in_the_markdown_resolves() {
    let repo = repo();
    let files = markdown_files(&repo);
    assert!(
        files.len() > 10,
        "found only {} Markdown files in {}",
        files.len(),
        repo.display()
    );
    let mut pages: HashMap<PathBuf, Page> = HashMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let links = pages
            .entry(file.clone())
            .or_insert_with(|| read_page(file))
            .links
            .clone();
        for dest in links.iter().filter(|dest| !is_external(dest)) {
            checked += 1;
            let (path, fragment) = dest.split_once('#').unwrap_or((dest, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let name = file.strip_prefix(&repo).unwrap().display();
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{name}: {dest}: no such file"));
                continue;
            };
            if fragment.is_empty() || target.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let page = pages
                .entry(target.clone())
                .or_insert_with(|| read_page(&target));
            if !page.anchors.contains(fragment) {
                broken.push(format!("{name}: {dest}: no heading #{fragment} there"));
            }
        }
    }
    assert!(checked > 30, "only {checked} relative links checked");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_docs_index_names_every_page_in_docs() {
    let docs = repo().join("docs");
    let index = read_page(&docs.join("README.md"));
    let listed: BTreeSet<&str> = index.links.iter().map(String::as_str).collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&docs).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") && name != "README.md" && !listed.contains(name.as_str()) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/README.md does not list {missing:?}"
    );
}

#[test]
fn the_readme_configuration_passes_check() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        markdown::code_block(&readme, "toml", "[[session.agent]]"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("policies/orders.toml"),
        markdown::code_block(&readme, "toml", "[[operation]]"),
    )
    .unwrap();
    let run = run_binary(
        &binaries::gateway(),
        &["check", "--config", config.to_str().unwrap()],
        "",
        &[("POPPY_GATEWAY_KEYS", &"k".repeat(32))],
        Duration::from_secs(20),
    );
    assert!(run.success(), "{}", run.describe());
    assert!(
        run.output().contains("/orders/{order_id}/cancel"),
        "check prints the policy's route:\n{}",
        run.output()
    );
}
