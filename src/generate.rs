//! Shell completions and man pages, generated from the clap definition so they can never disagree
//! with `--help`. The output is committed (completions/, man/) and a test checks it is fresh.

use std::fs;
use std::path::Path;

use anyhow::Context;
use clap_complete::Shell;

use crate::cli;

pub fn write_all(out: &Path) -> anyhow::Result<()> {
    let completions = out.join("completions");
    let man = out.join("man");
    for dir in [&completions, &man] {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cli::command(), "dlock", &completions)
            .with_context(|| format!("cannot write {shell} completions"))?;
    }
    let command = cli::command();
    write_man(&man, "dlock", command.clone())?;
    let version = command.get_version().unwrap_or_default().to_owned();
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("dlock-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).version(version.clone());
        write_man(&man, &name, sub)?;
    }
    Ok(())
}

fn write_man(dir: &Path, name: &str, command: clap::Command) -> anyhow::Result<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .with_context(|| format!("cannot render the man page {name}"))?;
    let path = dir.join(format!("{name}.1"));
    fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))
}
