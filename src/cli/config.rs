//! The configuration file, for what a fleet sets once per host (the backend, its servers, where
//! the password is): `key = value` lines, each key a DLOCK_* variable's name without the prefix,
//! in lower case with `-` for `_` (`url`, `password-file`, `connect-timeout`, `ttl`...).
//!
//! The first of these that exists is read: `$DLOCK_CONFIG` (which must exist when set, and names
//! no file when set empty), `$XDG_CONFIG_HOME/dlock/config` (or `~/.config/dlock/config`), then
//! `/etc/dlock/config`. An option on the command line beats its variable, and a variable beats the
//! file: the file's values are clap's defaults, used where neither was given.
//!
//! The file decides which server gets the password, so it is refused unless this user or root
//! owns it and nobody else may write it (see `trusted`). A relative `password-file` in it is
//! relative to the file's own directory.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clap::Arg;

/// The system-wide file, for a fleet's hosts.
const SYSTEM: &str = "/etc/dlock/config";

/// One `key = value` line.
#[derive(Debug)]
struct Entry {
    key: String,
    value: String,
    line: usize,
}

/// The file read, if any.
#[derive(Debug, Default)]
pub struct Config {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl Config {
    /// Reads the first configuration file that exists; none is an empty configuration.
    pub fn load() -> Result<Config, String> {
        let Some(path) = locate()? else {
            return Ok(Config::default());
        };
        let text = super::trusted::read(&path, super::trusted::Kind::Config)?;
        let mut entries = parse(&path, &text)?;
        anchor_password_file(&path, &mut entries)?;
        Ok(Config { path, entries })
    }

    /// The variable's value from the file, when the environment does not set the variable: the
    /// value and where it was written (`/etc/dlock/config line 3`).
    pub fn value_for(&self, variable: &str) -> Option<(&str, String)> {
        if std::env::var_os(variable).is_some() {
            return None;
        }
        let entry = self
            .entries
            .iter()
            .find(|e| variable_of(&e.key) == variable)?;
        Some((&entry.value, self.at(entry.line)))
    }

    fn at(&self, line: usize) -> String {
        format!("{} line {line}", self.path.display())
    }

    /// `command` with the file's values as the defaults of the options they stand for (which
    /// clap checks as it checks the command line, when the subcommand run has the option; see
    /// `usage::explain` for the message). A key no option reads is an error.
    pub fn apply(&self, command: clap::Command) -> Result<clap::Command, String> {
        if self.entries.is_empty() {
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
        for entry in &self.entries {
            let variable = variable_of(&entry.key);
            if known(&command, &variable) {
                continue;
            }
            let whole = whole.get_or_insert_with(super::parsing_command);
            if !known(whole, &variable) {
                return Err(format!(
                    "{}: unknown key {:?} (keys: {})",
                    self.at(entry.line),
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

/// Where the configuration is: `None` for no file.
fn locate() -> Result<Option<PathBuf>, String> {
    if let Some(path) = std::env::var_os("DLOCK_CONFIG") {
        if path.is_empty() {
            return Ok(None);
        }
        return Ok(Some(PathBuf::from(path)));
    }
    let user = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if Path::new(&dir).is_absolute() => Some(PathBuf::from(dir)),
        _ => std::env::var_os("HOME")
            .filter(|home| Path::new(home).is_absolute())
            .map(|home| Path::new(&home).join(".config")),
    };
    let candidates = user
        .map(|dir| dir.join("dlock").join("config"))
        .into_iter()
        .chain([PathBuf::from(SYSTEM)]);
    for path in candidates {
        if path.exists() {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// `key = value` lines; blank lines and lines starting with `#` are skipped. Only `url` may come
/// more than once (its values add up, as repeated `--url` do).
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
        let value = unquoted(value).ok_or_else(|| {
            format!(
                "{}: a quote the value does not close (write `key = value`, quotes optional)",
                at()
            )
        })?;
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

/// `value` without the one pair of quotes around it, as a shell or an INI file would write it
/// (`url = "redis://a:6379"`); `None` when a quote at one end has no partner at the other.
fn unquoted(value: &str) -> Option<&str> {
    for quote in ['"', '\''] {
        let (opens, closes) = (value.starts_with(quote), value.ends_with(quote));
        if opens || closes {
            let paired = opens && closes && value.len() >= 2;
            return paired.then(|| &value[1..value.len() - 1]);
        }
    }
    Some(value)
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
