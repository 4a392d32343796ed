//! A refused command line as the one line dlock prints: clap's message folded, plus what clap
//! cannot know. A bad value clap read from a DLOCK_* variable is named by that variable (the
//! command line did not show it), and `dlock NAME -- COMMAND` without `run` gets the line to type.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

use super::config::{self, Config};

/// The line for an error clap returned from parsing `args` (with the environment and the
/// configuration file's values).
pub fn explain(error: &clap::Error, args: &[OsString], config: &Config) -> String {
    match without_environment().try_get_matches_from(args) {
        // The command line alone is wrong: say so as clap does, with `run` if it is missing.
        Err(typed) => forgotten_run(&typed, args).unwrap_or_else(|| one_line(&typed)),
        // The command line alone is fine, so a variable or the file is the cause.
        Ok(_) => from_environment(error, config).unwrap_or_else(|| one_line(error)),
    }
}

/// clap's message without its usage block and hints, folded onto one line.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let body = text.split("\n\n").next().unwrap_or(&text);
    let body = body.strip_prefix("error: ").unwrap_or(body);
    let folded = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if e.kind() == ErrorKind::MissingRequiredArgument && folded.contains("<COMMAND>") {
        return "missing `--` and the command to run: dlock run NAME -- COMMAND [ARGS...], or \
                dlock run NAME -c 'SHELL COMMAND'"
            .into();
    }
    folded
}

/// dlock's command line without its DLOCK_* variables: what the user typed, judged alone.
fn without_environment() -> clap::Command {
    super::command()
        .mut_args(|arg| arg.env(None))
        .mut_subcommands(|sub| sub.mut_args(|arg| arg.env(None)))
}

/// `invalid DLOCK_WAIT 'abc': ...` for a value clap read from a variable and refused, found by the
/// option clap names (only a variable can have given it: the command line alone parses).
fn from_environment(error: &clap::Error, config: &Config) -> Option<String> {
    let mut command = super::command();
    // An argument shows itself (`--wait <DURATION>`, as clap named it) only once built.
    command.build();
    let mut variables = command
        .get_arguments()
        .chain(command.get_subcommands().flat_map(|s| s.get_arguments()))
        .filter_map(|arg| Some((arg, arg.get_env()?)));
    if error.kind() == ErrorKind::InvalidUtf8 {
        let (_, variable) = variables
            .find(|(_, var)| std::env::var_os(var).is_some_and(|value| value.to_str().is_none()))?;
        return Some(format!("{} is not valid UTF-8", variable.to_string_lossy()));
    }
    if !matches!(
        error.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let (ContextValue::String(option), ContextValue::String(value)) = (
        error.get(ContextKind::InvalidArg)?,
        error.get(ContextKind::InvalidValue)?,
    ) else {
        return None;
    };
    let (_, variable) = variables.find(|(arg, _)| arg.to_string() == *option)?;
    let variable = variable.to_string_lossy();
    let line = one_line(error);
    let said = format!("invalid value '{value}' for '{option}'");
    // A variable that is not set had its value from the configuration file.
    let (source, name) = match config.value_for(&variable) {
        Some((_, at)) => (format!("{at}: "), config::key_of(&variable)),
        None => (String::new(), variable.into_owned()),
    };
    Some(match line.strip_prefix(&said) {
        Some(why) => format!("{source}invalid {name} '{value}'{why}"),
        None => format!("{source}{name}: {line}"),
    })
}

/// For `dlock NAME -- COMMAND` (or `dlock -n NAME ...`, flock's order): clap's complaint and the
/// same line with `run`, when that line parses.
fn forgotten_run(error: &clap::Error, args: &[OsString]) -> Option<String> {
    let offending = match (error.kind(), error.get(ContextKind::InvalidSubcommand)) {
        (ErrorKind::InvalidSubcommand, Some(ContextValue::String(word))) => word,
        (ErrorKind::UnknownArgument, _) => match error.get(ContextKind::InvalidArg)? {
            ContextValue::String(word) => word,
            _ => return None,
        },
        _ => return None,
    };
    // `run` goes where the offending word is (after the global options), else first.
    let before_dashes = args.iter().take_while(|a| *a != "--").count();
    let at = (1..before_dashes)
        .find(|&i| args[i] == offending.as_str())
        .unwrap_or(1);
    let mut fixed: Vec<OsString> = args.to_vec();
    fixed.insert(at.min(fixed.len()), "run".into());
    without_environment().try_get_matches_from(&fixed).ok()?;
    let words: Option<Vec<String>> = fixed.iter().skip(1).map(|w| quote(w.to_str()?)).collect();
    let typed = match words {
        Some(words) => format!("dlock {}", words.join(" ")),
        None => "dlock run NAME -- COMMAND".into(),
    };
    Some(format!(
        "{}; to run a command under a lock, say: {typed}",
        one_line(error)
    ))
}

/// `word` as a shell would need it typed: bare when plain, else in single quotes. `None` for a
/// word with a control character, which would not fit on one line.
pub fn quote(word: &str) -> Option<String> {
    if word.chars().any(char::is_control) {
        return None;
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return Some(word.to_owned());
    }
    Some(format!("'{}'", word.replace('\'', r"'\''")))
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn words_are_quoted_as_a_shell_reads_them() {
        assert_eq!(quote("true").as_deref(), Some("true"));
        assert_eq!(quote("/usr/bin/x").as_deref(), Some("/usr/bin/x"));
        assert_eq!(quote("a b").as_deref(), Some("'a b'"));
        assert_eq!(quote("").as_deref(), Some("''"));
        assert_eq!(quote("it's").as_deref(), Some(r"'it'\''s'"));
        assert_eq!(quote("a\nb"), None);
    }
}
