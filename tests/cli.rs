//! The command-line contract: usage errors, help, and the generated completions and man pages.

use crate::support::*;

#[test]
fn bad_input_exits_64_with_one_line_naming_the_problem() {
    let cases: &[(&[&str], &str)] = &[
        (&["run", "", "--", "true"], "lock name is empty"),
        (&["run", "a\nb", "--", "true"], "control character"),
        (&["run", "a\u{1}b", "--", "true"], "control character"),
        (&["run", &"x".repeat(513), "--", "true"], "513 bytes"),
        (&["run", "--limit", "0", "n", "--", "true"], "--limit"),
        (&["run", "--wait", "soon", "n", "--", "true"], "--wait"),
        (&["run", "--ttl", "5parsecs", "n", "--", "true"], "--ttl"),
        (
            &["run", "--kill-after", "x", "n", "--", "true"],
            "--kill-after",
        ),
        (
            &["run", "--wait", "1s", "--no-wait", "n", "--", "true"],
            "--no-wait",
        ),
        (&["--backend", "etcd", "run", "n", "--", "true"], "etcd"),
        (&["run", "n", "true"], "missing `--`"),
        (&["run", "n"], "missing `--`"),
        (&["run", "n", "--"], "missing the command to run after `--`"),
        (&["frobnicate"], "frobnicate"),
    ];
    let dir = LockDir::new();
    for (args, needle) in cases {
        let out = output(dir.dlock(args));
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
        assert!(err.starts_with("dlock: "), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
    }
    // Nothing was created for any of them.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A mistyped command line gets a suggestion that names only real subcommands and options, never
/// one that would lock a typo (`dlock rnu job` is not `dlock run rnu job`) or lock a subcommand's
/// name (`dlock -n run job` is not `dlock run -n run job`), and never prints a password back.
#[test]
fn typos_suggest_real_subcommands_and_options_never_a_lock_or_a_password() {
    let cases: &[(&[&str], &str)] = &[
        (&["rnu", "job", "--", "true"], "did you mean 'run'?"),
        (&["stauts", "job"], "did you mean 'status'?"),
        (&["relase", "job"], "did you mean 'release'?"),
        (
            &["run", "--no-wiat", "job", "--", "true"],
            "did you mean '--no-wait'?",
        ),
        (&["list", "--jso"], "did you mean '--json'?"),
        (
            &["-n", "run", "job", "--", "true"],
            "options of a subcommand go after it: dlock run -n job -- true",
        ),
        (
            &["--wait", "3", "run", "job", "--", "true"],
            "options of a subcommand go after it: dlock run --wait 3 job -- true",
        ),
        (
            &["-w3", "run", "job", "--", "true"],
            "options of a subcommand go after it: dlock run -w3 job -- true",
        ),
        // flock's order, without `run`: the line with it.
        (
            &["job", "--", "true"],
            "to run a command under a lock, say: dlock run job -- true",
        ),
        (
            &["-n", "job", "--", "true"],
            "to run a command under a lock, say: dlock run -n job -- true",
        ),
        (
            &[
                "-b",
                "redis",
                "-u",
                "redis://:Secr3t@h:1",
                "rt-x",
                "--",
                "true",
            ],
            "say: dlock -b redis -u 'redis://***@h:1' run rt-x -- true",
        ),
        (
            &[
                "-b",
                "redis",
                "--url=redis://u:Secr3t@h:1",
                "rt-x",
                "--",
                "true",
            ],
            "say: dlock -b redis '--url=redis://u:***@h:1' run rt-x -- true",
        ),
    ];
    for (args, needle) in cases {
        let mut cmd = dlock();
        cmd.args(*args);
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
        assert!(
            !err.contains("Secr3t"),
            "{args:?}: a password printed: {err}"
        );
        assert!(
            !err.contains("run rnu") && !err.contains("run -n run") && !err.contains("run run"),
            "{args:?}: a suggestion that locks a typo or a subcommand: {err}"
        );
    }
}

#[test]
fn help_lists_the_exit_codes_and_exits_0() {
    let out = output({
        let mut c = dlock();
        c.args(["run", "--help"]);
        c
    });
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    for needle in [
        "--no-wait",
        "--limit",
        "--kill-after",
        "DLOCK_WAIT",
        "DLOCK_NO_WAIT",
        "--command <SHELL_COMMAND>",
        "--nonblock",
        "--timeout",
    ] {
        assert!(help.contains(needle), "{needle} missing from help");
    }
    let top = output({
        let mut c = dlock();
        c.arg("--help");
        c
    });
    assert!(
        stdout(&top).contains("79"),
        "exit codes missing from --help"
    );
}

#[test]
fn long_help_ends_with_the_exit_statuses_and_the_man_page_not_a_backend_s_layout() {
    let out = output({
        let mut c = dlock();
        c.arg("--help");
        c
    });
    assert_eq!(code(&out), 0);
    let help = stdout(&out);
    assert!(
        !help.contains("dlock:{NAME}"),
        "a backend's key layout belongs in the README, not --help: {help}"
    );
    let statuses = help.find("Exit status:").expect("exit statuses in --help");
    let see = help
        .find("The manual: man dlock")
        .expect("a pointer to the man page");
    assert!(statuses < see, "{help}");
    assert!(
        help[see..].trim_end().lines().count() <= 2,
        "--help ends with the pointer: {help}"
    );
}

/// Every help dlock prints, as its arguments.
const HELPS: &[&[&str]] = &[
    &["-h"],
    &["--help"],
    &["run", "-h"],
    &["run", "--help"],
    &["hold", "-h"],
    &["hold", "--help"],
    &["release", "--help"],
    &["status", "--help"],
    &["list", "--help"],
];

/// `text` without a terminal's colours and carriage returns.
fn plain(text: &str) -> String {
    let mut plain = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An SGR sequence: ESC [ ... m.
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else if c != '\r' {
            plain.push(c);
        }
    }
    plain
}

/// The widest line of `text` as a terminal shows it, in characters.
fn widest(text: &str) -> usize {
    plain(text)
        .lines()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
}

#[test]
fn help_fits_80_columns_piped_and_h_fits_a_screen() {
    for args in HELPS {
        for columns in [None, Some("80"), Some("200")] {
            let mut cmd = dlock();
            cmd.args(*args).env_remove("LINES");
            match columns {
                Some(c) => cmd.env("COLUMNS", c),
                None => cmd.env_remove("COLUMNS"),
            };
            let out = output(cmd);
            assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
            let help = stdout(&out);
            assert!(
                widest(&help) <= 80,
                "{args:?} with COLUMNS={columns:?} is {} wide:\n{help}",
                widest(&help)
            );
        }
    }
    for (args, most) in [
        (&["-h"][..], 31),
        (&["run", "-h"], 40),
        (&["hold", "-h"], 40),
    ] {
        let out = output({
            let mut cmd = dlock();
            cmd.args(args);
            cmd
        });
        let help = stdout(&out);
        let lines = help.trim_end().lines().count();
        assert!(lines <= most, "{args:?}: {lines} lines:\n{help}");
        // The details are in --help, not in -h: no variables, no URL grammar.
        assert!(!help.contains("[env:"), "{args:?}: {help}");
        assert!(!help.contains("redis+sentinel://"), "{args:?}: {help}");
    }
    // The hand-laid exit-status table comes through clap's wrapping as laid: each row's meaning
    // starts in the column after the label.
    let help = stdout(&output({
        let mut cmd = dlock();
        cmd.args(["run", "--help"]).env("COLUMNS", "80");
        cmd
    }));
    let table = &help[help.find("Exit status:").expect("the table")..];
    assert!(
        table.contains("\n  75                 the lock is busy"),
        "{table}"
    );
    let rows = table
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("  status:"));
    for line in rows {
        assert!(
            line.len() > 21 && line[..21].ends_with(' ') && !line[21..].starts_with(' '),
            "a row's line out of its column: {line:?}\n{table}"
        );
    }
}

#[test]
fn help_on_a_terminal_is_at_most_80_columns_wide() {
    for cols in [80, 200] {
        for args in ["--help", "run --help", "-h", "run -h"] {
            let mut child = on_a_terminal(&format!(
                "unset COLUMNS LINES; stty cols {cols} rows 50; {} {args}",
                dlock_bin()
            ));
            assert!(wait_exit(&mut child, std::time::Duration::from_secs(30)).success());
            let mut help = String::new();
            std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut help).unwrap();
            assert!(plain(&help).contains("Usage: dlock"), "{args}: {help}");
            assert!(
                widest(&help) <= 80,
                "{args} on a {cols}-column terminal is {} wide:\n{help}",
                widest(&help)
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(all(
        feature = "redis",
        feature = "zk",
        feature = "etcd",
        feature = "postgres",
        feature = "mysql"
    )),
    ignore = "the committed pages and completions are the default build's"
)]
fn committed_completions_and_man_pages_are_fresh() {
    let fresh = tempfile::tempdir().unwrap();
    let out = output({
        let mut c = dlock();
        c.args(["generate", "--out"]).arg(fresh.path());
        c
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for sub in ["completions", "man"] {
        let mut names: Vec<_> = std::fs::read_dir(fresh.path().join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert!(!names.is_empty());
        for name in names {
            let want = std::fs::read(fresh.path().join(sub).join(&name)).unwrap();
            let have = std::fs::read(repo.join(sub).join(&name)).unwrap_or_default();
            assert!(
                want == have,
                "{sub}/{} is stale: run `cargo run -- generate --out .`",
                name.to_string_lossy()
            );
        }
    }
    let pages: Vec<_> = std::fs::read_dir(fresh.path().join("man"))
        .unwrap()
        .collect();
    assert!(pages.len() >= 5, "dlock.1 plus one page per subcommand");
}

/// Every URL names its store: `-u` alone selects the backend by the scheme (a path: the file
/// backend), and `-b` with it is optional. A store that is down is then 69 from that backend, not
/// 64 from the file backend; a `-b` that contradicts the URL is 64 naming both.
#[test]
fn the_backend_comes_from_the_url_s_scheme() {
    let (_refusing, port) = refusing_port();
    let cases = [
        ("redis", format!("redis://127.0.0.1:{port}")),
        ("redis", format!("rediss://127.0.0.1:{port}")),
        ("redis", format!("redis+sentinel://127.0.0.1:{port}/main")),
        ("redis", format!("redis+cluster://127.0.0.1:{port}")),
        ("redis", format!("rediss+cluster://127.0.0.1:{port}")),
        ("zk", format!("zk://127.0.0.1:{port}")),
        ("etcd", format!("etcd://127.0.0.1:{port}")),
        ("etcd", format!("etcds://127.0.0.1:{port}")),
        ("postgres", format!("postgres://u@127.0.0.1:{port}/db")),
        ("postgres", format!("postgresql://u@127.0.0.1:{port}/db")),
        ("mysql", format!("mysql://u@127.0.0.1:{port}/db")),
        ("mysql", format!("mariadb://u@127.0.0.1:{port}/db")),
    ];
    for (backend, url) in &cases {
        for with_b in [false, true] {
            let mut cmd = dlock();
            if with_b {
                cmd.args(["-b", backend]);
            }
            cmd.args([
                "-u",
                url,
                "--connect-timeout",
                "500ms",
                "run",
                "n",
                "--",
                "true",
            ]);
            let out = output_within(cmd, std::time::Duration::from_secs(60));
            let err = stderr(&out);
            assert_eq!(code(&out), 69, "-b given: {with_b}: {url}: {err}");
            assert!(!err.contains("file backend"), "{url}: {err}");
        }
        let other = if *backend == "zk" { "etcd" } else { "zk" };
        let out = output({
            let mut cmd = dlock();
            cmd.args(["-b", other, "-u", url, "run", "n", "--", "true"]);
            cmd
        });
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        assert!(
            stderr(&out).starts_with(&format!("dlock: --backend {other} does not fit --url "))
                && stderr(&out).contains(&format!(", a {backend} URL")),
            "{}",
            stderr(&out)
        );
        // `dlock config` shows the backend the scheme named.
        let out = output({
            let mut cmd = dlock();
            cmd.args(["-u", url, "config"]);
            cmd
        });
        assert_eq!(
            stdout(&out),
            format!("the scheme of --url\tbackend = {backend}\n--url\turl = {url}\n"),
            "{}",
            stderr(&out)
        );
    }
    // The file backend: a directory, or a file:// URL, with and without -b.
    let dir = LockDir::new();
    for url in [
        dir.path().display().to_string(),
        format!("file://{}", dir.path().display()),
    ] {
        for with_b in [false, true] {
            let mut cmd = dlock();
            if with_b {
                cmd.args(["-b", "file"]);
            }
            cmd.args(["-u", &url, "-v", "run", "n", "--", "true"]);
            let out = output(cmd);
            assert_eq!(code(&out), 0, "{url}: {}", stderr(&out));
            assert!(
                stderr(&out).contains(&format!("using file:{}", dir.path().display())),
                "{}",
                stderr(&out)
            );
        }
        let out = output({
            let mut cmd = dlock();
            cmd.args(["-b", "redis", "-u", &url, "run", "n", "--", "true"]);
            cmd
        });
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("does not fit --url") && stderr(&out).contains("a file URL"),
            "{}",
            stderr(&out)
        );
    }
    // The environment's pair alike: DLOCK_BACKEND that contradicts DLOCK_URL names both.
    let out = output({
        let mut cmd = dlock();
        cmd.env("DLOCK_BACKEND", "zk")
            .env("DLOCK_URL", &cases[0].1)
            .args(["run", "n", "--", "true"]);
        cmd
    });
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("dlock: DLOCK_BACKEND zk does not fit DLOCK_URL redis://"),
        "{}",
        stderr(&out)
    );
}

/// `generate --out DIR` replaces what is at its files' paths, never writing through a symbolic
/// link (another user's, in a directory they can write, where root runs it), and refuses a
/// symbolic link in place of its `man` or `completions` directory.
#[test]
fn generate_never_writes_through_a_symbolic_link() {
    let out = tempfile::tempdir().unwrap();
    let victim = out.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::create_dir_all(out.path().join("completions")).unwrap();
    std::fs::create_dir_all(out.path().join("man")).unwrap();
    let links = [
        out.path().join("completions/dlock.bash"),
        out.path().join("man/dlock.1"),
    ];
    for link in &links {
        std::os::unix::fs::symlink(&victim, link).unwrap();
    }
    let generate = |dir: &std::path::Path| {
        output({
            let mut c = dlock();
            c.args(["generate", "--out"]).arg(dir);
            c
        })
    };
    let done = generate(out.path());
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for link in &links {
        let meta = std::fs::symlink_metadata(link).unwrap();
        assert!(meta.is_file(), "{} replaced by a file", link.display());
    }
    // A linked directory: refused, nothing written where it points.
    let other = tempfile::tempdir().unwrap();
    let elsewhere = other.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, other.path().join("man")).unwrap();
    let refused = generate(other.path());
    assert_ne!(code(&refused), 0);
    assert!(
        stderr(&refused).contains("symbolic link"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}
