//! A run parses with only the subcommand its command line names: building all six and copying the
//! global options into each was most of dlock's start (docs/SPEED.md). Help, man pages
//! and completions still come from the whole declaration in cli.rs, which the tests here hold
//! this to.

use clap::Args;

use super::{config, parsing_command};
use super::{
    ConfigArgs, GenerateArgs, GlobalArgs, HoldArgs, ListArgs, ReleaseArgs, RunArgs, StatusArgs,
};

/// What adds a subcommand's arguments to it.
type AddArguments = fn(clap::Command) -> clap::Command;

/// Each subcommand with what adds its arguments, as `Command` declares them (a test holds the two
/// together).
const SUBCOMMANDS: [(&str, AddArguments); 7] = [
    ("run", <RunArgs as Args>::augment_args),
    ("status", <StatusArgs as Args>::augment_args),
    ("list", <ListArgs as Args>::augment_args),
    ("hold", <HoldArgs as Args>::augment_args),
    ("release", <ReleaseArgs as Args>::augment_args),
    ("config", <ConfigArgs as Args>::augment_args),
    ("generate", <GenerateArgs as Args>::augment_args),
];

/// The command line with only the subcommand `args` name (the first word that is a subcommand's
/// name), or `None`. Where that word was not the subcommand (an option's value), the parse fails
/// and `matches` parses again with the whole command line; where it succeeds, the whole command
/// line gives the same parse, as dlock itself takes no word before its subcommand.
fn with_only_named_subcommand(args: &[std::ffi::OsString]) -> Option<clap::Command> {
    let (name, add_arguments) = args
        .iter()
        .skip(1)
        .take_while(|arg| *arg != "--")
        .find_map(|arg| SUBCOMMANDS.iter().find(|(name, _)| arg == name))?;
    let dlock = clap::Command::new("dlock")
        .version(crate::backend::version())
        .subcommand_required(true)
        .arg_required_else_help(true);
    Some(
        <GlobalArgs as Args>::augment_args(dlock)
            .subcommand(add_arguments(clap::Command::new(*name))),
    )
}

/// The parse of a command line: with only the subcommand it names, or with the whole command line
/// (which also gives any error). `Err` is a configuration file's error.
pub fn matches(
    config: &config::Config,
    args: &[std::ffi::OsString],
) -> Result<clap::error::Result<clap::ArgMatches>, String> {
    if let Some(command) = with_only_named_subcommand(args) {
        if let Ok(matches) = config.apply(command)?.try_get_matches_from(args) {
            return Ok(Ok(matches));
        }
    }
    Ok(config.apply(parsing_command())?.try_get_matches_from(args))
}

#[cfg(test)]
mod tests {
    use clap::FromArgMatches;

    use super::*;
    use crate::cli::Cli;

    fn arguments(command: &clap::Command) -> String {
        format!("{:?}", command.get_arguments().collect::<Vec<_>>())
    }

    /// The command a run parses with names each subcommand and its arguments as the whole one.
    #[test]
    fn each_subcommand_alone_is_the_one_declared() {
        let whole = parsing_command();
        let declared: Vec<&str> = whole.get_subcommands().map(|s| s.get_name()).collect();
        let listed: Vec<&str> = SUBCOMMANDS.iter().map(|(name, _)| *name).collect();
        assert_eq!(declared, listed);
        for (name, _) in SUBCOMMANDS {
            let args = ["dlock".into(), name.into()];
            let alone = with_only_named_subcommand(&args).expect(name);
            assert_eq!(arguments(&alone), arguments(&whole), "{name}");
            assert_eq!(alone.get_version(), whole.get_version());
            assert_eq!(
                alone.is_subcommand_required_set(),
                whole.is_subcommand_required_set()
            );
            assert_eq!(
                alone.is_arg_required_else_help_set(),
                whole.is_arg_required_else_help_set()
            );
            let subcommands: Vec<_> = alone.get_subcommands().collect();
            assert_eq!(subcommands.len(), 1, "{name}");
            let declared = whole.find_subcommand(name).unwrap();
            assert_eq!(arguments(subcommands[0]), arguments(declared), "{name}");
        }
    }

    /// Wherever the command with only the named subcommand parses a command line, the whole one
    /// parses it the same; where the word taken for the subcommand is an option's value, it fails.
    #[test]
    fn a_parse_with_one_subcommand_is_the_parse_with_all() {
        let lines = [
            "run x -- true",
            "-b file run -w 5 -n x -- true",
            "--backend=file run --shared x y -- true",
            "-u run run x -- true",
            "-u status run x -- true",
            "--url status list",
            "-vu list status x",
            "-q status --json x",
            "run -c status x",
            "run x -- status list",
            "hold --print-env -n deploy",
            "release --force x",
            "list --runs",
            "-b file list run",
            "generate --out run",
            "status run",
            "config",
            "-u /tmp config",
            "run --kill-after 1s -E 3 --ttl 2s x -- true",
            "--connect-timeout 1s --replicas 1 run x -- true",
            "run x",
            "run",
            "status",
            "help run",
            "--version",
            "run --help",
        ];
        let mut parsed_alone = 0;
        for line in lines {
            let args: Vec<std::ffi::OsString> = std::iter::once("dlock")
                .chain(line.split(' '))
                .map(Into::into)
                .collect();
            let whole = parsing_command()
                .try_get_matches_from(&args)
                .map(|m| format!("{:?}", Cli::from_arg_matches(&m)));
            let Some(alone) = with_only_named_subcommand(&args) else {
                continue;
            };
            if let Ok(matches) = alone.try_get_matches_from(&args) {
                parsed_alone += 1;
                let alone = format!("{:?}", Cli::from_arg_matches(&matches));
                assert_eq!(whole.as_ref().ok(), Some(&alone), "{line}");
            }
        }
        assert!(parsed_alone >= 15, "{parsed_alone}");
    }
}
