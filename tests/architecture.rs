//! The layout's rules, read from the source: which module may import which, no import circle
//! between files, SQL only in the storage modules, the framework crates kept out of the pure model,
//! a short `main.rs`, no long file (in `src/` or `tests/`) without a reason at its top to stay whole,
//! and no long function without a reason at the function.
//!
//! The file stays whole: the lexer, the resolver and the rules they serve are one reading of the
//! source, and each rule's test is a few lines on top of it.
//!
//! The source is lexed (comments, strings and char literals blanked), every `use` tree and every
//! `crate::`/`super::`/`self::` path (or one through a name a `use` brought in) is resolved to the
//! file that defines the module it names, and the rules are checked on those file-to-file edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules of the library each may import (besides itself). `cli` may import all.
const ALLOWED: &[(&str, &[&str])] = &[
    ("domain", &[]),
    ("process", &[]),
    ("db", &["domain"]),
    ("audit", &["db", "domain"]),
    ("auth", &["audit", "db", "domain"]),
    ("teams", &["audit", "db", "domain"]),
    ("fleet", &["audit", "db", "domain"]),
    ("ingest", &["db", "domain"]),
    ("billing", &["audit", "db", "domain"]),
    ("budgets", &["audit", "billing", "db", "domain", "reports"]),
    ("alerts", &["billing", "budgets", "db", "domain", "reports"]),
    ("reports", &["billing", "db", "domain"]),
    ("exports", &["billing", "db", "domain", "reports"]),
    ("plan", &["billing", "db", "domain"]),
    // What `serve` runs beside the HTTP server: partitions, retention, the alerts worker,
    // right-sizing's day summaries, the units' kept counts.
    (
        "background",
        &[
            "alerts", "db", "domain", "ingest", "plan", "reports", "units",
        ],
    ),
    ("collector", &["domain"]),
    // The unit cost reads Prometheus with the importer's query client.
    (
        "units",
        &["audit", "billing", "collector", "db", "domain", "reports"],
    ),
    ("sim", &["collector", "domain"]),
    (
        "http",
        &[
            "alerts",
            "audit",
            "auth",
            "background",
            "billing",
            "budgets",
            "db",
            "domain",
            "exports",
            "fleet",
            "ingest",
            "plan",
            "process",
            "reports",
            "teams",
            "units",
        ],
    ),
];

/// Edges the table above does not allow, each with why it is right anyway.
const EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "src/billing/props.rs",
    "sim",
    "the property tests of billing draw their fleets from the simulator",
)];

/// Files that may hold SQL besides `store.rs` files and `src/db/`.
const SQL_ALSO_IN: &str = "src/bin/slicemeter-bench/";

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(&'static str),
}

struct Lexed {
    toks: Vec<(Tok, usize)>,
}

/// Blanks comments, strings and char literals (keeping line breaks), then splits the rest into
/// identifiers and the punctuation paths are made of.
fn lex(src: &str) -> Lexed {
    let s: Vec<char> = src.chars().collect();
    let mut code = String::with_capacity(s.len());
    let mut i = 0;
    let blank = |code: &mut String, c: char| code.push(if c == '\n' { '\n' } else { ' ' });
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
                code.push(' ');
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    code.push_str("  ");
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    code.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut code, s[i]);
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !prev_is_ident(&s, i)
            && raw_string_at(&s, if c == 'b' { i + 1 } else { i }).is_some()
        {
            let start = if c == 'b' { i + 1 } else { i };
            let end = raw_string_at(&s, start).unwrap();
            while i < end {
                blank(&mut code, s[i]);
                i += 1;
            }
        } else if c == '"' || (c == 'b' && next == Some('"') && !prev_is_ident(&s, i)) {
            if c == 'b' {
                code.push(' ');
                i += 1;
            }
            code.push(' ');
            i += 1;
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    blank(&mut code, s[i]);
                    i += 1;
                }
                if i < s.len() {
                    blank(&mut code, s[i]);
                    i += 1;
                }
            }
            code.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < s.len() && s[j] != '\'' {
                    j += 1;
                }
                while i <= j && i < s.len() {
                    blank(&mut code, s[i]);
                    i += 1;
                }
            } else if s.get(i + 2) == Some(&'\'') {
                code.push_str("   ");
                i += 3;
            } else {
                code.push(' ');
                i += 1;
                while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                    code.push(' ');
                    i += 1;
                }
            }
        } else {
            code.push(c);
            i += 1;
        }
    }

    let c: Vec<char> = code.chars().collect();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            toks.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            toks.push((Tok::Punct("::"), line));
            i += 2;
        } else {
            let p = match ch {
                '{' => Some("{"),
                '}' => Some("}"),
                ',' => Some(","),
                ';' => Some(";"),
                '*' => Some("*"),
                '!' => Some("!"),
                _ if ch.is_whitespace() => None,
                _ => Some("."),
            };
            if let Some(p) = p {
                toks.push((Tok::Punct(p), line));
            }
            i += 1;
        }
    }
    Lexed { toks }
}

fn prev_is_ident(s: &[char], i: usize) -> bool {
    i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_')
}

/// Where a raw string starting at `i` (`r"`, `r#"`, ...) ends, if one starts there.
fn raw_string_at(s: &[char], i: usize) -> Option<usize> {
    if s.get(i) != Some(&'r') {
        return None;
    }
    let mut j = i + 1;
    let mut hashes = 0;
    while s.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if s.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < s.len() {
        if s[j] == '"' && (0..hashes).all(|k| s.get(j + 1 + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(s.len())
}

/// One crate's files and the module path each defines.
struct Crate {
    /// Module path (`["billing", "invoice"]`) to the file that defines it.
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// Macro name to the file that defines it (`#[macro_export]` puts them at the crate root).
    macros: BTreeMap<String, PathBuf>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of `file` within the crate rooted at `root_dir` (its `lib.rs` or `main.rs`).
fn module_path(root_dir: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root_dir).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// A reference from one file to a module path, at a line.
struct Reference {
    path: Vec<String>,
    line: usize,
    macro_call: bool,
}

/// Expands a `use` tree starting at `toks[i]` into full paths (relative to the use's scope),
/// returning the index after it. `prefix` is what the tree is nested under.
fn use_tree(
    toks: &[(Tok, usize)],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) -> usize {
    let mut path = prefix.to_vec();
    if toks.get(i).map(|t| &t.0) == Some(&Tok::Punct("::")) {
        i += 1;
    }
    loop {
        match toks.get(i) {
            Some((Tok::Ident(id), line)) => {
                let line = *line;
                path.push(id.clone());
                i += 1;
                match toks.get(i).map(|t| &t.0) {
                    Some(Tok::Punct("::")) => i += 1,
                    Some(Tok::Ident(kw)) if kw == "as" => {
                        let alias = match toks.get(i + 1) {
                            Some((Tok::Ident(a), _)) => a.clone(),
                            _ => String::new(),
                        };
                        path.pop();
                        path.push(id.clone());
                        out.push((path, Some(alias), line));
                        return i + 2;
                    }
                    _ => {
                        out.push((path, None, line));
                        return i;
                    }
                }
            }
            Some((Tok::Punct("*"), line)) => {
                out.push((path, Some("*".to_owned()), *line));
                return i + 1;
            }
            Some((Tok::Punct("{"), _)) => {
                i += 1;
                loop {
                    match toks.get(i).map(|t| &t.0) {
                        Some(Tok::Punct("}")) => return i + 1,
                        Some(Tok::Punct(",")) => i += 1,
                        None => return i,
                        _ => i = use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => return i,
        }
    }
}

/// Every reference `file` makes to a module path of its crate, resolved to absolute paths.
fn references(krate: &Crate, file: &Path, scope: &[String]) -> Vec<Reference> {
    let src = std::fs::read_to_string(file).unwrap();
    let toks = lex(&src).toks;
    let mut out = Vec::new();
    // Names brought in by `use`, per inline-module scope: name -> absolute path.
    let mut aliases: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    // The inline modules open at this point, with the brace depth each opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;

    let resolve = |module: &[String],
                   aliases: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
                   path: &[String]|
     -> Option<Vec<String>> {
        let first = path.first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => {
                let mut m = module.to_vec();
                let mut rest = path;
                while rest.first().map(String::as_str) == Some("super") {
                    m.pop();
                    rest = &rest[1..];
                }
                m.extend(rest.iter().cloned());
                return Some(m);
            }
            _ => {
                let mut child = module.to_vec();
                child.push(first.clone());
                if krate.modules.contains_key(&child) {
                    child
                } else if let Some(a) = aliases.get(module).and_then(|a| a.get(first)) {
                    a.clone()
                } else {
                    return None;
                }
            }
        };
        base.extend(path[1..].iter().cloned());
        Some(base)
    };

    let mut i = 0;
    while i < toks.len() {
        let module: Vec<String> = scope
            .iter()
            .cloned()
            .chain(inline.iter().map(|(m, _)| m.clone()))
            .collect();
        match &toks[i].0 {
            Tok::Punct("{") => {
                depth += 1;
                i += 1;
            }
            Tok::Punct("}") => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((Tok::Punct("{"), _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    depth += 1;
                    inline.push((name.clone(), depth));
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Tok::Ident(kw) if kw == "use" => {
                let mut trees = Vec::new();
                let end = use_tree(&toks, i + 1, &[], &mut trees);
                for (path, alias, line) in trees {
                    let Some(mut abs) = resolve(&module, &aliases, &path) else {
                        continue;
                    };
                    if abs.last().map(String::as_str) == Some("self") {
                        abs.pop();
                    }
                    let name = match alias.as_deref() {
                        Some("*") | Some("_") => None,
                        Some(a) => Some(a.to_owned()),
                        None => abs.last().cloned(),
                    };
                    if let Some(name) = name {
                        aliases
                            .entry(module.clone())
                            .or_default()
                            .insert(name, abs.clone());
                    }
                    out.push(Reference {
                        path: abs,
                        line,
                        macro_call: false,
                    });
                }
                i = end.max(i + 1);
            }
            Tok::Ident(first) => {
                // A path in code: `a::b::c`, not one that continues another (`x::a::b`).
                let continues = i > 0 && toks[i - 1].0 == Tok::Punct("::");
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j).map(|t| &t.0) == Some(&Tok::Punct("::")) {
                    match toks.get(j + 1) {
                        Some((Tok::Ident(id), _)) => {
                            path.push(id.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                let macro_call = toks.get(j).map(|t| &t.0) == Some(&Tok::Punct("!"));
                if !continues
                    && (path.len() > 1 || macro_call)
                    && let Some(abs) = resolve(&module, &aliases, &path)
                {
                    out.push(Reference {
                        path: abs,
                        line: toks[i].1,
                        macro_call,
                    });
                }
                i = j.max(i + 1);
            }
            _ => i += 1,
        }
    }
    out
}

/// The file a module path lands in: the deepest module of it that a file defines, or, for a
/// macro, the file that defines the macro.
fn target(krate: &Crate, r: &Reference) -> Option<PathBuf> {
    if let Some(name) = r.path.last()
        && let Some(file) = krate.macros.get(name)
        && (r.macro_call || r.path.len() == 1)
    {
        return Some(file.clone());
    }
    (0..=r.path.len())
        .rev()
        .find_map(|n| krate.modules.get(&r.path[..n]).cloned())
}

/// Every file-to-file import edge of the crate rooted at `root` (`lib.rs` or a `main.rs`).
fn edges(root: &Path, files: &[PathBuf]) -> BTreeMap<PathBuf, BTreeMap<PathBuf, usize>> {
    let root_dir = root.parent().unwrap();
    let mut krate = Crate {
        modules: BTreeMap::new(),
        macros: BTreeMap::new(),
    };
    for f in files {
        krate.modules.insert(module_path(root_dir, f), f.clone());
        let toks = lex(&std::fs::read_to_string(f).unwrap()).toks;
        for w in toks.windows(3) {
            if let (Tok::Ident(m), Tok::Punct("!"), Tok::Ident(name)) = (&w[0].0, &w[1].0, &w[2].0)
                && m == "macro_rules"
            {
                krate.macros.insert(name.clone(), f.clone());
            }
        }
    }
    let mut graph: BTreeMap<PathBuf, BTreeMap<PathBuf, usize>> = BTreeMap::new();
    for f in files {
        let scope = module_path(root_dir, f);
        let entry = graph.entry(f.clone()).or_default();
        for r in references(&krate, f, &scope) {
            if let Some(to) = target(&krate, &r)
                && &to != f
                && to != root
            {
                entry.entry(to).or_insert(r.line);
            }
        }
    }
    graph
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's files (everything under `src/` but `main.rs` and `bin/`).
fn lib_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.retain(|f| {
        let rel = f.strip_prefix(src()).unwrap();
        rel != Path::new("main.rs") && !rel.starts_with("bin")
    });
    files.sort();
    files
}

fn rel(p: &Path) -> String {
    p.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap()
        .display()
        .to_string()
}

fn top_module(p: &Path) -> Option<String> {
    let rel = p.strip_prefix(src()).unwrap();
    let first = rel.iter().next()?.to_string_lossy().into_owned();
    (first != "lib.rs").then(|| first.trim_end_matches(".rs").to_owned())
}

/// One circle in `graph`, if there is one, as the files around it.
fn a_cycle(graph: &BTreeMap<PathBuf, BTreeMap<PathBuf, usize>>) -> Option<Vec<PathBuf>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        n: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeMap<PathBuf, usize>>,
        marks: &mut BTreeMap<PathBuf, Mark>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        match marks.get(n) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let at = stack.iter().position(|s| s == n).unwrap();
                let mut c = stack[at..].to_vec();
                c.push(n.clone());
                return Some(c);
            }
            None => {}
        }
        marks.insert(n.clone(), Mark::Open);
        stack.push(n.clone());
        for next in graph.get(n).into_iter().flat_map(|e| e.keys()) {
            if let Some(c) = visit(next, graph, marks, stack) {
                return Some(c);
            }
        }
        stack.pop();
        marks.insert(n.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut marks, &mut Vec::new()))
}

fn lib_graph() -> BTreeMap<PathBuf, BTreeMap<PathBuf, usize>> {
    edges(&src().join("lib.rs"), &lib_files())
}

#[test]
fn no_file_of_src_imports_itself_round_a_circle() {
    let graph = lib_graph();
    // The reader works: the graph has the edges everyone knows are there.
    let http_mod = src().join("http/mod.rs");
    assert!(
        graph[&src().join("billing/service.rs")].contains_key(&src().join("billing/store.rs")),
        "the import reader lost billing's service -> store edge"
    );
    assert!(graph[&http_mod].contains_key(&src().join("http/state.rs")));
    if let Some(cycle) = a_cycle(&graph) {
        let steps: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("{} (line {})", rel(&w[0]), graph[&w[0]][&w[1]]))
            .collect();
        panic!(
            "an import circle: {} -> {}",
            steps.join(" -> "),
            rel(&cycle[0])
        );
    }
    // The binaries' own files, each crate on its own.
    let bench = src().join("bin/slicemeter-bench");
    let mut files = Vec::new();
    rust_files(&bench, &mut files);
    files.sort();
    let graph = edges(&bench.join("main.rs"), &files);
    assert!(graph.values().any(|e| !e.is_empty()));
    assert_eq!(
        a_cycle(&graph),
        None,
        "an import circle in slicemeter-bench"
    );
}

#[test]
fn each_module_imports_only_the_layers_below_it() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut bad = Vec::new();
    let mut seen = BTreeSet::new();
    for (from, to) in lib_graph() {
        let Some(a) = top_module(&from) else { continue };
        seen.insert(a.clone());
        if a == "cli" {
            continue;
        }
        let Some(may) = allowed.get(a.as_str()) else {
            bad.push(format!("{a} has no row in ALLOWED"));
            continue;
        };
        for (to, line) in to {
            let Some(b) = top_module(&to) else { continue };
            let excepted = EXCEPTIONS
                .iter()
                .any(|(file, m, _)| rel(&from) == *file && b == *m);
            if b != a && !may.contains(&b.as_str()) && !excepted {
                bad.push(format!("{}:{line} imports {}", rel(&from), rel(&to)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the layers:\n{}",
        bad.join("\n")
    );
    // Every row names a module that exists.
    for (m, _) in ALLOWED {
        assert!(
            seen.contains(*m),
            "ALLOWED names {m}, which is not a module"
        );
    }
}

#[test]
fn the_dashboard_reads_through_the_features_not_their_stores() {
    let mut bad = Vec::new();
    for (from, to) in lib_graph() {
        if !rel(&from).starts_with("src/http/ui/") {
            continue;
        }
        for (to, line) in to {
            let target = rel(&to);
            if target.ends_with("/store.rs") || target.contains("/store/") {
                bad.push(format!("{}:{line} imports {target}", rel(&from)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the dashboard reads a feature's store instead of the feature:\n{}",
        bad.join("\n")
    );
}

/// The identifiers a file's code (not its comments or strings) uses.
fn idents(file: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (t, line) in lex(&std::fs::read_to_string(file).unwrap()).toks {
        if let Tok::Ident(id) = t {
            out.entry(id).or_insert(line);
        }
    }
    out
}

#[test]
fn the_pure_model_uses_no_database_web_or_runtime_crate() {
    let mut files: Vec<PathBuf> = lib_files()
        .into_iter()
        .filter(|f| f.starts_with(src().join("domain")))
        .collect();
    assert!(files.len() > 5, "{files:?}");
    files.push(src().join("billing/pricing.rs"));
    let mut bad = Vec::new();
    for f in &files {
        let ids = idents(f);
        for krate in ["sqlx", "axum", "tokio"] {
            if let Some(line) = ids.get(krate) {
                bad.push(format!("{}:{line} uses {krate}", rel(f)));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn sql_lives_only_in_store_files_the_db_module_and_the_bench_binary() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut bad = Vec::new();
    let mut found = 0;
    for f in &files {
        let r = rel(f);
        let text = std::fs::read_to_string(f).unwrap();
        // As `grep -rn 'sqlx::query' src` reads it: comments count too.
        for (n, l) in text.lines().enumerate() {
            if l.contains("sqlx::query") {
                found += 1;
                let home = f.file_name().unwrap() == "store.rs"
                    || r.starts_with("src/db/")
                    || r.starts_with(SQL_ALSO_IN);
                if !home {
                    bad.push(format!("{r}:{}: {}", n + 1, l.trim()));
                }
            }
        }
    }
    assert!(
        found > 20,
        "only {found} queries found: the check reads nothing"
    );
    assert!(
        bad.is_empty(),
        "SQL outside the stores:\n{}",
        bad.join("\n")
    );
}

/// The longest a file may be without a reason at its top to stay whole.
const LONG_FILE: usize = 600;
/// The longest a function may be without a reason at the function.
const LONG_FN: usize = 150;

/// Every Rust file of `src/` and `tests/` (not the browser test's `node_modules`).
fn src_and_test_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        &mut files,
    );
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "node_modules"));
    files.sort();
    files
}

/// Each function with a body in `src`: its name, the line of its `fn` and its length in lines
/// (from `fn` to its closing brace).
fn functions(src: &str) -> Vec<(String, usize, usize)> {
    let toks = lex(src).toks;
    let mut out = Vec::new();
    for i in 0..toks.len() {
        let (Tok::Ident(kw), line) = &toks[i] else {
            continue;
        };
        let Some((Tok::Ident(name), _)) = toks.get(i + 1) else {
            continue;
        };
        if kw != "fn" {
            continue;
        }
        // The body's opening brace, unless a `;` ends the signature first (a trait's declaration).
        let Some(open) =
            (i + 2..toks.len()).find(|&j| matches!(toks[j].0, Tok::Punct("{") | Tok::Punct(";")))
        else {
            continue;
        };
        if toks[open].0 == Tok::Punct(";") {
            continue;
        }
        let mut depth = 0usize;
        for (tok, end) in &toks[open..] {
            match tok {
                Tok::Punct("{") => depth += 1,
                Tok::Punct("}") => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((name.clone(), *line, end - line + 1));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Whether the comments and attributes right above line `line` (1-based) give a reason for the
/// function's length: a comment line `// long: <why>` (or `/// long: <why>`).
fn says_why_it_is_long(src: &str, line: usize) -> bool {
    let lines: Vec<&str> = src.lines().collect();
    lines[..line - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| {
            l.trim_start_matches('/')
                .trim_start()
                .strip_prefix("long:")
                .is_some_and(|why| !why.trim().is_empty())
        })
}

#[test]
fn the_function_reader_measures_bodies_not_signatures_or_strings() {
    let src = "trait T { fn f(&self); }\n\
               // long: a reason\n\
               #[test]\n\
               fn g() {\n    let s = \"}\";\n    let p: fn(u8) -> u8 = h;\n}\n\
               fn h(x: u8) -> u8 { x }\n";
    assert_eq!(
        functions(src),
        vec![("g".to_owned(), 4, 4), ("h".to_owned(), 8, 1)]
    );
    assert!(says_why_it_is_long(src, 4));
    assert!(!says_why_it_is_long(src, 8));
}

#[test]
fn long_functions_say_why_at_the_function() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for f in src_and_test_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (name, line, len) in functions(&text) {
            seen += 1;
            if len > LONG_FN && !says_why_it_is_long(&text, line) {
                bad.push(format!("{}:{line} fn {name} ({len} lines)", rel(&f)));
            }
        }
    }
    assert!(
        seen > 500,
        "only {seen} functions found: the reader reads nothing"
    );
    assert!(
        bad.is_empty(),
        "functions over {LONG_FN} lines without a `// long: <why>` comment right above them \
         (split them, or say why they stay whole):\n{}",
        bad.join("\n")
    );
}

#[test]
fn main_only_parses_and_dispatches_and_long_files_say_why_they_stay_whole() {
    let main = std::fs::read_to_string(src().join("main.rs")).unwrap();
    assert!(
        main.lines().count() < 100,
        "src/main.rs has {} lines",
        main.lines().count()
    );
    let files = src_and_test_files();
    assert!(
        files.iter().any(|f| rel(f) == "tests/api/billing.rs"),
        "the tests' files are not read"
    );
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        if text.lines().count() > LONG_FILE {
            let header: String = text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .collect::<Vec<_>>()
                .join(" ");
            if !header.contains("stays whole") {
                bad.push(format!("{} ({} lines)", rel(f), text.lines().count()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "files over {LONG_FILE} lines without a reason at the top to stay whole \
         (`//! ... stays whole ...`): {bad:?}"
    );
}

#[test]
fn the_lexer_blanks_comments_strings_and_chars_but_keeps_code() {
    let src = r####"
        // use crate::db::x;
        /* use crate::db::y; /* nested */ */
        let s = "use crate::db::z;";
        let r = r#"use crate::"db"::w;"#;
        let c = '"'; let l: &'static str = "";
        use crate::billing::{self, store::{insert as put}, *};
    "####;
    let ids: Vec<String> = lex(src)
        .toks
        .into_iter()
        .filter_map(|(t, _)| match t {
            Tok::Ident(i) => Some(i),
            _ => None,
        })
        .collect();
    assert!(!ids.contains(&"db".to_owned()), "{ids:?}");
    assert!(ids.contains(&"billing".to_owned()), "{ids:?}");
    let toks = lex("use crate::billing::{self, store::{insert as put}, *};").toks;
    let mut trees = Vec::new();
    use_tree(&toks, 1, &[], &mut trees);
    let got: Vec<(String, Option<String>)> = trees
        .into_iter()
        .map(|(p, a, _)| (p.join("::"), a))
        .collect();
    assert_eq!(
        got,
        vec![
            ("crate::billing::self".to_owned(), None),
            (
                "crate::billing::store::insert".to_owned(),
                Some("put".to_owned())
            ),
            ("crate::billing".to_owned(), Some("*".to_owned())),
        ]
    );
}
