//! Where the locks are, passed on to the command so that a dlock it runs (run, hold, status, list,
//! release) uses the same place by default: DLOCK_BACKEND (set for every command), DLOCK_URL with
//! the servers as given, without any password, DLOCK_PASSWORD_FILE and DLOCK_TRUST_OWNER. A
//! password typed into the URL is not passed on: DLOCK_PASSWORD_WITHHELD says so, for the nested
//! dlock to explain a refusal.
//!
//! Precedence stays as documented: what the nested command is given on its own command line beats
//! these variables, and they beat the configuration file. A URL that came from the configuration
//! file is not passed on, since the nested dlock reads the file again and finds its password there.

use std::path::Path;

use clap::parser::ValueSource::{CommandLine, EnvVariable};
use clap::ArgMatches;

use super::GlobalArgs;
use crate::url::PASSWORD_WITHHELD_VAR as WITHHELD_VAR;

/// The variables naming `global`'s place for the command, settled but before the password file's
/// password is put into the URLs; and whether this dlock itself uses such a URL from its parent.
pub fn settle(global: &mut GlobalArgs, matches: &ArgMatches) {
    let source = matches.value_source("urls");
    let inherited_withheld =
        source == Some(EnvVariable) && std::env::var_os(WITHHELD_VAR).is_some();
    global.parent_password_withheld = inherited_withheld && global.password_file.is_none();
    let mut vars = Vec::new();
    let mut withheld = inherited_withheld;
    if matches!(source, Some(CommandLine | EnvVariable)) && !global.urls.is_empty() {
        let urls: Vec<String> = global
            .urls
            .iter()
            .map(|url| {
                if global.backend.descriptor().local {
                    return absolute(url);
                }
                let (kept, taken) = crate::url::without_secrets(url);
                withheld |= taken;
                kept
            })
            .collect();
        vars.push(("DLOCK_URL".to_owned(), urls.join(" ")));
    }
    if withheld {
        vars.push((WITHHELD_VAR.to_owned(), "1".to_owned()));
    }
    // Root's trusted owners (see the file backend's `trust`), so that a nested dlock uses the same
    // directory; from the environment or the configuration file they reach it without help.
    if matches.value_source("trust_owners") == Some(CommandLine) {
        let uids: Vec<String> = global.trust_owners.iter().map(u32::to_string).collect();
        vars.push(("DLOCK_TRUST_OWNER".to_owned(), uids.join(",")));
    }
    if let Some(path) = &global.password_file {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        vars.push(("DLOCK_PASSWORD_FILE".to_owned(), path.display().to_string()));
    }
    global.place = vars;
}

/// A relative lock directory as the absolute one it names here, as the command may change
/// directory before it runs dlock.
fn absolute(url: &str) -> String {
    if url.starts_with("file://") || url.contains("://") || url.is_empty() {
        return url.to_owned();
    }
    std::path::absolute(Path::new(url))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| url.to_owned())
}
