//! Shell completions and man pages, generated from the clap definition so they can never disagree
//! with `--help`. The output is committed (completions/, man/) and a test checks it is fresh.
//! What clap cannot say (the examples, the environment, lock names from `dlock list`, a command
//! after `--`) comes from manual.rs and completions.rs.

use std::fs;
use std::path::Path;

use anyhow::Context;
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Roff};

use crate::manual::{self, Page};
use crate::{cli, completions, exit};

pub fn write_all(out: &Path) -> anyhow::Result<()> {
    let completions_dir = out.join("completions");
    let man = out.join("man");
    for dir in [&completions_dir, &man] {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        // A symbolic link there (another user's, in a directory they can write) would have the
        // pages written wherever it points.
        if fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            anyhow::bail!(
                "refusing to write into {}: it is a symbolic link",
                dir.display()
            );
        }
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut visible(), "dlock", &mut text);
        let text = String::from_utf8(text).context("completions are not UTF-8")?;
        let (file, text) = completions::finish(shell, text, &cli::command());
        let path = completions_dir.join(file);
        replace(&path, text.as_bytes())?;
    }
    // No `help` subcommand in the man page's list: there is no dlock-help(1).
    // The pages name the release; `--version` also lists the backends built, which the pages show.
    let command = cli::command()
        .disable_help_subcommand(true)
        .version(env!("CARGO_PKG_VERSION"));
    write_man(&man, "dlock", None, command.clone())?;
    let version = command.get_version().unwrap_or_default().to_owned();
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("dlock-{}", sub.get_name());
        let page = sub.clone().name(name.clone()).version(version.clone());
        write_man(&man, &name, Some(sub.get_name()), page)?;
    }
    Ok(())
}

/// What `generate --out DIR` says it wrote, and the lines that install it for the user who ran
/// `cargo install` (man(1) looks in `~/.cargo/share/man` when `~/.cargo/bin` is on PATH; the
/// completion directories are where bash-completion, zsh's `fpath` and fish look).
pub fn written(out: &Path) -> String {
    let at = |sub: &str| {
        let path = out.join(sub);
        let shown = path.to_string_lossy();
        crate::cli::quote(&shown).unwrap_or_else(|| shown.into_owned())
    };
    let (man, completions) = (at("man"), at("completions"));
    format!(
        "wrote the man pages into {man} and the bash, zsh and fish completions into {completions}; \
         to install them for yourself:\n\
         \x20 install -Dm644 -t ~/.cargo/share/man/man1 {man}/*.1\n\
         \x20 install -Dm644 {completions}/dlock.bash ~/.local/share/bash-completion/completions/dlock\n\
         \x20 install -Dm644 {completions}/_dlock ~/.zfunc/_dlock   # and fpath+=(~/.zfunc) in ~/.zshrc\n\
         \x20 install -Dm644 {completions}/dlock.fish ~/.config/fish/completions/dlock.fish\n"
    )
}

/// Puts `bytes` at `path` as a new file of this user's, never through what is there: written to a
/// file made beside it (`O_EXCL`: never an existing one, nor a symbolic link's target), then
/// renamed over `path`, which replaces a symbolic link itself, not the file it points to.
fn replace(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let failed = || format!("cannot write {}", path.display());
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let temporary = path.with_file_name(format!(
        ".{}.{}.tmp",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&temporary)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| fs::rename(&temporary, path));
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written.with_context(failed)
}

/// dlock's command without any hidden subcommand, which completions would offer.
fn visible() -> clap::Command {
    let full = cli::command();
    let mut command = clap::Command::new("dlock")
        .version(full.get_version().unwrap_or_default().to_owned())
        .args(full.get_arguments().cloned());
    for sub in full.get_subcommands().filter(|s| !s.is_hide_set()) {
        command = command.subcommand(sub.clone());
    }
    command
}

fn write_man(
    dir: &Path,
    name: &str,
    subcommand: Option<&str>,
    command: clap::Command,
) -> anyhow::Result<()> {
    let Some(page) = manual::page(subcommand) else {
        return Ok(());
    };
    let mut text = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    let render = |text: &mut Vec<u8>| -> std::io::Result<()> {
        man.render_title(text)?;
        // No hyphenation: URLs and option names broken at a line's end read as other words.
        let mut nh = Roff::new();
        nh.control("nh", [] as [&str; 0]);
        nh.to_writer(text)?;
        man.render_name_section(text)?;
        synopsis(&page).to_writer(text)?;
        man.render_description_section(text)?;
        man.render_options_section(text)?;
        if subcommand.is_none() {
            man.render_subcommands_section(text)?;
        }
        sections(&page, subcommand).to_writer(text)?;
        man.render_version_section(text)
    };
    render(&mut text).with_context(|| format!("cannot render the man page {name}"))?;
    let text = String::from_utf8(text).context("a man page is not UTF-8")?;
    let path = dir.join(format!("{name}.1"));
    replace(&path, unmark(&text).as_ref())
}

/// The help text's `code` marks, which man would print as backquotes, as bold; a line with an
/// unpaired mark is left as it is.
fn unmark(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let parts: Vec<&str> = line.split('`').collect();
        if line.starts_with('.') || parts.len().is_multiple_of(2) {
            out.push_str(line);
            continue;
        }
        for (i, part) in parts.iter().enumerate() {
            if i % 2 == 1 {
                out.push_str("\\fB");
                out.push_str(part);
                out.push_str("\\fR");
            } else {
                out.push_str(part);
            }
        }
    }
    out
}

fn synopsis(page: &Page) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]);
    for (i, line) in page.synopsis.iter().enumerate() {
        if i > 0 {
            roff.control("br", [] as [&str; 0]);
        }
        let mut words = line.splitn(2, ' ');
        let first = words.next().unwrap_or_default();
        roff.text([
            bold(first),
            roman(" "),
            roman(words.next().unwrap_or_default()),
        ]);
    }
    roff
}

/// EXAMPLES, ENVIRONMENT, FILES, EXIT STATUS and SEE ALSO.
fn sections(page: &Page, subcommand: Option<&str>) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXAMPLES"]);
    for (line, what) in page.examples {
        roff.control("TP", [] as [&str; 0]);
        roff.text([bold(*line)]);
        roff.text([roman(*what)]);
    }

    roff.control("SH", ["ENVIRONMENT"]);
    roff.text([roman(
        "An option given on the command line beats its variable, and a variable beats the configuration file (see FILES).",
    )]);
    for (variable, option, help) in variables(subcommand) {
        roff.control("TP", [] as [&str; 0]);
        roff.text([bold(variable)]);
        roff.text([roman(format!("{help} ({option})."))]);
    }
    for (variable, what) in manual::READ_ALSO {
        roff.control("TP", [] as [&str; 0]);
        roff.text([bold(*variable)]);
        roff.text([roman(*what)]);
    }
    if page.runs_a_command {
        roff.control("PP", [] as [&str; 0]);
        roff.text([roman(
            "The command run under the lock receives dlock's environment and:",
        )]);
        for (variables, what) in manual::RECEIVED {
            roff.control("TP", [] as [&str; 0]);
            roff.text([bold(*variables)]);
            roff.text([roman(*what)]);
        }
    }

    roff.control("SH", ["FILES"]);
    for (files, what) in manual::FILES {
        roff.control("TP", [] as [&str; 0]);
        roff.text([italic(*files)]);
        roff.text([roman(*what)]);
    }

    roff.control("SH", ["EXIT STATUS"]);
    for (status, meaning) in exit::rows() {
        roff.control("TP", [] as [&str; 0]);
        roff.text([bold(status)]);
        roff.text([roman(meaning)]);
    }
    roff.control("PP", [] as [&str; 0]);
    roff.text([roman(exit::subcommand_statuses())]);

    roff.control("SH", ["SEE ALSO"]);
    let mut pages: Vec<String> = std::iter::once("dlock".to_owned())
        .chain(
            cli::command()
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| format!("dlock-{}", s.get_name())),
        )
        .filter(|p| subcommand.map_or("dlock".to_owned(), |s| format!("dlock-{s}")) != *p)
        .map(|p| format!("{p}(1)"))
        .collect();
    pages.extend(manual::SEE_ALSO.iter().map(|p| p.to_string()));
    roff.text([roman(pages.join(", "))]);
    roff
}

/// Each DLOCK_* variable the page's options read (dlock's own and the subcommand's, or every
/// subcommand's on dlock's page): the variable, the option, its help.
fn variables(subcommand: Option<&str>) -> Vec<(String, String, String)> {
    let command = cli::command();
    let subs = command
        .get_subcommands()
        .filter(|s| subcommand.is_none_or(|name| s.get_name() == name));
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for arg in command
        .get_arguments()
        .chain(subs.flat_map(|s| s.get_arguments()))
    {
        let (Some(variable), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let variable = variable.to_string_lossy().into_owned();
        if seen.iter().any(|(v, _, _)| *v == variable) {
            continue;
        }
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        seen.push((variable, format!("--{long}"), help));
    }
    seen
}
