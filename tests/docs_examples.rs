//! Every documented line that runs dlock, run as a user would: the README, docs/ (DESIGN.md,
//! REFERENCE.md, SPEED.md), each crate's README (a backend's user reference) and the man pages are
//! read as files, and each line of a code block (an
//! example in a man page) whose command is `dlock` is run with its servers pointed at test servers
//! and the work it protects replaced by a stub that records that it ran. Under bash, dash, busybox sh and zsh, with and
//! without `set -e`:
//! - with the lock free, the stub runs and the line ends with the documented status;
//! - with the lock held elsewhere (a `--wait` shortened to 1s, so that it expires), the stub does
//!   not run, and a `-q` line prints nothing (a crontab line mails nothing from a host that skips);
//! - with `dlock` killed by SIGKILL before it could say anything, the stub does not run.
//!
//! A line that invokes dlock and that this file can neither run nor excuse by a rule with its
//! reason (`excluded`) fails the test, so a new example joins by being written. A block fenced
//! as ```text holds no commands (a picture of the source tree).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::store::Store;
use crate::support::target::Target;
use crate::support::*;
use crate::STORES;

/// One documented line that invokes dlock.
#[derive(Clone, Debug)]
struct Example {
    /// `README.md:40`.
    at: String,
    /// The line as a shell reads it: continuation lines joined, a crontab line's schedule kept.
    text: String,
}

/// The files whose examples are run, relative to the repository; each crate's README
/// (`crates/NAME/README.md`, a backend's user reference) joins them in `examples`.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/DESIGN.md",
    "docs/REFERENCE.md",
    "docs/SPEED.md",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The lines of code blocks in a Markdown file: fenced, or indented by four spaces after a blank
/// line, with their line numbers; a line ending in `\` joined with the next.
fn markdown_code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).expect("read a document");
    let mut lines = Vec::new();
    let mut fenced = false;
    // A block fenced as ```text is a picture (the source tree), not commands.
    let mut prose = false;
    let mut indented = false;
    let mut previous_blank = true;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            fenced = !fenced;
            prose = fenced && info.trim() == "text";
            previous_blank = false;
            continue;
        }
        let code = if fenced {
            (!prose).then_some(line)
        } else if line.starts_with("    ") && (indented || previous_blank) {
            indented = true;
            Some(&line[4..])
        } else {
            if !line.trim().is_empty() {
                indented = false;
            }
            None
        };
        previous_blank = line.trim().is_empty();
        if let Some(code) = code {
            lines.push((i + 1, code.to_owned()));
        }
    }
    join_continuations(lines)
}

/// The example lines of a man page: each line set in bold as a whole (`\fBdlock ...\fR`; a
/// synopsis line, `\fBdlock\fR run [OPTIONS]...`, is grammar, and bold words in a paragraph are
/// no example), unescaped from roff.
fn man_code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).expect("read a man page");
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            line.starts_with("\\fB") && line.ends_with("\\fR") && line.matches("\\fR").count() == 1
        })
        .map(|(i, line)| (i + 1, unroff(line)))
        .collect()
}

fn unroff(line: &str) -> String {
    line.replace("\\fB", "")
        .replace("\\fR", "")
        .replace("\\fI", "")
        .replace("\\fP", "")
        .replace("\\-", "-")
        .replace("\\*(Aq", "'")
        .replace("\\(aq", "'")
        .replace("\\(dq", "\"")
        .replace("\\e", "\\")
        .replace("\\\\", "\\")
}

fn join_continuations(lines: Vec<(usize, String)>) -> Vec<(usize, String)> {
    let mut joined: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (n, line) in lines {
        if open {
            let last = joined.last_mut().expect("a line to continue");
            last.1.push(' ');
            last.1.push_str(line.trim());
        } else {
            joined.push((n, line));
        }
        let last = joined.last_mut().expect("a line");
        open = last.1.trim_end().ends_with('\\');
        if open {
            let kept = last
                .1
                .trim_end()
                .trim_end_matches('\\')
                .trim_end()
                .to_owned();
            last.1 = kept;
        }
    }
    joined
}

/// The crates of the workspace that are no store, and so have no README of a user reference.
const CRATES_WITHOUT_A_REFERENCE: &[&str] = &["core", "sys"];

/// Every documented line that invokes dlock.
fn examples() -> Vec<Example> {
    let mut found = Vec::new();
    let mut documents: Vec<String> = DOCUMENTS.iter().map(|doc| doc.to_string()).collect();
    let mut crate_readmes: Vec<String> = std::fs::read_dir(repo().join("crates"))
        .expect("the crates")
        .map(|e| {
            e.expect("a crate")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        // The crates that are no store (the primitives, the contract) have no user reference;
        // every other one must have its README: a missing one fails, never goes unread.
        .filter(|name| !CRATES_WITHOUT_A_REFERENCE.contains(&name.as_str()))
        .map(|name| {
            let doc = format!("crates/{name}/README.md");
            assert!(
                repo().join(&doc).is_file(),
                "{doc} is missing: a store's crate holds its user reference"
            );
            doc
        })
        .collect();
    crate_readmes.sort();
    documents.extend(crate_readmes);
    let mut sources: Vec<(String, Vec<(usize, String)>)> = documents
        .iter()
        .map(|doc| (doc.clone(), markdown_code_lines(&repo().join(doc))))
        .collect();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("man"))
        .expect("the man pages")
        .map(|e| e.expect("a man page").path())
        .filter(|p| p.extension().is_some_and(|e| e == "1"))
        .collect();
    pages.sort();
    for page in pages {
        let name = format!("man/{}", page.file_name().unwrap().to_string_lossy());
        sources.push((name, man_code_lines(&page)));
    }
    for (doc, lines) in sources {
        for (n, line) in lines {
            if invokes_dlock(&line) {
                found.push(Example {
                    at: format!("{doc}:{n}"),
                    text: line.trim().to_owned(),
                });
            }
        }
    }
    found
}

/// The line without a crontab schedule (five fields or an `@daily`-style word), if it has one.
fn without_schedule(line: &str) -> Option<&str> {
    let words: Vec<&str> = line.split_whitespace().collect();
    if words
        .first()
        .is_some_and(|w| w.starts_with('@') && w.len() > 1)
    {
        return Some(line.trim_start()[words[0].len()..].trim_start());
    }
    let field =
        |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c));
    if words.len() > 5 && words[..5].iter().all(|w| field(w)) {
        let mut rest = line.trim_start();
        for w in &words[..5] {
            rest = rest[w.len()..].trim_start();
        }
        return Some(rest);
    }
    None
}

/// Whether `dlock` is a command of the line (not an argument, as in `etcdctl role add dlock`).
fn invokes_dlock(line: &str) -> bool {
    let line = without_schedule(line).unwrap_or(line);
    let code = strip_comment(line);
    commands_of(&code)
        .iter()
        .any(|words| words.first().is_some_and(|w| w == "dlock"))
}

/// The line up to a `#` that starts a comment (outside quotes, after white space).
fn strip_comment(line: &str) -> String {
    let mut out = String::new();
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for c in line.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => break,
            _ => {}
        }
        out.push(c);
        previous = c;
    }
    out.trim_end().to_owned()
}

/// The simple commands of a line, each as its words with quotes removed, leading assignments and
/// keywords dropped: split at `;`, `&&`, `||`, `|`, `$(`, `(`, `)` and backquotes outside single
/// quotes (a command substitution inside double quotes is a command too).
fn commands_of(line: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut single = false;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            single = !single;
        }
        let split = !single
            && (matches!(c, ';' | '|' | '&' | '(' | ')' | '`')
                || (c == '$' && chars.get(i + 1) == Some(&'(')));
        if split {
            commands.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
        i += 1;
    }
    commands.push(current);
    commands
        .iter()
        .map(|command| {
            let words = shell_words(command);
            let mut words = words.into_iter().skip_while(|w| {
                w.is_empty()
                    || matches!(
                        w.as_str(),
                        "if" | "then"
                            | "else"
                            | "elif"
                            | "do"
                            | "while"
                            | "until"
                            | "!"
                            | "exec"
                            | "eval"
                            | "time"
                            | "{"
                            | "}"
                    )
                    || (w.contains('=') && !w.starts_with('-') && !w.starts_with('='))
            });
            let mut kept: Vec<String> = Vec::new();
            kept.extend(words.by_ref());
            kept
        })
        .filter(|words| !words.is_empty())
        .collect()
}

/// Words as a shell splits them, quotes removed (no expansion).
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let (mut single, mut double) = (false, false);
    for c in text.chars() {
        match c {
            '\'' if !double => {
                single = !single;
                in_word = true;
            }
            '"' if !single => {
                double = !double;
                in_word = true;
            }
            c if c.is_whitespace() && !single && !double => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// What a documented dlock line does, as far as running it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Does {
    Run,
    Hold,
    Status,
    List,
    Release,
    ReleaseForce,
}

/// Global options that take a value.
const GLOBAL_VALUED: &[&str] = &[
    "-b",
    "--backend",
    "-u",
    "--url",
    "--password-file",
    "--connect-timeout",
    "--replicas",
];
/// Options of run and hold that take a value.
const LOCK_VALUED: &[&str] = &[
    "-w",
    "--wait",
    "--timeout",
    "-l",
    "--limit",
    "-E",
    "--conflict-exit-code",
    "--ttl",
    "--message",
    "--min-hold",
    "--progress-every",
    "--kill-after",
    "-c",
    "--command",
    "--ran-within",
];

/// The dlock command of a line, as words.
fn dlock_words(line: &str) -> Vec<String> {
    let line = without_schedule(line).unwrap_or(line);
    commands_of(&strip_comment(line))
        .into_iter()
        .find(|words| words.first().is_some_and(|w| w == "dlock"))
        .expect("a dlock command")
}

/// Why a line is not run, when a rule says so; `None` for a line to run.
fn excluded(example: &Example) -> Option<&'static str> {
    let words = dlock_words(&example.text);
    if words.iter().any(|w| {
        w.contains('[') || w.ends_with("...") || w == "NAME" || w == "COMMAND" || w.contains('|')
    }) {
        return Some("usage grammar with placeholders, not a command");
    }
    if words.iter().any(|w| w == "generate") {
        return Some("writes man pages and completions, locks nothing (see manual.rs)");
    }
    if subcommand_of(&words) == Some("config") {
        return Some("shows the settings in force, locks nothing (see config.rs)");
    }
    None
}

/// Where the subcommand of a dlock command is: the first word that is not a global option.
fn subcommand_at(words: &[String]) -> usize {
    let mut i = 1;
    while i < words.len() {
        let w = words[i].as_str();
        if GLOBAL_VALUED.contains(&w) {
            i += 2;
        } else if w.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// The subcommand of a dlock command.
fn subcommand_of(words: &[String]) -> Option<&str> {
    words.get(subcommand_at(words)).map(String::as_str)
}

/// The subcommand and the lock names of a dlock command.
fn subcommand_and_names(words: &[String]) -> Option<(Does, Vec<String>)> {
    let i = subcommand_at(words);
    let sub = words.get(i)?.as_str();
    let rest = &words[i + 1..];
    let mut names = Vec::new();
    let mut force = false;
    let mut j = 0;
    while j < rest.len() {
        let w = rest[j].as_str();
        if w == "--" {
            break;
        }
        if w == "--force" {
            force = true;
        }
        if GLOBAL_VALUED.contains(&w) || LOCK_VALUED.contains(&w) {
            j += 2;
            continue;
        }
        if !w.starts_with('-') {
            names.push(w.to_owned());
        }
        j += 1;
    }
    let does = match (sub, force) {
        ("run", _) => Does::Run,
        ("hold", _) => Does::Hold,
        ("status", _) => Does::Status,
        ("list", _) => Does::List,
        ("release", false) => Does::Release,
        ("release", true) => Does::ReleaseForce,
        _ => return None,
    };
    Some((does, names))
}

/// The backend a line names (`-b X`), or the one its URL's scheme says, or file.
fn backend_of(words: &[String]) -> &'static Store {
    let named = words
        .windows(2)
        .find(|p| p[0] == "-b" || p[0] == "--backend")
        .map(|p| p[1].clone())
        .or_else(|| {
            words
                .iter()
                .find_map(|w| w.strip_prefix("--backend=").map(str::to_owned))
        });
    let url = words
        .windows(2)
        .find(|p| p[0] == "-u" || p[0] == "--url")
        .map(|p| p[1].clone());
    let scheme = url.and_then(|u| Some(u.split_once("://")?.0.to_owned()));
    let store = match (named, scheme) {
        (Some(name), _) => STORES.iter().find(|s| s.backend == name),
        (None, Some(scheme)) => STORES.iter().find(|s| s.schemes.contains(&scheme.as_str())),
        (None, None) => None,
    };
    store.copied().unwrap_or(&crate::file::store::STORE)
}

/// `text` quoted for a POSIX shell.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The scenario a line is run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    Free,
    HeldElsewhere,
    Killed,
}

/// The line as it is run against `target`: its servers and password file are the test's, the work
/// after `--` (or `-c`'s) is the stub, and in `HeldElsewhere` a `--wait` is 1s.
fn rewrite(line: &str, target: &Target, scenario: Scenario, password_file: &Path) -> String {
    let line = without_schedule(line).unwrap_or(line);
    let code = strip_comment(line);
    // Rewritten word by word on the raw text of the dlock command: the segment from `dlock` to
    // the end of its simple command.
    let start = find_command_word(&code, "dlock").expect("dlock in the line");
    let end = command_end(&code, start);
    let (before, command, after) = (&code[..start], &code[start..end], &code[end..]);
    let words = raw_words(command);
    let mut out: Vec<String> = Vec::new();
    let mut urls_done = false;
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let bare = unquote(w);
        match bare.as_str() {
            "-u" | "--url" => {
                if !urls_done {
                    for url in target.urls() {
                        out.push("--url".into());
                        out.push(sh_quote(url));
                    }
                    urls_done = true;
                }
                i += 2;
                continue;
            }
            "--password-file" => {
                out.push("--password-file".into());
                out.push(sh_quote(&password_file.display().to_string()));
                i += 2;
                continue;
            }
            "-w" | "--wait" | "--timeout" if scenario == Scenario::HeldElsewhere => {
                out.push(bare.clone());
                out.push("1s".into());
                i += 2;
                continue;
            }
            "-c" | "--command" => {
                out.push(bare.clone());
                out.push(sh_quote(STUB));
                i += 2;
                continue;
            }
            "--" => {
                out.push("--".into());
                out.push("sh".into());
                out.push("-c".into());
                out.push(sh_quote(STUB));
                break;
            }
            _ => out.push(w.to_owned()),
        }
        i += 1;
    }
    let mut text = format!("{before}{}{after}", out.join(" "));
    if dlock_words(line).iter().any(|w| w == "hold") {
        // What follows a hold in a script is the work it protects.
        text.push('\n');
        text.push_str(STUB);
    }
    text
}

/// The stub that stands for the protected work: it appends a line to the record.
const STUB: &str = r#"echo ran >> "$DOCS_RECORD""#;

/// The byte offset where `word` stands as a command in `code`.
fn find_command_word(code: &str, word: &str) -> Option<usize> {
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find(word).map(|a| a + from) {
        let before_ok = at == 0 || {
            let prev = bytes[at - 1] as char;
            prev.is_whitespace() || "(;|&`\"".contains(prev)
        };
        let after_ok = bytes
            .get(at + word.len())
            .is_none_or(|c| (*c as char).is_whitespace() || *c == b')');
        if before_ok && after_ok {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Where the simple command starting at `start` ends: at `;`, `&&`, `||`, `|` or `)` outside
/// quotes.
fn command_end(code: &str, start: usize) -> usize {
    let (mut single, mut double) = (false, false);
    for (i, c) in code[start..].char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            ';' | '|' | '&' | ')' if !single && !double => return start + i,
            _ => {}
        }
    }
    code.len()
}

/// Words with their quotes kept, as written.
fn raw_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut single, mut double) = (false, false);
    for c in text.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            _ => {}
        }
        if c.is_whitespace() && !single && !double {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn unquote(word: &str) -> String {
    shell_words(word).into_iter().next().unwrap_or_default()
}

/// The shells a documented line must hold in, each with and without `set -e`.
const SHELLS: &[&[&str]] = &[&["bash"], &["dash"], &["busybox", "sh"], &["zsh"]];

/// A directory with `dlock` in it: the real one, or one that dies of SIGKILL at once.
struct DlockOnPath {
    dir: LockDir,
}

impl DlockOnPath {
    fn new(scenario: Scenario) -> DlockOnPath {
        let dir = LockDir::new();
        let dlock = dir.file("dlock");
        if scenario == Scenario::Killed {
            std::fs::write(&dlock, "#!/bin/sh\nkill -KILL $$\n").expect("write the killed dlock");
            std::fs::set_permissions(&dlock, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        } else {
            std::os::unix::fs::symlink(dlock_bin(), &dlock).expect("link dlock");
        }
        DlockOnPath { dir }
    }

    fn value(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().display(),
            crate::support::programs::listed_path().to_string_lossy()
        )
    }
}

/// A script running under a shell, with the files it needs.
struct ScriptRun {
    child: std::process::Child,
    _file: tempfile::NamedTempFile,
}

/// Starts `script` under `shell`, with `dlock` from `path` and the stub's record at `record`.
fn start_script(
    shell: &[&str],
    script: &str,
    path: &DlockOnPath,
    env: &[(String, String)],
    record: &Path,
) -> ScriptRun {
    let _ = std::fs::remove_file(record);
    let file = tempfile::NamedTempFile::new().expect("a script file");
    std::fs::write(file.path(), script).expect("write the script");
    let mut cmd = without_callers_dlock_settings(shell[0]);
    cmd.args(&shell[1..])
        .arg(file.path())
        .env("PATH", path.value())
        .env("DOCS_RECORD", record)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    ScriptRun {
        child: cmd.spawn().expect("start a shell"),
        _file: file,
    }
}

/// The script's output once it has ended (killed after a minute).
fn wait_script(mut run: ScriptRun) -> Output {
    let deadline = Instant::now() + Duration::from_secs(60);
    while run.child.try_wait().expect("wait for a shell").is_none() {
        if Instant::now() > deadline {
            let _ = run.child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    run.child.wait_with_output().expect("the shell's output")
}

/// Runs `script` under `shell` and returns its output and whether the stub ran.
fn run_script(
    shell: &[&str],
    script: &str,
    path: &DlockOnPath,
    env: &[(String, String)],
    record: &Path,
) -> (Output, bool) {
    let out = wait_script(start_script(shell, script, path, env, record));
    (out, record.exists())
}

/// Waits until nobody holds `names` at `target` (a hold's keeper lets go once its shell ended),
/// breaking what `--min-hold` keeps.
fn free_again(target: &Target, names: &[String], kept: bool) {
    for name in names {
        if kept {
            let _ = output(target.dlock(&["release", "--force", name]));
        }
        wait_until(
            &format!("{name} free again"),
            Duration::from_secs(30),
            || code(&output(target.dlock(&["status", "-q", name]))) == 1,
        );
    }
}

/// One example, in every scenario and shell. Returns what went wrong, one line each.
fn check(example: &Example) -> Vec<String> {
    let words = dlock_words(&example.text);
    let Some((does, names)) = subcommand_and_names(&words) else {
        return vec![format!(
            "{}: `{}`: neither run by this test nor excluded with a reason",
            example.at, example.text
        )];
    };
    let target = (backend_of(&words).for_examples)();
    let password_file = target.scratch.file("password");
    std::fs::write(&password_file, "unused-password\n").expect("write the password file");
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600))
        .expect("chmod the password file");
    let record = target.scratch.file("record");
    let mut env: Vec<(String, String)> = Vec::new();
    if !words.iter().any(|w| w == "-u" || w == "--url") {
        env.push(("DLOCK_URL".into(), target.urls().join(" ")));
    }
    if !words.iter().any(|w| w == "-b" || w == "--backend") {
        env.push(("DLOCK_BACKEND".into(), target.backend().into()));
    }
    let kept = words.iter().any(|w| w == "--min-hold");
    // `dlock status --json x | jq ...`: the status is the pipe's last command's.
    let piped = {
        let code = strip_comment(without_schedule(&example.text).unwrap_or(&example.text));
        let start = find_command_word(&code, "dlock").expect("dlock in the line");
        let rest = &code[command_end(&code, start)..];
        rest.starts_with('|') && !rest.starts_with("||")
    };
    let quiet = words.iter().any(|w| w == "-q" || w == "--quiet");
    let ran_within = words.iter().any(|w| w == "--ran-within");
    let conflict: i32 = words
        .windows(2)
        .find(|p| p[0] == "-E" || p[0] == "--conflict-exit-code")
        .and_then(|p| p[1].parse().ok())
        .unwrap_or(75);
    let waits_without_limit = matches!(does, Does::Run | Does::Hold)
        && !words.iter().any(|w| {
            matches!(
                w.as_str(),
                "-n" | "--no-wait" | "--nonblock" | "--nb" | "-w" | "--wait" | "--timeout"
            )
        });
    let line = Line {
        example,
        does,
        names: &names,
        target: &target,
        env: &env,
        record: &record,
        kept,
        quiet,
        conflict,
        piped,
        waits_without_limit,
        ran_within,
    };
    let mut wrong = Vec::new();
    for scenario in [Scenario::Free, Scenario::HeldElsewhere, Scenario::Killed] {
        if scenario == Scenario::HeldElsewhere && matches!(does, Does::List | Does::Release) {
            continue;
        }
        let path = DlockOnPath::new(scenario);
        let text = rewrite(&example.text, &target, scenario, &password_file);
        'shells: for shell in SHELLS {
            for strict in [false, true] {
                if let Some(why) = line.try_once(scenario, shell, strict, &text, &path) {
                    wrong.push(why);
                }
                // --force breaks the holder's lock: one shell says enough.
                if does == Does::ReleaseForce && scenario == Scenario::HeldElsewhere {
                    break 'shells;
                }
            }
        }
    }
    wrong
}

/// A documented line and what is known of it, to run in each shell.
struct Line<'a> {
    example: &'a Example,
    does: Does,
    names: &'a [String],
    target: &'a Target,
    env: &'a [(String, String)],
    record: &'a Path,
    /// `--min-hold`: the lock outlives the run.
    kept: bool,
    /// `-q`: a run that skips prints nothing.
    quiet: bool,
    /// The status a busy lock ends with.
    conflict: i32,
    /// dlock's output goes to another command, whose status the line ends with.
    piped: bool,
    /// Neither `-n` nor `-w`: with the lock held elsewhere it waits for its turn.
    waits_without_limit: bool,
    /// `status --ran-within`: a check of the last success, of which the test's fresh store has
    /// none (the holder elsewhere is killed), so CRITICAL, 2.
    ran_within: bool,
}

impl Line<'_> {
    /// Runs the line once in `shell`; says what went wrong, if anything did.
    fn try_once(
        &self,
        scenario: Scenario,
        shell: &[&str],
        strict: bool,
        text: &str,
        path: &DlockOnPath,
    ) -> Option<String> {
        let mut script = String::new();
        if strict {
            script.push_str("set -e\n");
        }
        if self.does == Does::Release && scenario == Scenario::Free {
            // A release gives up what this shell took with hold.
            script.push_str(&format!(
                "dlock hold -n {} || exit 9\n",
                self.names.join(" ")
            ));
        }
        script.push_str(text);
        script.push('\n');
        let holder = (scenario == Scenario::HeldElsewhere).then(|| self.hold_elsewhere());
        let (out, ran, ran_while_held) = match holder {
            Some(mut holder) if self.waits_without_limit => {
                // It waits its turn: the stub must not run while the lock is held elsewhere,
                // and must run once it is free.
                let script_run = start_script(shell, &script, path, self.env, self.record);
                let window = Instant::now();
                let mut early = false;
                while window.elapsed() < Duration::from_secs(1) && !early {
                    early = self.record.exists();
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = holder.kill();
                let _ = holder.wait();
                let out = wait_script(script_run);
                (out, self.record.exists(), early)
            }
            holder => {
                let (out, ran) = run_script(shell, &script, path, self.env, self.record);
                if let Some(mut holder) = holder {
                    let _ = holder.kill();
                    let _ = holder.wait();
                }
                (out, ran, false)
            }
        };
        let status = out.status.code().unwrap_or(-1);
        let silent = out.stdout.is_empty() && out.stderr.is_empty();
        let fine = match (scenario, self.does) {
            (Scenario::Free | Scenario::HeldElsewhere, Does::Status | Does::List) if self.piped => {
                status == 0
            }
            (Scenario::Free | Scenario::HeldElsewhere, Does::Status) if self.ran_within => {
                status == 2
            }
            (Scenario::Free, Does::Run | Does::Hold) => ran && status == 0,
            (Scenario::Free, Does::Status | Does::ReleaseForce) => status == 1,
            (Scenario::Free, Does::List | Does::Release) => status == 0,
            (Scenario::HeldElsewhere, Does::Run | Does::Hold) if self.waits_without_limit => {
                !ran_while_held && ran && status == 0
            }
            (Scenario::HeldElsewhere, Does::Run) => {
                !ran && status == self.conflict && (!self.quiet || silent)
            }
            (Scenario::HeldElsewhere, Does::Hold) => !ran && status != 0 && (!self.quiet || silent),
            (Scenario::HeldElsewhere, Does::Status | Does::ReleaseForce) => status == 0,
            (Scenario::HeldElsewhere, _) => true,
            (Scenario::Killed, _) => !ran,
        };
        if scenario != Scenario::Killed {
            free_again(
                self.target,
                self.names,
                self.kept || scenario == Scenario::HeldElsewhere,
            );
        }
        (!fine).then(|| {
            format!(
                "{} under {}{} ({scenario:?}): `{}` exited {status}, the work {}; stderr: {}",
                self.example.at,
                shell.join(" "),
                if strict { " with set -e" } else { "" },
                self.example.text,
                if ran_while_held {
                    "ran while the lock was held elsewhere"
                } else if ran {
                    "ran"
                } else {
                    "did not run"
                },
                stderr(&out).trim()
            )
        })
    }

    /// A `dlock run` of the names elsewhere, returned once its command runs.
    fn hold_elsewhere(&self) -> std::process::Child {
        let ready = self.target.scratch.file("holder-ready");
        let _ = std::fs::remove_file(&ready);
        let script = format!("touch '{}'; exec sleep 600", ready.display());
        let mut args: Vec<&str> = vec!["run"];
        args.extend(self.names.iter().map(String::as_str));
        args.extend(["--", "sh", "-c", &script]);
        let child = self
            .target
            .dlock(&args)
            .stderr(Stdio::null())
            .spawn()
            .expect("start the holder");
        wait_for_file(&ready, Duration::from_secs(60));
        child
    }
}

#[test]
fn every_documented_dlock_line_runs_its_work_only_with_the_lock() {
    let examples = examples();
    assert!(examples.len() >= 10, "too few examples found: {examples:?}");
    let mut excused: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut to_run = Vec::new();
    for example in &examples {
        match excluded(example) {
            Some(why) => excused.entry(why).or_default().push(example.at.clone()),
            None => to_run.push(example.clone()),
        }
    }
    // The same text in several places is run once.
    let mut seen = std::collections::BTreeSet::new();
    to_run.retain(|e| seen.insert(e.text.clone()));
    let started = Instant::now();
    let wrong: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = to_run
            .chunks(to_run.len().div_ceil(4).max(1))
            .map(|chunk| scope.spawn(move || chunk.iter().flat_map(check).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a checking thread"))
            .collect()
    });
    eprintln!(
        "ran {} documented lines in {:?}; excused: {excused:?}",
        to_run.len(),
        started.elapsed()
    );
    assert!(
        wrong.is_empty(),
        "documented lines that do not hold:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_of_examples_finds_commands_not_arguments() {
    assert!(invokes_dlock("dlock run x -- true"));
    assert!(invokes_dlock("0 2 * * *  dlock -b redis run -n x -- job"));
    assert!(invokes_dlock(r#"eval "$(dlock hold -n x)" || exit 1"#));
    assert!(invokes_dlock(
        "v=$(dlock hold -n x --print-env) || exit 1; eval \"$v\""
    ));
    assert!(invokes_dlock("if dlock status -q x; then echo held; fi"));
    assert!(!invokes_dlock("etcdctl role add dlock"));
    assert!(!invokes_dlock("# dlock run x -- true"));
    assert!(!invokes_dlock(
        "cargo bench --bench file     # dlock (file) vs flock(1)"
    ));
    let line = rewrite(
        "0 2 * * * dlock -b redis -u redis://h:1 run -n -w 5m x -- /usr/bin/job --full # c",
        &Target::file_backend(),
        Scenario::HeldElsewhere,
        Path::new("/pw"),
    );
    assert!(line.starts_with("dlock -b redis --url "), "{line}");
    assert!(line.contains("-w 1s x -- sh -c"), "{line}");
    assert!(
        !line.contains("/usr/bin/job") && !line.contains("redis://h:1"),
        "{line}"
    );
}
