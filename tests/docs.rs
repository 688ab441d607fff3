//! The manual's own checks: every relative link in README.md and docs/ leads somewhere (the file,
//! and the heading when the link names one), README.md stays short, and the configuration table
//! of docs/operations.md is the one the command line's definitions give.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file of docs/.
fn manual() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The text outside fenced code blocks and inline code spans, where a link can be.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans: every other backtick-delimited piece.
        for (i, piece) in line.split('`').enumerate() {
            if i % 2 == 0 {
                out.push_str(piece);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of a file's inline links, `[text](target)`.
fn link_targets(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    out
}

/// The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces
/// to hyphens, a repeated one numbered (`-1`, `-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while out.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        out.insert(candidate);
    }
    out
}

#[test]
fn the_slugs_are_githubs() {
    let a = anchors(
        "# Title\n## Past one PostgreSQL (Citus)\n## `import prometheus`\n## A b\n## A b\n```\n# not a heading\n```\n",
    );
    let want: BTreeSet<String> = [
        "title",
        "past-one-postgresql-citus",
        "import-prometheus",
        "a-b",
        "a-b-1",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(a, want);
    assert_eq!(
        link_targets("see [a](b.md#c) and `[x](not-a-link)`\n```\n[y](nor-this)\n```\n[z](d/)"),
        vec!["b.md#c", "d/"]
    );
}

#[test]
fn every_relative_link_of_the_readme_and_docs_resolves() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in manual() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                bad.push(format!("{name}: {target} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|x| x == "md")
            {
                let there = anchors(&std::fs::read_to_string(&resolved).unwrap());
                if !there.contains(anchor) {
                    bad.push(format!("{name}: {target} (no heading with that anchor)"));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: the reader reads nothing"
    );
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn the_readme_is_under_12_kb() {
    let size = std::fs::metadata(root().join("README.md")).unwrap().len();
    assert!(
        size < 12 * 1024,
        "README.md is {size} bytes: the manual's detail belongs in docs/"
    );
}

const BEGIN: &str =
    "<!-- config: begin (generated: SLICEMETER_UPDATE_DOCS=1 cargo test --test docs) -->\n";
const END: &str = "<!-- config: end -->";

#[test]
fn the_configuration_table_is_the_one_the_command_line_defines() {
    let path = root().join("docs/operations.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (before, rest) = text
        .split_once(BEGIN)
        .expect("docs/operations.md has the configuration table's begin marker");
    let (table, after) = rest
        .split_once(END)
        .expect("docs/operations.md has the configuration table's end marker");
    let want = slicemeter::cli::config_table();
    // The table names the flags everyone knows are there.
    for flag in [
        "`--database-url`",
        "`--listen`",
        "`--spool-dir`",
        "`--issue-grace`",
    ] {
        assert!(want.contains(flag), "the generated table lacks {flag}");
    }
    if table == want {
        return;
    }
    if std::env::var_os("SLICEMETER_UPDATE_DOCS").is_some() {
        // Written aside and renamed, so that the link test, reading the file at the same time,
        // never sees half of it.
        let aside = path.with_extension("md.new");
        std::fs::write(&aside, format!("{before}{BEGIN}{want}{END}{after}")).unwrap();
        std::fs::rename(&aside, &path).unwrap();
        return;
    }
    let old: BTreeSet<&str> = table.lines().collect();
    let new: BTreeSet<&str> = want.lines().collect();
    let gone: Vec<&str> = old.difference(&new).copied().collect();
    let added: Vec<&str> = new.difference(&old).copied().collect();
    panic!(
        "docs/operations.md's configuration table differs from the flags' definitions in src/cli/.\n\
         Fix: SLICEMETER_UPDATE_DOCS=1 cargo test --test docs (then commit docs/operations.md)\n\
         rows only in the document:\n{}\nrows only in the definitions:\n{}",
        gone.join("\n"),
        added.join("\n")
    );
}
