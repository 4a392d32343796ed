//! What the man pages say beyond the clap definition: each page's synopsis, examples, the
//! environment, the exit statuses and related pages. Each paragraph is one line here, so man fills
//! it to the reader's width.

/// One page: `dlock` or a subcommand.
pub struct Page {
    /// The usage lines (`run` shows `-- COMMAND`, which clap's synopsis leaves out).
    pub synopsis: &'static [&'static str],
    /// Command lines and what each does.
    pub examples: &'static [(&'static str, &'static str)],
    /// Whether the page has the variables a command run under the lock receives.
    pub runs_a_command: bool,
}

/// The page for `dlock` (`None`) or one of its subcommands; `None` for a hidden one.
pub fn page(subcommand: Option<&str>) -> Option<Page> {
    Some(match subcommand {
        None => Page {
            synopsis: &[
                "dlock [GLOBAL OPTIONS] run [OPTIONS] NAME... -- COMMAND [ARGS...]",
                "dlock [GLOBAL OPTIONS] status|list|hold|release|config|generate ...",
            ],
            examples: RUN_EXAMPLES,
            runs_a_command: true,
        },
        Some("run") => Page {
            synopsis: &[
                "dlock run [OPTIONS] NAME... -- COMMAND [ARGS...]",
                "dlock run [OPTIONS] NAME... -c SHELL_COMMAND",
            ],
            examples: RUN_EXAMPLES,
            runs_a_command: true,
        },
        Some("status") => Page {
            synopsis: &["dlock status [OPTIONS] NAME"],
            examples: &[
                ("dlock status deploy", "Who holds the lock deploy, since when and why; exit status 0 when held, 1 when free."),
                ("dlock -b redis status --json deploy | jq .holders", "The same as JSON, for a script."),
                ("dlock status nightly --ran-within 25h", "A monitoring check (Nagios, Icinga): one line, and exit status 0 (OK) when the last success of nightly ended within 25 hours, 1 (WARNING) when longer ago, 2 (CRITICAL) when none is on record, 3 (UNKNOWN) when the store cannot be asked."),
            ],
            runs_a_command: false,
        },
        Some("list") => Page {
            synopsis: &["dlock list [OPTIONS] [PREFIX]"],
            examples: &[
                ("dlock list", "Every lock held in the default lock directory, a line per holder."),
                ("dlock -u zk://zk1:2181,zk2:2181 list deploy/", "The locks held under deploy/ on ZooKeeper (the URL names the backend)."),
            ],
            runs_a_command: false,
        },
        Some("hold") => Page {
            synopsis: &["dlock hold [OPTIONS] NAME... || exit 1", "v=$(dlock hold --print-env [OPTIONS] NAME...) || exit 1; eval \"$v\""],
            examples: &[
                ("dlock hold -n deploy || exit 1", "In a shell script: hold deploy for the rest of the script, or stop if it is busy."),
                ("v=$(dlock hold --print-env -w 5m deploy) || exit 1; eval \"$v\"", "The same, waiting up to 5 minutes, with the lock's variables ($DLOCK_TOKEN ...). Never eval \"$(dlock hold ...)\" without --print-env: eval of nothing succeeds, so the script would go on without the lock. With --print-env a failure prints exit N (N its status), so even eval \"$(dlock hold --print-env NAME)\" ends the script, unless dlock is killed before it prints anything."),
                ("dlock release deploy", "Later in the same script: give the lock up early."),
            ],
            runs_a_command: false,
        },
        Some("release") => Page {
            synopsis: &["dlock release NAME", "dlock release --force NAME"],
            examples: &[
                ("dlock release deploy", "Give up what this shell took with dlock hold."),
                ("dlock -b redis release --force deploy", "Break the lock deploy for whoever holds it, after its holder died."),
            ],
            runs_a_command: false,
        },
        Some("config") => Page {
            synopsis: &["dlock [GLOBAL OPTIONS] config"],
            examples: &[
                ("dlock config", "The settings in force, a line each: where it came from (a configuration file and line, a DLOCK_* variable, an option), a tab, then key = value; no password shown."),
                ("dlock -u redis://10.0.0.5:6379 config", "The backend the URL names (redis), and the URL, with the rest of the settings."),
            ],
            runs_a_command: false,
        },
        Some("generate") => Page {
            synopsis: &["dlock generate --out DIR"],
            examples: &[
                ("dlock generate --out ~/.local/share/dlock", "After cargo install: write the man pages (man/) and the bash, zsh and fish completions (completions/) of this build of dlock."),
                ("man ~/.local/share/dlock/man/dlock-run.1", "Read one of those pages."),
            ],
            runs_a_command: false,
        },
        Some(_) => return None,
    })
}

const RUN_EXAMPLES: &[(&str, &str)] = &[
    ("dlock run -n -q backup -- /usr/local/bin/backup", "From cron: run the backup unless another one is running on this host; if one is, exit with 75 and print nothing (-q), so cron sends no mail."),
    ("dlock -b redis run -n -q --min-hold 1h nightly -- ./nightly.sh", "From the same crontab line on many hosts, with DLOCK_URL or /etc/dlock/config naming the Redis server: the first host to fire runs the job; the others, and any host that fires up to an hour later (a late clock, a slow cron), exit with 75 and print nothing."),
    ("dlock run -n -q --min-hold 24h --release-on-failure nightly -- ./nightly.sh", "From cron every 10 minutes on every host, the servers in /etc/dlock/config: the job runs about once a day, on whichever host comes first; a failure frees the lock at once, so the next firing, anywhere, tries again."),
    ("dlock -u etcd://etcd1:2379,etcd2:2379,etcd3:2379 run -w 10m deploy -- ./deploy.sh", "A CI deploy: wait up to ten minutes for the one before it (the URL names the backend: no -b etcd)."),
    ("dlock run -s db-read -- ./report.sh", "Shared: any number of readers at once, never alongside an exclusive holder."),
    ("dlock run -l 4 encoder -- ffmpeg -i in.mp4 out.webm", "At most four encoders at once."),
];

/// Variables dlock reads that no option names.
pub const READ_ALSO: &[(&str, &str)] = &[
    ("DLOCK_CONFIG", "The configuration file to read instead of $XDG_CONFIG_HOME/dlock/config (or ~/.config/dlock/config), after /etc/dlock/config; empty for no file at all. See FILES."),
    ("DLOCK_HELD", "Set by dlock for its command: the locks a parent dlock holds, so a nested dlock asking for one of them runs at once instead of waiting for itself."),
    ("SHELL", "The shell that runs -c's command (/bin/sh when unset or empty)."),
];

/// What the command run under the lock receives.
pub const RECEIVED: &[(&str, &str)] = &[
    ("DLOCK_BACKEND", "The backend the lock is held on."),
    ("DLOCK_NAME, DLOCK_TOKEN", "The lock's name and its fencing token, a number that grows with each acquisition: pass it to what the command writes so a stale holder's writes can be refused."),
    ("DLOCK_LOCKS, DLOCK_NAME_1, DLOCK_TOKEN_1, ...", "With several names (or --tree): how many, and each name and token in sorted order."),
    ("DLOCK_HELD", "The claims a nested dlock checks (see above)."),
    ("DLOCK_URL", "Where the locks are, when given by --url or DLOCK_URL: the directory as an absolute path, the URLs without their passwords and secret query values (users kept), so that a nested dlock uses its parent's place unless its own command line says otherwise. Not set when the place came from the configuration file, which a nested dlock reads again. A password typed into the URL is not passed on (DLOCK_PASSWORD_WITHHELD=1 says so): use --password-file."),
    ("DLOCK_PASSWORD_FILE", "The password file, as an absolute path, when dlock was given one."),
    ("DLOCK_TRUST_OWNER", "The owners --trust-owner named on the command line, as uids separated by commas, so that a nested dlock run by root uses the same lock directory."),
];

/// The configuration files and the directories dlock keeps, for FILES.
pub const FILES: &[(&str, &str)] = &[
    ("/run/lock/dlock-UID (root: /run/dlock-0)", "The file backend's default lock directory, one lock file per name (NAME.lock) and beside it the record of its last runs (NAME.runs); made mode 0700 by the first run, and refused if another user made it first. Root refuses a --url directory, or one above it, that another user owns or may write without the sticky bit, and a lock file or NAME.runs another user owns or that group or others may write, unless --trust-owner names their owner. A reboot empties it, tokens and last runs too (see --url for a directory on disk)."),
    ("/run/lock/dlock-holds-UID (root: /run/dlock-holds-0)", "Where dlock release finds the keepers of dlock hold: a socket per held lock, private to the user."),
    ("/etc/dlock/config, then $XDG_CONFIG_HOME/dlock/config (or ~/.config/dlock/config, or $DLOCK_CONFIG)", "Both are read, the system's first: each key comes from the more specific file that sets it, so a user's file adds to the system's and replaces only the keys it sets. backend and url go together: a file that sets url also sets the backend its scheme names, and one that sets backend alone keeps the servers below only if they are that backend's. Each line is key = value, where the key is a DLOCK_* variable's name without DLOCK_, in lower case with - for _ (backend, url, password-file, connect-timeout, wait, ttl...); # at the start of a line or after white space starts a comment (quote a value that holds \" #\"). url may come more than once, and each url may list several servers. An option on the command line beats its variable, and a variable beats the files; dlock config shows what is in force and where each setting came from, dlock -v names the files read. A line dlock cannot read is a usage error (64) naming the file and line. The file must belong to the user or root and be writable by nobody else; a relative password-file in it is relative to its directory."),
];

/// Related pages, all of which exist on a system with dlock and util-linux.
pub const SEE_ALSO: &[&str] = &["flock(1)", "etcdctl(1)", "crontab(5)"];
