//! The code's seams, read from the sources (these tests do not run dlock): the top-level modules of
//! `src/` import one another without a cycle, no backend touches process signals, and a backend is
//! named only where the checklist for adding one says. The rules themselves are in docs/DESIGN.md,
//! under Layout and "Adding a backend".

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

/// Every folder of src/ (each backend's, and cli/, lock/, supervise/...): its files import one
/// another in layers, none in a cycle, so that each reads on what is below it. A new folder is
/// checked from the start.
#[test]
fn no_folder_of_src_has_import_cycles() {
    // The graph is read at all: these edges are there on purpose.
    for (folder, from, to) in [
        ("backend/zk", "acquisition", "session"),
        ("backend/etcd", "acquisition", "place"),
        ("backend/redis", "topology", "cluster"),
    ] {
        let edges = files_of(folder);
        assert!(
            edges.get(from).is_some_and(|e| e.contains_key(to)),
            "no edge {from} -> {to} found in src/{folder}: is the source reader broken? {edges:?}"
        );
    }
    let folders: BTreeSet<String> = rust_files(&src())
        .iter()
        .filter_map(|f| f.parent())
        .filter(|dir| *dir != src().as_path())
        .map(|dir| {
            let relative = dir.strip_prefix(src()).expect("under src/");
            relative.to_string_lossy().into_owned()
        })
        .collect();
    assert!(folders.len() >= 10, "too few folders read: {folders:?}");
    for folder in &folders {
        let edges = files_of(folder);
        let found = cycles(&edges);
        assert!(
            found.is_empty(),
            "the files of src/{folder} import one another in cycles:{}",
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

/// A backend as registry.rs's table has it.
#[derive(Debug)]
struct Registered {
    /// `BackendKind`'s variant: `Zk`.
    kind: String,
    /// `-b`'s value, its folder's name: `zk`.
    name: String,
    /// Its Cargo feature, if it has one.
    feature: Option<String>,
}

/// `field: "value"` or `field: BackendKind::Value` in `block`: the value.
fn field_of<'a>(block: &'a str, field: &str) -> Option<&'a str> {
    let at = block.find(&format!("\n        {field}: "))? + field.len() + 11;
    let rest = &block[at..];
    let value = rest[..rest.find(",\n")?].trim();
    Some(value.trim_start_matches("BackendKind::").trim_matches('"'))
}

/// The entries of `BACKENDS` in src/backend/registry.rs.
fn registered_backends() -> Vec<Registered> {
    let text = std::fs::read_to_string(src().join("backend/registry.rs")).expect("registry.rs");
    let table = text
        .split_once("pub const BACKENDS")
        .and_then(|(_, rest)| rest.split_once("\n];"))
        .map(|(table, _)| table)
        .expect("BACKENDS in registry.rs");
    let mut found = Vec::new();
    for block in table.split("Descriptor {").skip(1) {
        let read = |field: &str| {
            field_of(block, field)
                .unwrap_or_else(|| panic!("no {field} in a BACKENDS entry:{block}"))
                .to_owned()
        };
        let feature = read("feature");
        found.push(Registered {
            kind: read("kind"),
            name: read("name"),
            feature: feature
                .strip_prefix("Some(\"")
                .and_then(|f| f.strip_suffix("\")"))
                .map(str::to_owned),
        });
    }
    assert!(found.len() >= 2, "BACKENDS read as {found:?}");
    found
}

/// Which backends `text` names in its code (comments and other strings left out): a
/// `BackendKind::Kind` path, or `feature = "name"` in a `cfg`.
fn backends_named<'a>(text: &str, backends: &'a [Registered]) -> BTreeSet<&'a str> {
    let code: Vec<char> = code_only(text).chars().collect();
    let original: Vec<char> = text.chars().collect();
    assert_eq!(code.len(), original.len(), "code_only keeps every position");
    let word_at = |chars: &[char], i: usize| -> String {
        chars[i..].iter().take_while(|&&c| ident_char(c)).collect()
    };
    let mut named = BTreeSet::new();
    for i in 0..code.len() {
        if ident_before(&code, i) {
            continue;
        }
        if code[i..].starts_with(&"BackendKind::".chars().collect::<Vec<_>>()) {
            let kind = word_at(&code, i + "BackendKind::".len());
            named.extend(
                backends
                    .iter()
                    .filter(|b| b.kind == kind)
                    .map(|b| b.name.as_str()),
            );
        } else if code[i..].starts_with(&"feature".chars().collect::<Vec<_>>()) {
            let mut j = i + "feature".len();
            let skip = |j: &mut usize, chars: &[char]| {
                while chars.get(*j).is_some_and(|c| c.is_whitespace()) {
                    *j += 1;
                }
            };
            // The opening quote is blanked in `code`: skip the spaces in the original.
            skip(&mut j, &original);
            if code.get(j) != Some(&'=') {
                continue;
            }
            j += 1;
            skip(&mut j, &original);
            if original.get(j) == Some(&'"') {
                let feature = word_at(&original, j + 1);
                let of = |b: &&Registered| b.feature.as_deref() == Some(feature.as_str());
                named.extend(backends.iter().filter(of).map(|b| b.name.as_str()));
            }
        }
    }
    named
}

/// The folders under src/backend/ that are no backend's: what several share.
const SHARED_FOLDERS: [&str; 1] = ["sql"];
/// The Cargo features that are no backend's: what several share.
const SHARED_FEATURES: [&str; 1] = ["tokio"];
/// Cargo features that are no backend's: the benchmark's plain-fork start of the command
/// (benches/spawn.rs).
const OTHER_FEATURES: [&str; 1] = ["fork-spawn"];
/// Where every backend is named in src/ outside its own folder (docs/DESIGN.md, "Adding a
/// backend"): its entry in the table, its module and its arm in `open`.
const NAMED_IN: [&str; 2] = ["backend/mod.rs", "backend/registry.rs"];

/// docs/DESIGN.md's checklist for adding a backend, against the tree: every backend of the table
/// has its folder, its Cargo feature (in `default`), its module and arm in `open`, and a row in the
/// contract suite; no other folder or feature pretends to be one; and no file of src/ but its own
/// and those the checklist lists names it.
#[test]
fn adding_a_backend_touches_only_its_checklist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let backends = registered_backends();
    let mut wrong = Vec::new();

    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let features_section = cargo
        .split_once("\n[features]\n")
        .map(|(_, rest)| rest.split("\n[").next().unwrap_or(rest))
        .expect("a [features] section");
    let features: BTreeSet<&str> = features_section
        .lines()
        .filter(|line| !line.starts_with([' ', '#', ']']) && !line.is_empty())
        .filter_map(|line| line.split_once(" = ").map(|(name, _)| name))
        .collect();
    let default = features_section
        .lines()
        .find(|line| line.starts_with("default = "))
        .expect("default features");
    let mod_rs = std::fs::read_to_string(src().join("backend/mod.rs")).expect("backend/mod.rs");
    let open = mod_rs
        .split_once("pub fn open(")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .map(|(body, _)| body)
        .expect("backend::open");
    let contract = std::fs::read_to_string(root.join("tests/contract/mod.rs")).expect("contract");
    let rows = contract
        .split_once("    backends: {\n")
        .and_then(|(_, rest)| rest.split_once("\n    }"))
        .map(|(rows, _)| rows)
        .expect("contract!'s backends");

    for b in &backends {
        let name = b.name.as_str();
        if !src().join("backend").join(name).join("mod.rs").is_file() {
            wrong.push(format!("{name}: no src/backend/{name}/mod.rs"));
        }
        let module = format!("pub mod {name};");
        let arm = format!("BackendKind::{} =>", b.kind);
        match &b.feature {
            Some(feature) => {
                if feature != name || !features.contains(name) {
                    wrong.push(format!(
                        "{name}: no Cargo feature {name} (its own: {feature})"
                    ));
                }
                if !default.contains(&format!("\"{name}\"")) {
                    wrong.push(format!("{name}: not in the default features"));
                }
                let gate = format!("#[cfg(feature = \"{name}\")]");
                if !mod_rs.contains(&format!("{gate}\npub mod {name};")) {
                    wrong.push(format!("{name}: no `{gate} {module}` in backend/mod.rs"));
                }
                if !open.contains(&format!("{gate}\n        {arm}")) {
                    wrong.push(format!("{name}: no `{gate} {arm}` arm in backend::open"));
                }
            }
            None => {
                if !mod_rs.contains(&format!("\n{module}")) || !open.contains(&arm) {
                    wrong.push(format!(
                        "{name}: no `{module}` or no `{arm}` in backend/mod.rs"
                    ));
                }
            }
        }
        if !rows
            .lines()
            .any(|row| row.trim_start().starts_with(&format!("{name} => ")))
        {
            wrong.push(format!(
                "{name}: no `{name} => ...` row in tests/contract/mod.rs"
            ));
        }
    }

    // Nothing that is no backend's looks like one.
    let names: BTreeSet<&str> = backends.iter().map(|b| b.name.as_str()).collect();
    for entry in std::fs::read_dir(src().join("backend")).expect("src/backend") {
        let path = entry.expect("an entry").path();
        let folder = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() && !names.contains(folder) && !SHARED_FOLDERS.contains(&folder) {
            wrong.push(format!(
                "src/backend/{folder}/ is no backend's, nor a shared folder"
            ));
        }
    }
    for feature in features {
        if feature != "default"
            && !names.contains(feature)
            && !SHARED_FEATURES.contains(&feature)
            && !OTHER_FEATURES.contains(&feature)
        {
            wrong.push(format!(
                "Cargo feature {feature} is no backend's, nor a shared one"
            ));
        }
    }

    // Each backend named in src/ only in its folder and the files the checklist lists.
    let mut named_in: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&src()) {
        let rel = file.strip_prefix(src()).expect("under src/");
        let text = std::fs::read_to_string(&file).expect("a source file");
        for name in backends_named(&text, &backends) {
            if !rel.starts_with(Path::new("backend").join(name)) {
                let rel = rel.display().to_string();
                named_in.entry(name).or_default().insert(rel);
            }
        }
    }
    let listed: BTreeSet<String> = NAMED_IN.iter().map(|f| f.to_string()).collect();
    for name in names {
        let found = named_in.remove(name).unwrap_or_default();
        if found != listed {
            wrong.push(format!(
                "{name} is named (BackendKind::, feature = \"{name}\") in {} files of src/ \
                 outside src/backend/{name}/: {found:?}; the checklist lists {}: {listed:?}",
                found.len(),
                listed.len()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/DESIGN.md's \"Adding a backend\" does not hold:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_backend_reader_sees_kinds_and_features_not_comments_or_strings() {
    let backends = registered_backends();
    let text = "// BackendKind::Redis in a comment\n\
                let s = \"feature = \\\"zk\\\" BackendKind::Etcd\";\n\
                #[cfg(feature = \"mysql\")]\n\
                if kind == BackendKind::File || cfg!(feature=\"postgres\") {}\n\
                let x = MyBackendKind::Zk;\n";
    let named: Vec<&str> = backends_named(text, &backends).into_iter().collect();
    assert_eq!(named, ["file", "mysql", "postgres"]);
}
