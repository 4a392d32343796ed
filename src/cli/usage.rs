//! A refused command line as the one line dlock prints: clap's message folded, plus what clap
//! cannot know. A bad value clap read from a DLOCK_* variable is named by that variable (the
//! command line did not show it), and `dlock NAME -- COMMAND` without `run` gets the line to type.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

use super::config::{self, Config};

/// The line for an error clap returned from parsing `args` (with the environment and the
/// configuration file's values).
pub fn explain(error: &clap::Error, args: &[OsString], config: &Config) -> String {
    let line = explain_parse(error, args, config);
    // flock's `dlock run -w 5 NAME cmd -x`: the line with its `--`.
    let dashed = args
        .iter()
        .position(|arg| arg == "run")
        .and_then(|run| with_dashes(args, run));
    match (line.strip_prefix(MISSING_COMMAND), dashed) {
        // `dlock run NAME --` has its `--`: only the command after it is missing.
        (Some(rest), _) if args.iter().any(|arg| arg == "--") => {
            format!("missing the command to run after `--`{rest}")
        }
        (rest, Some(fixed)) if !line.contains(SAY) => format!(
            "{}{SAY}{}",
            if rest.is_some() {
                MISSING_COMMAND
            } else {
                &line
            },
            shown(&fixed).unwrap_or_else(|| "dlock run NAME -- COMMAND".into())
        ),
        _ => line,
    }
}

/// What comes before the line to type instead.
const SAY: &str = "; to run a command under a lock, say: ";

/// flock's order, `run [OPTIONS] NAME COMMAND...` (the subcommand at `run` in `args`), with the
/// `--` dlock needs put after NAME; `None` when that is not such a line or does not parse then.
fn with_dashes(args: &[OsString], run: usize) -> Option<Vec<OsString>> {
    if args.iter().any(|arg| arg == "--") {
        return None;
    }
    let mut i = run + 1;
    while let Some(word) = args.get(i)?.to_str().filter(|w| w.starts_with('-')) {
        i += 1 + option_values("run", word)?;
    }
    // NAME at `i`, and a command after it.
    args.get(i + 1)?;
    let mut fixed = args.to_vec();
    fixed.insert(i + 1, "--".into());
    without_environment().try_get_matches_from(&fixed).ok()?;
    Some(fixed)
}

/// `dlock` and the words of `args` after the program's name, as a shell would need them typed,
/// with no URL's password; `None` when one cannot be shown on one line.
fn shown(args: &[OsString]) -> Option<String> {
    let words: Option<Vec<String>> = args
        .iter()
        .skip(1)
        .map(|w| quote(&redact_word(w.to_str()?)))
        .collect();
    Some(format!("dlock {}", words?.join(" ")))
}

/// How the line for a `run` without its command starts.
const MISSING_COMMAND: &str = "missing `--` and the command to run";

fn explain_parse(error: &clap::Error, args: &[OsString], config: &Config) -> String {
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
        return format!(
            "{MISSING_COMMAND}: dlock run NAME -- COMMAND [ARGS...], or dlock run NAME -c \
             'SHELL COMMAND'"
        );
    }
    match suggestion(e) {
        Some(similar) => format!("{folded}; did you mean {similar}?"),
        None => folded,
    }
}

/// clap's "a similar subcommand/argument exists" tip: `'status'`, or `'--json' or '--jq'`; for a
/// word clap finds nothing like, a subcommand one slip of the keyboard away (`rnu`).
fn suggestion(e: &clap::Error) -> Option<String> {
    let suggested = match e
        .get(ContextKind::SuggestedSubcommand)
        .or_else(|| e.get(ContextKind::SuggestedArg))
    {
        Some(suggested) => suggested,
        None => return misspelt_subcommand(e).map(|sub| format!("'{sub}'")),
    };
    let words: Vec<&str> = match suggested {
        ContextValue::String(word) => vec![word.as_str()],
        ContextValue::Strings(words) => words.iter().map(String::as_str).collect(),
        _ => return None,
    };
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    (!quoted.is_empty()).then(|| quoted.join(" or "))
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

/// For a command line that parses once one thing is put right: `dlock NAME -- COMMAND` (or `dlock
/// -n NAME ...`, flock's order) gets `run` put in, and `dlock -n run NAME ...` its options moved
/// after the subcommand typed. A word that looks like a misspelt subcommand (`dlock rnu job`) gets
/// clap's suggestion instead, never a line that would lock the typo. The line shown passes through
/// the URL redaction, so no password typed into it is printed back.
fn forgotten_run(error: &clap::Error, args: &[OsString]) -> Option<String> {
    let offending = match (error.kind(), error.get(ContextKind::InvalidSubcommand)) {
        (ErrorKind::InvalidSubcommand, Some(ContextValue::String(word))) => word,
        (ErrorKind::UnknownArgument, _) => match error.get(ContextKind::InvalidArg)? {
            ContextValue::String(word) => word,
            _ => return None,
        },
        _ => return None,
    };
    if error.get(ContextKind::SuggestedSubcommand).is_some() || misspelt_subcommand(error).is_some()
    {
        return None;
    }
    let before_dashes = args.iter().take_while(|a| *a != "--").count();
    // `--wait=3` and `-w3` are named by clap as `--wait` and `-w`.
    let is_offending = |word: &OsString| {
        word.to_str().is_some_and(|w| {
            w == offending
                || w.strip_prefix(offending.as_str()).is_some_and(|rest| {
                    rest.starts_with('=') || (!offending.starts_with("--") && !rest.is_empty())
                })
        })
    };
    let at = (1..before_dashes).find(|&i| is_offending(&args[i]))?;
    let typed_subcommand =
        (1..before_dashes).find(|&i| args[i].to_str().is_some_and(is_subcommand));
    let fixed = match typed_subcommand {
        // An option of the subcommand's before it: move it (and its value) after it.
        Some(sub) if sub > at => {
            let word = args[at].to_str()?;
            let takes = option_values(args[sub].to_str()?, word)?;
            let moved = at..(at + 1 + takes).min(sub);
            let mut fixed: Vec<OsString> = Vec::with_capacity(args.len());
            fixed.extend(args[..moved.start].iter().cloned());
            fixed.extend(args[moved.end..=sub].iter().cloned());
            fixed.extend(args[moved.clone()].iter().cloned());
            fixed.extend(args[sub + 1..].iter().cloned());
            fixed
        }
        Some(_) => return None,
        None => {
            let mut fixed: Vec<OsString> = args.to_vec();
            fixed.insert(at, "run".into());
            fixed
        }
    };
    let fixed = match without_environment().try_get_matches_from(&fixed) {
        Ok(_) => fixed,
        // flock's `dlock NAME cmd`: its `--` too.
        Err(_) if typed_subcommand.is_none() => with_dashes(&fixed, at)?,
        Err(_) => return None,
    };
    let say = match (shown(&fixed), typed_subcommand) {
        (Some(line), _) => line,
        (None, None) => "dlock run NAME -- COMMAND".into(),
        (None, Some(_)) => return None,
    };
    Some(match typed_subcommand {
        None => format!("{}{SAY}{say}", one_line(error)),
        Some(_) => format!(
            "{}; options of a subcommand go after it: {say}",
            one_line(error)
        ),
    })
}

/// The subcommand an unrecognised one is a slip away from: one letter added, left out, changed or
/// two swapped (two for longer words), as `rnu` for `run`. Such a word is never taken for a lock
/// name in a suggested line.
fn misspelt_subcommand(e: &clap::Error) -> Option<String> {
    let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidSubcommand) else {
        return None;
    };
    let most = if word.chars().count() <= 4 { 1 } else { 2 };
    super::command()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name().to_owned())
        .find(|name| slips(word, name) <= most)
}

/// The edit distance between `a` and `b` counting a swap of two neighbours as one edit (optimal
/// string alignment).
fn slips(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d: Vec<Vec<usize>> = (0..=a.len())
        .map(|i| (0..=b.len()).map(|j| if i == 0 { j } else { i }).collect())
        .collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// Whether `word` names one of dlock's subcommands (or an alias of one).
fn is_subcommand(word: &str) -> bool {
    super::command()
        .get_subcommands()
        .any(|sub| sub.get_name() == word || sub.get_all_aliases().any(|a| a == word))
}

/// How many of the words after `word`, an option of `subcommand`, are its values (0 for a switch
/// or `--opt=value`); `None` when `word` is no option of that subcommand.
fn option_values(subcommand: &str, word: &str) -> Option<usize> {
    let mut command = super::command();
    command.build();
    let sub = command
        .get_subcommands()
        .find(|s| s.get_name() == subcommand)?;
    let arg = if let Some(long) = word.strip_prefix("--") {
        let (long, inline) = match long.split_once('=') {
            Some((long, _)) => (long, true),
            None => (long, false),
        };
        let arg = sub.get_arguments().find(|a| {
            a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|al| al.contains(&long))
        })?;
        if inline {
            return Some(0);
        }
        arg
    } else {
        // `-n`, or `-w3` / `-nw` style clusters: the first letter names the option.
        let mut letters = word.strip_prefix('-')?.chars();
        let first = letters.next()?;
        let arg = sub.get_arguments().find(|a| {
            a.get_short() == Some(first)
                || a.get_all_short_aliases()
                    .is_some_and(|al| al.contains(&first))
        })?;
        if letters.next().is_some() {
            return Some(0);
        }
        arg
    };
    Some(usize::from(arg.get_action().takes_values()))
}

/// A word of a command line as dlock may print it: a URL's password (and query) hidden, also in
/// `--url=URL`.
fn redact_word(word: &str) -> String {
    if !word.contains("://") {
        return word.to_owned();
    }
    match word.split_once('=') {
        Some((option, url)) if option.starts_with("--") && !option.contains("://") => {
            format!("{option}={}", crate::url::redact(url))
        }
        _ => crate::url::redact(word),
    }
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
    use super::{quote, slips};

    #[test]
    fn a_slip_is_one_edit_and_a_swap_counts_once() {
        assert_eq!(slips("rnu", "run"), 1);
        assert_eq!(slips("stauts", "status"), 1);
        assert_eq!(slips("job", "run"), 3);
        assert_eq!(slips("", "list"), 4);
        assert_eq!(slips("relase", "release"), 1);
    }

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
