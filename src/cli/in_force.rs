//! `dlock config`: the settings in force and where each came from (a configuration file and line,
//! a DLOCK_* variable, an option), as `git config --list --show-origin` shows git's. The backend
//! and the servers are shown as `resolve` settled them together; no password is shown.

use clap::parser::ValueSource::CommandLine;
use clap::ArgMatches;

use super::config::{key_of, Config};
use super::GlobalArgs;

/// Where the backend and the servers in force were given, for `dlock config`.
#[derive(Debug, Default, Clone)]
pub struct Origins {
    pub backend: String,
    pub urls: Option<String>,
}

/// One setting: where it came from, its key (as the configuration file writes it) and its value.
#[derive(Debug, Clone)]
pub struct Setting {
    pub origin: String,
    pub key: String,
    pub value: String,
}

impl Setting {
    /// `ORIGIN<TAB>key = value`.
    pub fn line(&self) -> String {
        format!("{}\t{} = {}\n", self.origin, self.key, self.value)
    }
}

/// Every setting in force: the backend always, the rest where something sets them.
pub fn settings(
    global: &GlobalArgs,
    matches: &ArgMatches,
    config: &Config,
    origins: &Origins,
) -> Vec<Setting> {
    let mut command = super::parsing_command();
    command.build();
    // The global options, which `dlock config` itself may be given on its command line.
    let global_ids: Vec<String> = command
        .get_arguments()
        .map(|arg| arg.get_id().to_string())
        .collect();
    let mut settings = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let args = command
        .get_arguments()
        .chain(command.get_subcommands().flat_map(|s| s.get_arguments()));
    for arg in args {
        let Some(variable) = arg.get_env().and_then(|v| v.to_str()) else {
            continue;
        };
        if seen.iter().any(|v| v == variable) {
            continue;
        }
        seen.push(variable.to_owned());
        let key = key_of(variable);
        let id = arg.get_id().as_str();
        let (origin, value) = match variable {
            "DLOCK_BACKEND" => (origins.backend.clone(), global.backend.as_str().to_owned()),
            "DLOCK_URL" => match &origins.urls {
                Some(at) => (at.clone(), shown_urls(global)),
                None => continue,
            },
            _ if global_ids.iter().any(|g| g == id)
                && matches.value_source(id) == Some(CommandLine) =>
            {
                let raw: Vec<String> = matches
                    .get_raw(id)
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                (format!("--{}", arg.get_long().unwrap_or(id)), raw.join(" "))
            }
            _ => match std::env::var(variable).ok().filter(|v| !v.is_empty()) {
                Some(value) => (variable.to_owned(), value),
                None => match config.file_value(variable) {
                    Some((value, at)) => (at, value.to_owned()),
                    None => continue,
                },
            },
        };
        settings.push(Setting { origin, key, value });
    }
    settings
}

/// The servers, each without its password (a lock directory as given).
fn shown_urls(global: &GlobalArgs) -> String {
    let shown: Vec<String> = global
        .urls
        .iter()
        .map(|url| {
            if global.backend.descriptor().local {
                url.clone()
            } else {
                crate::url::without_secrets(url).0
            }
        })
        .collect();
    shown.join(" ")
}
