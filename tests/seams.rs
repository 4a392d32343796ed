//! The code's seams, read from the sources (these tests do not run dlock): the top-level modules of
//! `src/` import one another without a cycle, and no backend touches process signals. The rules
//! themselves are in docs/DESIGN.md, under Layout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A file's code with its comments and the contents of its string and character literals blanked
/// (line breaks kept, so line numbers still hold): a path named in a doc comment or a message is
/// no import.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            // A raw string: r"...", r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let closing: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let closing: Vec<char> = closing.chars().collect();
            for _ in i..=j {
                out.push(' ');
            }
            i = j + 1;
            while i < chars.len() && !chars[i..].starts_with(&closing) {
                out.push(blank(chars[i]));
                i += 1;
            }
            for _ in 0..closing.len().min(chars.len() - i) {
                out.push(' ');
            }
            i += closing.len();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F}') or a lifetime ('a, 'static).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                for _ in i..=j.min(chars.len() - 1) {
                    out.push(' ');
                }
                i = j + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (ident_char(chars[i - 1]) || chars[i - 1] == '$')
}

/// The first segments of every path starting at `prefix` (`crate::`, `super::`) in `code`, with
/// the line each is on: `crate::a::b` gives `a`, `crate::{a, b::c, d::{e}}` gives `a`, `b`, `d`.
fn paths_after(code: &str, prefix: &str) -> Vec<(String, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let pat: Vec<char> = prefix.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i + pat.len() <= chars.len() {
        if !chars[i..].starts_with(&pat) || ident_before(&chars, i) {
            i += 1;
            continue;
        }
        let line = chars[..i].iter().filter(|&&c| c == '\n').count() + 1;
        let mut j = i + pat.len();
        while chars.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        if chars.get(j) == Some(&'{') {
            // A group: the first segment of each of its items, at depth one.
            let mut depth = 0;
            let mut at_item_start = true;
            while j < chars.len() {
                let c = chars[j];
                if c == '{' {
                    depth += 1;
                    at_item_start = depth == 1;
                    j += 1;
                } else if c == '}' {
                    depth -= 1;
                    j += 1;
                    if depth == 0 {
                        break;
                    }
                } else if c == ',' {
                    at_item_start = depth == 1;
                    j += 1;
                } else if ident_char(c) && at_item_start {
                    let start = j;
                    while chars.get(j).is_some_and(|&c| ident_char(c)) {
                        j += 1;
                    }
                    let line = chars[..start].iter().filter(|&&c| c == '\n').count() + 1;
                    found.push((chars[start..j].iter().collect(), line));
                    at_item_start = false;
                } else {
                    j += 1;
                }
            }
        } else {
            let start = j;
            while chars.get(j).is_some_and(|&c| ident_char(c)) {
                j += 1;
            }
            if j > start {
                found.push((chars[start..j].iter().collect(), line));
            }
        }
        i = j.max(i + 1);
    }
    found
}

/// Where an edge comes from: the first file and line that makes it.
type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// Every elementary cycle of `edges`, each once, starting from its smallest module.
fn cycles(edges: &Edges) -> Vec<Vec<String>> {
    fn walk(edges: &Edges, start: &str, path: &mut Vec<String>, found: &mut Vec<Vec<String>>) {
        let Some(next) = edges.get(path.last().expect("a path")) else {
            return;
        };
        for to in next.keys() {
            if to == start {
                found.push(path.clone());
            } else if to.as_str() > start && !path.contains(to) {
                path.push(to.clone());
                walk(edges, start, path, found);
                path.pop();
            }
        }
    }
    let mut found = Vec::new();
    for start in edges.keys() {
        walk(edges, start, &mut vec![start.clone()], &mut found);
    }
    found
}

/// Each cycle as `a -> b -> a`, with the file and line making each of its edges.
fn describe(edges: &Edges, found: &[Vec<String>]) -> String {
    let mut text = String::new();
    for cycle in found {
        text.push_str(&format!("\n  {} -> {}", cycle.join(" -> "), cycle[0]));
        for (k, from) in cycle.iter().enumerate() {
            let to = &cycle[(k + 1) % cycle.len()];
            text.push_str(&format!("\n      {from} -> {to}: {}", edges[from][to]));
        }
    }
    text
}

fn add_edge(edges: &mut Edges, from: &str, to: &str, place: String) {
    if from != to {
        edges
            .entry(from.to_string())
            .or_default()
            .entry(to.to_string())
            .or_insert(place);
    }
}

/// The graph of `src/`'s top-level modules: an edge from `a` to `b` for every `crate::b` path in
/// `src/a.rs` or under `src/a/` (main.rs, which declares them all, left out).
fn top_level_modules() -> Edges {
    let src = src();
    let mut edges = Edges::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).expect("under src/");
        let first = rel.components().next().expect("a component");
        let module = Path::new(first.as_os_str())
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if module == "main" {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&file).expect("a source file"));
        for (to, line) in paths_after(&code, "crate::") {
            add_edge(
                &mut edges,
                &module,
                &to,
                format!("src/{}:{line}", rel.display()),
            );
        }
        edges.entry(module).or_default();
    }
    edges
}

#[test]
fn top_level_modules_import_one_another_without_a_cycle() {
    let edges = top_level_modules();
    // The graph was read at all: these edges are there on purpose.
    for (from, to) in [
        ("supervise", "backend"),
        ("hold", "supervise"),
        ("cli", "url"),
    ] {
        assert!(
            edges.get(from).is_some_and(|e| e.contains_key(to)),
            "no edge {from} -> {to} found: is the source reader broken? {edges:?}"
        );
    }
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "import cycles between top-level modules of src/:{}",
        describe(&edges, &found)
    );
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let mut edges = Edges::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("b", "a"), ("c", "d")] {
        add_edge(&mut edges, from, to, format!("{from}.rs"));
    }
    let found = cycles(&edges);
    assert_eq!(
        found,
        [vec!["a", "b"], vec!["a", "b", "c"]],
        "{}",
        describe(&edges, &found)
    );
}

#[test]
fn the_source_reader_sees_paths_and_groups_not_comments_or_strings() {
    let code = code_only(
        "use crate::{a, b::c, d::{e, f}};\n\
         // crate::commented\n\
         /* crate::blocked */ let s = \"crate::quoted\"; let r = r#\"crate::raw\"#;\n\
         let c = '\"'; fn f<'a>(x: &'a str) { crate::g::h(x) }\n\
         macro_rules! m { () => { $crate::macro_path } }\n",
    );
    let found: Vec<(String, usize)> = paths_after(&code, "crate::");
    let names: Vec<(&str, usize)> = found.iter().map(|(n, l)| (n.as_str(), *l)).collect();
    assert_eq!(names, [("a", 1), ("b", 1), ("d", 1), ("g", 4)]);
}

/// The graph of the files of one folder of src/ (mod.rs, the folder's front, left out): an edge
/// from `a` to `b` for a `super::b` path in `a.rs`. (In a module inside `a.rs`, its tests,
/// `super::b` is `a`'s own item `b`: an edge only where that is also a file's name.)
fn files_of(folder: &str) -> Edges {
    let dir = src().join(folder);
    let names: BTreeSet<String> = rust_files(&dir)
        .iter()
        .filter(|f| f.parent() == Some(dir.as_path()))
        .map(|f| {
            f.file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n != "mod")
        .collect();
    let mut edges = Edges::new();
    for name in &names {
        let code = code_only(
            &std::fs::read_to_string(dir.join(format!("{name}.rs"))).expect("a source file"),
        );
        edges.entry(name.clone()).or_default();
        for (to, line) in paths_after(&code, "super::") {
            if names.contains(&to) {
                add_edge(
                    &mut edges,
                    name,
                    &to,
                    format!("src/{folder}/{name}.rs:{line}"),
                );
            }
        }
    }
    edges
}

/// Backends' lowest layers, which the files above them build on: each in no cycle among its
/// folder's files, so that it reads on its own.
const LOWEST_LAYERS: [(&str, &str); 4] = [
    ("backend/zk", "session"),
    ("backend/etcd", "rpc"),
    ("backend/postgres", "wire"),
    ("backend/mysql", "dial"),
];

#[test]
fn the_lowest_layers_of_backends_import_nothing_above_them() {
    for (folder, lowest) in LOWEST_LAYERS {
        let edges = files_of(folder);
        assert!(edges.contains_key(lowest), "no {lowest}.rs in src/{folder}");
        let found: Vec<Vec<String>> = cycles(&edges)
            .into_iter()
            .filter(|cycle| cycle.iter().any(|file| file == lowest))
            .collect();
        assert!(
            found.is_empty(),
            "src/{folder}/{lowest}.rs is in import cycles:{}",
            describe(&edges, &found)
        );
    }
}

/// Backends never touch process signals: cancellation reaches them through `Waiting` and
/// `BackendConfig::stop`, and what their blocking calls and threads need of signals through
/// `backend::blocking`, which main.rs fills from signal/. So no file under src/backend/ names
/// `crate::signal` (not even in a comment: what `grep -rn crate::signal src/backend` prints), and
/// no path of theirs reaches signal/ otherwise (`crate::{signal, ...}`).
#[test]
fn no_backend_imports_signal() {
    let dir = src().join("backend");
    let mut found = Vec::new();
    for file in rust_files(&dir) {
        let text = std::fs::read_to_string(&file).expect("a source file");
        let rel = file
            .strip_prefix(src())
            .expect("under src/")
            .display()
            .to_string();
        for (n, line) in text.lines().enumerate() {
            if line.contains("crate::signal") {
                found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
            }
        }
        for (to, line) in paths_after(&code_only(&text), "crate::") {
            if to == "signal" {
                found.push(format!("src/{rel}:{line}: a crate::{{signal, ..}} path"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "backends import signal/:\n  {}",
        found.join("\n  ")
    );
}
