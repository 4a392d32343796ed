//! The configuration files, for what a fleet sets once per host (the backend, its servers, where
//! the password is) and what a user adds: `key = value` lines, each key a DLOCK_* variable's name
//! without the prefix, in lower case with `-` for `_` (`url`, `password-file`, `connect-timeout`,
//! `ttl`...).
//!
//! Two layers, as ssh and git have them: `/etc/dlock/config`, then the user's own
//! (`$XDG_CONFIG_HOME/dlock/config` or `~/.config/dlock/config`; `$DLOCK_CONFIG` in its place,
//! which must exist when set, and names no file at all, not even the system's, when set empty).
//! Each key comes from the more specific file that sets it, so a user's `wait = 5m` leaves the
//! fleet's servers in force. `backend` and `url` go together (see `Pair`): a file that sets `url`
//! also sets the backend its scheme names, so the system's backend is never paired with a user's
//! URL. Then an option's variable beats the files, and the command line the variable: the files'
//! values are clap's defaults, used where neither was given.
//!
//! A file decides which server gets the password, so it is refused unless this user or root owns
//! it and nobody else may write it (see `trusted`). A relative `password-file` in it is relative
//! to the file's own directory.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clap::Arg;

use crate::backend::{kind_named, kind_of_url, BackendKind};

/// The system-wide file, for a fleet's hosts.
const SYSTEM: &str = "/etc/dlock/config";

/// One `key = value` line.
#[derive(Debug)]
struct Entry {
    key: String,
    value: String,
    line: usize,
}

/// One file read.
#[derive(Debug)]
struct File {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl File {
    fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }

    fn at(&self, line: usize) -> String {
        format!("{} line {line}", self.path.display())
    }
}

/// Which file and entry gives a value: indices into `Config::files` and its entries.
type Source = (usize, usize);

/// The backend and the servers the files set, as one pair: from the most specific file that sets
/// either, where a `backend` alone keeps the URL of the file below only if that names the same
/// backend (it says no more than that file did), and a `url` alone brings the backend its scheme
/// names (left to the caller to find, as the command line's is).
#[derive(Debug, Default, Clone, Copy)]
struct Pair {
    backend: Option<Source>,
    url: Option<Source>,
}

/// The files read, least specific first, and the backend and URL they set together.
#[derive(Debug, Default)]
pub struct Config {
    files: Vec<File>,
    pair: Pair,
}

impl Config {
    /// Reads the configuration files that exist; none is an empty configuration.
    pub fn load() -> Result<Config, String> {
        let mut files = Vec::new();
        for path in locate() {
            let text = super::trusted::read(&path, super::trusted::Kind::Config)?;
            let mut entries = parse(&path, &text)?;
            anchor_password_file(&path, &mut entries)?;
            let file = File { path, entries };
            check_pair(&file)?;
            files.push(file);
        }
        let mut config = Config {
            files,
            pair: Pair::default(),
        };
        config.pair = config.settle_pair();
        Ok(config)
    }

    /// The files read, least specific first.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|f| f.path.as_path())
    }

    fn settle_pair(&self) -> Pair {
        let mut pair = Pair::default();
        for (i, file) in self.files.iter().enumerate() {
            let index = |key: &str| file.entries.iter().position(|e| e.key == key);
            match (index("backend"), index("url")) {
                (None, None) => {}
                (backend, Some(url)) => {
                    pair = Pair {
                        backend: backend.map(|b| (i, b)),
                        url: Some((i, url)),
                    }
                }
                (Some(backend), None) => {
                    let same = self.backend_of(pair) == kind_named(&file.entries[backend].value);
                    pair = Pair {
                        backend: Some((i, backend)),
                        url: pair.url.filter(|_| same),
                    };
                }
            }
        }
        pair
    }

    /// The backend a pair names: its `backend`, or its URL's scheme's.
    fn backend_of(&self, pair: Pair) -> Option<BackendKind> {
        match (pair.backend, pair.url) {
            (Some(b), _) => kind_named(&self.entry(b).value),
            (None, Some(u)) => super::urls::split(&self.entry(u).value)
                .first()
                .and_then(|url| kind_of_url(url)),
            (None, None) => None,
        }
    }

    fn entry(&self, (file, entry): Source) -> &Entry {
        &self.files[file].entries[entry]
    }

    fn at(&self, (file, entry): Source) -> String {
        self.files[file].at(self.files[file].entries[entry].line)
    }

    /// Which file gives the variable's value, whatever the environment says.
    fn source(&self, variable: &str) -> Option<Source> {
        match variable {
            "DLOCK_BACKEND" => self.pair.backend,
            "DLOCK_URL" => self.pair.url,
            _ => {
                let key = key_of(variable);
                self.files.iter().enumerate().rev().find_map(|(i, file)| {
                    file.entries
                        .iter()
                        .position(|e| e.key == key)
                        .map(|e| (i, e))
                })
            }
        }
    }

    /// The variable's value from the files, whatever the environment says: the value and where
    /// it was written (`/etc/dlock/config line 3`).
    pub fn file_value(&self, variable: &str) -> Option<(&str, String)> {
        let source = self.source(variable)?;
        Some((&self.entry(source).value, self.at(source)))
    }

    /// The variable's value from the files, when the environment does not set the variable: the
    /// value and where it was written (`/etc/dlock/config line 3`).
    pub fn value_for(&self, variable: &str) -> Option<(&str, String)> {
        if std::env::var_os(variable).is_some() {
            return None;
        }
        self.file_value(variable)
    }

    /// How specific the file giving the variable's value is: 1 for the least, 0 for none; the
    /// environment and the command line beat them all.
    pub fn layer_of(&self, variable: &str) -> usize {
        self.source(variable).map_or(0, |(file, _)| file + 1)
    }

    /// `command` with the file's values as the defaults of the options they stand for (which
    /// clap checks as it checks the command line, when the subcommand run has the option; see
    /// `usage::explain` for the message). A key no option reads is an error.
    pub fn apply(&self, command: clap::Command) -> Result<clap::Command, String> {
        if self.files.is_empty() {
            return Ok(command);
        }
        let known = |command: &clap::Command, variable: &str| {
            command
                .get_arguments()
                .chain(command.get_subcommands().flat_map(|s| s.get_arguments()))
                .any(|arg| arg.get_env() == Some(OsStr::new(variable)))
        };
        // A key for another subcommand than the one `command` has is known all the same.
        let mut whole = None;
        let entries = self
            .files
            .iter()
            .flat_map(|f| f.entries.iter().map(move |e| (f, e)));
        for (file, entry) in entries {
            if ONLY_PER_RUN.contains(&entry.key.as_str()) {
                return Err(format!(
                    "{}: {} is not for a configuration file: every run it reaches would {}; give \
                     --{} (or DLOCK_{}=1) to the runs that need it",
                    file.at(entry.line),
                    entry.key,
                    if entry.key == "supersede" {
                        "make the one waiting before it give up"
                    } else {
                        "cancel the one running before it"
                    },
                    entry.key,
                    variable_of(&entry.key).trim_start_matches("DLOCK_"),
                ));
            }
            let variable = variable_of(&entry.key);
            if known(&command, &variable) {
                continue;
            }
            let whole = whole.get_or_insert_with(super::parsing_command);
            if !known(whole, &variable) {
                return Err(format!(
                    "{}: unknown key {:?} (keys: {})",
                    file.at(entry.line),
                    entry.key,
                    known_keys(whole).join(", ")
                ));
            }
        }
        let default = |arg: Arg| -> Arg {
            let Some(variable) = arg.get_env().and_then(OsStr::to_str) else {
                return arg;
            };
            match self.value_for(variable) {
                Some((value, _)) => {
                    let values = split_if_urls(variable, value);
                    arg.default_values(values)
                }
                None => arg,
            }
        };
        Ok(command
            .mut_args(&default)
            .mut_subcommands(|sub| sub.mut_args(&default)))
    }
}

/// Keys a file may not set, though their options read a variable: a fleet-wide `supersede` or
/// `cancel-in-progress` would make every run (every cron firing) end the one before it.
const ONLY_PER_RUN: [&str; 2] = ["supersede", "cancel-in-progress"];

/// The files to read, least specific first: the system's and the user's that exist, or the
/// system's and `$DLOCK_CONFIG` (which must exist); none when DLOCK_CONFIG is set empty.
fn locate() -> Vec<PathBuf> {
    let user = match std::env::var_os("DLOCK_CONFIG") {
        Some(path) if path.is_empty() => return Vec::new(),
        Some(path) => Some(PathBuf::from(path)),
        None => {
            let dir = match std::env::var_os("XDG_CONFIG_HOME") {
                Some(dir) if Path::new(&dir).is_absolute() => Some(PathBuf::from(dir)),
                _ => std::env::var_os("HOME")
                    .filter(|home| Path::new(home).is_absolute())
                    .map(|home| Path::new(&home).join(".config")),
            };
            dir.map(|dir| dir.join("dlock").join("config"))
                .filter(|path| path.exists())
        }
    };
    let system = Some(PathBuf::from(SYSTEM)).filter(|path| path.exists());
    system.into_iter().chain(user).collect()
}

/// A file's `backend` and `url` agree: each URL is one of that backend's (a URL names its backend,
/// so `backend` may be left out).
fn check_pair(file: &File) -> Result<(), String> {
    let (Some(backend), Some(url)) = (file.entry("backend"), file.entry("url")) else {
        return Ok(());
    };
    let Some(kind) = kind_named(&backend.value) else {
        // Refused by `--backend`'s parser, naming the line.
        return Ok(());
    };
    for one in super::urls::split(&url.value) {
        if let Some(other) = kind_of_url(&one).filter(|other| *other != kind) {
            return Err(format!(
                "{}: backend {} does not fit the url on line {}, {} (a {} URL): the URL names its \
                 backend, so `backend` may be left out",
                file.at(backend.line),
                backend.value,
                url.line,
                crate::url::redact(&one),
                other.as_str()
            ));
        }
    }
    Ok(())
}

/// `key = value` lines; blank lines and lines starting with `#` are skipped, and so is a `#` after
/// white space and what follows it (a comment after the value). Only `url` may come more than
/// once (its values add up, as repeated `--url` do).
fn parse(path: &Path, text: &str) -> Result<Vec<Entry>, String> {
    let mut entries: Vec<Entry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let at = || format!("{} line {line}", path.display());
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            return Err(format!("{}: expected `key = value`", at()));
        };
        let (key, value) = (key.trim(), value.trim());
        let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if key.is_empty() || !key.chars().all(plain) {
            return Err(format!(
                "{}: a key is lower-case letters, digits and `-`, like connect-timeout",
                at()
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(format!("{}: the value has a control character", at()));
        }
        let value = unquoted(value).map_err(|why| format!("{}: {why}", at()))?;
        match entries.iter_mut().find(|e| e.key == key) {
            Some(earlier) if key == "url" => {
                earlier.value = format!("{} {value}", earlier.value);
            }
            Some(earlier) => {
                return Err(format!(
                    "{}: {key} is already set on line {}",
                    at(),
                    earlier.line
                ))
            }
            None => entries.push(Entry {
                key: key.to_owned(),
                value: value.to_owned(),
                line,
            }),
        }
    }
    Ok(entries)
}

/// `value` without a comment after it and without the one pair of quotes around it, as a shell or
/// an INI file would write it (`url = "redis://a:6379"  # primary`); or why not: a quote at one
/// end with no partner at the other, or words after the closing quote. Within quotes, `#` is text.
fn unquoted(value: &str) -> Result<&str, &'static str> {
    const UNCLOSED: &str =
        "a quote the value does not close (write `key = value`, quotes optional)";
    for quote in ['"', '\''] {
        if let Some(inside) = value.strip_prefix(quote) {
            let Some(end) = inside.find(quote) else {
                return Err(UNCLOSED);
            };
            let after = inside[end + 1..].trim_start();
            if !after.is_empty() && !after.starts_with('#') {
                return Err("text after the closing quote (a comment starts with `#`)");
            }
            return Ok(&inside[..end]);
        }
    }
    // A `#` that starts the value or follows white space starts a comment.
    let bytes = value.as_bytes();
    let comment = (0..bytes.len())
        .find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()));
    let value = comment.map_or(value, |i| value[..i].trim_end());
    if value.ends_with(['"', '\'']) {
        return Err(UNCLOSED);
    }
    Ok(value)
}

/// A relative `password-file` is the file's neighbour, not a file in whatever directory dlock runs
/// in: made absolute against the configuration file's own directory.
fn anchor_password_file(path: &Path, entries: &mut [Entry]) -> Result<(), String> {
    let Some(entry) = entries.iter_mut().find(|e| e.key == "password-file") else {
        return Ok(());
    };
    if Path::new(&entry.value).is_absolute() || entry.value.is_empty() {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new(""));
    let joined = dir.join(&entry.value);
    entry.value = joined
        .to_str()
        .ok_or_else(|| {
            format!(
                "{} line {}: the configuration file's directory is not UTF-8: give an absolute \
                 password-file",
                path.display(),
                entry.line
            )
        })?
        .to_owned();
    Ok(())
}

/// `DLOCK_CONNECT_TIMEOUT` -> `connect-timeout`.
pub fn key_of(variable: &str) -> String {
    let name = variable.strip_prefix("DLOCK_").unwrap_or(variable);
    name.to_ascii_lowercase().replace('_', "-")
}

/// `connect-timeout` -> `DLOCK_CONNECT_TIMEOUT`.
fn variable_of(key: &str) -> String {
    format!("DLOCK_{}", key.to_ascii_uppercase().replace('-', "_"))
}

/// The keys the file may set: the DLOCK_* variables dlock's options read.
fn known_keys(command: &clap::Command) -> Vec<String> {
    let mut keys: Vec<String> = command
        .get_arguments()
        .chain(command.get_subcommands().flat_map(|s| s.get_arguments()))
        .filter_map(|arg| Some(key_of(arg.get_env()?.to_str()?)))
        .filter(|key| !ONLY_PER_RUN.contains(&key.as_str()))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The servers in one value of `url` (or DLOCK_URL), and the value itself for any other key.
fn split_if_urls(key_or_variable: &str, value: &str) -> Vec<String> {
    if key_or_variable == "url" || key_or_variable == "DLOCK_URL" {
        super::urls::split(value)
    } else {
        vec![value.to_owned()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Vec<(String, String)>, String> {
        parse(Path::new("/etc/dlock/config"), text)
            .map(|entries| entries.into_iter().map(|e| (e.key, e.value)).collect())
    }

    #[test]
    fn lines_are_keys_and_values_with_comments_and_blank_lines_skipped() {
        let text = "# fleet\n\nbackend = redis\nurl=redis://a:6379\n  url = redis://b:6379  \n";
        assert_eq!(
            parsed(text).unwrap(),
            vec![
                ("backend".into(), "redis".into()),
                ("url".into(), "redis://a:6379 redis://b:6379".into())
            ]
        );
    }

    #[test]
    fn quotes_around_a_value_are_not_part_of_it() {
        let text = "url = \"redis://a:6379\"\nbackend = 'redis'\nmessage = say \"hi\" there\n";
        assert_eq!(
            parsed(text).unwrap(),
            vec![
                ("url".into(), "redis://a:6379".into()),
                ("backend".into(), "redis".into()),
                ("message".into(), "say \"hi\" there".into()),
            ]
        );
        for text in ["url = \"redis://a:6379\n", "ttl = 5s'\n", "ttl = \"\n"] {
            let err = parsed(text).unwrap_err();
            assert!(err.contains("line 1: a quote"), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_hash_after_white_space_starts_a_comment_outside_quotes() {
        let text = "url = redis://h:6379  # primary\nbackend = redis # x\n\
                    message = \"deploy #42\"  # quoted\nttl = 'a#b' #\nwait = 5m#s\n";
        assert_eq!(
            parsed(text).unwrap(),
            vec![
                ("url".into(), "redis://h:6379".into()),
                ("backend".into(), "redis".into()),
                ("message".into(), "deploy #42".into()),
                ("ttl".into(), "a#b".into()),
                ("wait".into(), "5m#s".into()),
            ]
        );
        let err = parsed("url = \"redis://h\" primary\n").unwrap_err();
        assert!(
            err.contains("line 1: text after the closing quote"),
            "{err}"
        );
    }

    #[test]
    fn malformed_lines_are_refused_naming_file_and_line() {
        for (text, says) in [
            ("backend redis\n", "line 1: expected `key = value`"),
            ("\nBackend = redis\n", "line 2: a key is lower-case"),
            (
                "ttl = 5s\nttl = 6s\n",
                "line 2: ttl is already set on line 1",
            ),
            (
                "message = a\u{1b}b\n",
                "line 1: the value has a control character",
            ),
        ] {
            let err = parsed(text).unwrap_err();
            assert!(err.starts_with("/etc/dlock/config line"), "{err}");
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn keys_are_variables_without_the_prefix() {
        assert_eq!(variable_of("connect-timeout"), "DLOCK_CONNECT_TIMEOUT");
        assert_eq!(key_of("DLOCK_CONNECT_TIMEOUT"), "connect-timeout");
        let keys = known_keys(&super::super::command());
        for key in [
            "backend",
            "url",
            "password-file",
            "connect-timeout",
            "ttl",
            "wait",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} in {keys:?}");
        }
    }
}
