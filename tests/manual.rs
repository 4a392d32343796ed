//! The man pages and shell completions `dlock generate` writes (and the repository commits): the
//! sections a reader looks for, and completions that offer what fits where the cursor is.

use std::collections::BTreeMap;

use crate::support::*;

/// Every file `dlock generate` writes, by path under its output (`man/dlock.1`).
fn generated() -> BTreeMap<String, String> {
    let out = tempfile::tempdir().unwrap();
    let result = output({
        let mut cmd = dlock();
        cmd.args(["generate", "--out"]).arg(out.path());
        cmd
    });
    assert_eq!(code(&result), 0, "{}", stderr(&result));
    let mut files = BTreeMap::new();
    for dir in ["man", "completions"] {
        for entry in std::fs::read_dir(out.path().join(dir)).unwrap() {
            let entry = entry.unwrap();
            let text = std::fs::read_to_string(entry.path()).unwrap();
            files.insert(
                format!("{dir}/{}", entry.file_name().to_string_lossy()),
                text,
            );
        }
    }
    files
}

#[test]
fn every_man_page_has_examples_environment_exit_status_and_see_also() {
    let files = generated();
    let pages: Vec<(&String, &String)> = files
        .iter()
        .filter(|(path, _)| path.starts_with("man/"))
        .collect();
    assert_eq!(pages.len(), 8, "dlock.1 and one per subcommand");
    for (path, page) in &pages {
        for section in [
            ".SH SYNOPSIS",
            ".SH EXAMPLES",
            ".SH ENVIRONMENT",
            ".SH \"EXIT STATUS\"",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(page.contains(section), "{path} has no {section}");
        }
        assert!(!page.contains(".SH EXTRA"), "{path}");
        assert!(page.contains("flock(1)"), "{path}");
        assert!(page.contains("DLOCK_URL"), "{path}");
        assert!(page.contains("DLOCK_PASSWORD_FILE"), "{path}");
        // Every dlock page referred to exists.
        for (at, _) in page.match_indices("dlock\\-") {
            let name: String = page[at..]
                .replace("\\-", "-")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if page[at..].replace("\\-", "-")[name.len()..].starts_with("(1)") {
                assert!(
                    files.contains_key(&format!("man/{name}.1")),
                    "{path}: {name}(1)"
                );
            }
        }
    }
    let run = &files["man/dlock-run.1"];
    assert!(
        run.contains("\\-\\- COMMAND"),
        "the synopsis shows `-- COMMAND`"
    );
    assert!(run.contains("DLOCK_TOKEN"), "what the command receives");
    let generate = &files["man/dlock-generate.1"];
    assert!(
        generate.contains("\\-\\-out") && generate.contains("completions"),
        "how to get the man pages and completions after cargo install"
    );
    assert!(
        files["man/dlock.1"].contains("dlock\\-generate(1)"),
        "dlock(1) points to dlock-generate(1)"
    );
}

#[test]
fn completions_offer_subcommands_lock_names_and_commands() {
    let files = generated();
    for shell in [
        "completions/dlock.bash",
        "completions/_dlock",
        "completions/dlock.fish",
    ] {
        let text = &files[shell];
        assert!(text.contains("generate"), "{shell} offers generate");
        assert!(
            text.contains("list; \"$0\" \"$@\" list --runs")
                && text.contains("--connect-timeout 500ms 2>/dev/null"),
            "{shell}: lock names held and run, asked for with a bound"
        );
    }
    let zsh = &files["completions/_dlock"];
    assert!(
        zsh.contains("*' -- '*") && zsh.contains("_normal"),
        "zsh: the command after --"
    );
    assert!(
        zsh.contains(":_dlock_lock_names'"),
        "zsh: NAME completes lock names"
    );
    let fish = &files["completions/dlock.fish"];
    let wait = fish
        .lines()
        .find(|l| l.contains("__fish_dlock_using_subcommand run") && l.contains("-l wait"))
        .expect("fish: run's --wait");
    assert!(
        wait.contains(" -f"),
        "fish: --wait completes no file names: {wait}"
    );
    assert!(
        fish.contains("__fish_complete_subcommand"),
        "fish: the command after --"
    );
}

/// What bash offers for `words` (the last is the word being completed), with the committed
/// script and a `dlock` on PATH that lists the locks in `locks`.
fn bash_offers(words: &[&str], locks: &LockDir) -> Vec<String> {
    bash_offers_with(words, locks.path(), locks.path())
}

/// `bash_offers` with DLOCK_URL set to `url`, in the directory `cwd`.
fn bash_offers_with(words: &[&str], url: &std::path::Path, cwd: &std::path::Path) -> Vec<String> {
    let script = format!(
        "source '{}/completions/dlock.bash'\n\
         COMP_WORDS=({})\nCOMP_CWORD={}\n\
         _dlock_dynamic dlock \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        env!("CARGO_MANIFEST_DIR"),
        words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        words.len() - 1
    );
    let bin = std::path::Path::new(dlock_bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        crate::support::programs::listed_path().to_string_lossy()
    );
    let out = output({
        let mut cmd = program("bash");
        cmd.arg("-c")
            .arg(script)
            .env("PATH", path)
            .env("DLOCK_CONFIG", "")
            .env("DLOCK_URL", url)
            .current_dir(cwd);
        cmd
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // printf prints one empty line for no candidates.
    stdout(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_held_lock_names_commands_after_dashes_and_no_files_for_wait() {
    let locks = LockDir::new();
    let mut holder = locks.hold_in_background("nightly-backup");

    assert_eq!(
        bash_offers(&["dlock", "status", "nigh"], &locks),
        ["nightly-backup"]
    );
    assert_eq!(
        bash_offers(&["dlock", "run", "-n", "nigh"], &locks),
        ["nightly-backup"]
    );
    assert!(
        bash_offers(&["dlock", "run", "-w", "nigh"], &locks)
            .iter()
            .all(|w| !w.starts_with("nightly-backup")),
        "-w offers no file names"
    );
    let commands = bash_offers(&["dlock", "run", "x", "--", "tru"], &locks);
    assert!(commands.iter().any(|c| c == "true"), "{commands:?}");
    assert_eq!(bash_offers(&["dlock", "gen"], &locks), ["generate"]);

    signal(holder.id(), libc::SIGTERM);
    wait_exit(&mut holder, std::time::Duration::from_secs(20));
}

#[test]
fn bash_lock_names_honour_the_line_s_backend_keep_spaces_and_give_up_soon() {
    let locks = LockDir::new();
    let elsewhere = LockDir::new();
    let mut holders = [
        locks.hold_in_background("nightly-backup"),
        locks.hold_in_background("with space"),
    ];
    // DLOCK_URL names another directory: the -u typed on the line wins.
    let typed = locks.path().to_str().unwrap();
    let offered = bash_offers_with(
        &["dlock", "-u", typed, "status", "nigh"],
        elsewhere.path(),
        elsewhere.path(),
    );
    let spaced = bash_offers(&["dlock", "status", "wi"], &locks);
    let without = bash_offers_with(
        &["dlock", "status", "nigh"],
        elsewhere.path(),
        elsewhere.path(),
    );
    for holder in &mut holders {
        signal(holder.id(), libc::SIGTERM);
        wait_exit(holder, std::time::Duration::from_secs(20));
    }
    assert_eq!(offered, ["nightly-backup"]);
    assert!(without.is_empty(), "{without:?}");
    assert_eq!(spaced, ["with\\ space"], "one candidate, quoted");

    // A server that takes the connection and never answers: the TAB gives up well before
    // dlock's 5 s default connect timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let started = std::time::Instant::now();
    let offered = bash_offers_with(
        &["dlock", "-b", "redis", "-u", &url, "status", "x"],
        locks.path(),
        locks.path(),
    );
    let took = started.elapsed();
    assert!(offered.is_empty(), "{offered:?}");
    assert!(took < std::time::Duration::from_millis(2500), "{took:?}");
}

/// What fish's completion (completions/dlock.fish) offers for the command line `line`, with
/// DLOCK_URL set to `url`: one candidate a line, as `complete -C` prints them.
fn fish_offers(line: &str, url: &std::path::Path) -> Vec<String> {
    let script = format!(
        "source '{}/completions/dlock.fish'; complete -C '{line}'",
        env!("CARGO_MANIFEST_DIR"),
    );
    let bin = std::path::Path::new(dlock_bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        crate::support::programs::listed_path().to_string_lossy()
    );
    let out = output({
        let mut cmd = program("fish");
        cmd.args(["--no-config", "-c"])
            .arg(script)
            .env("PATH", path)
            .env("DLOCK_CONFIG", "")
            .env("DLOCK_URL", url);
        cmd
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').next().unwrap_or(l).to_owned())
        .collect()
}

/// fish offers the lock names of the backend the line names, keeps a name with a space whole,
/// and gives up on a server that does not answer well before dlock's connect timeout.
#[test]
fn fish_lock_names_honour_the_line_s_backend_keep_spaces_and_give_up_soon() {
    let locks = LockDir::new();
    let elsewhere = LockDir::new();
    let mut holders = [
        locks.hold_in_background("nightly-backup"),
        locks.hold_in_background("with space"),
    ];
    let typed = locks.path().to_str().unwrap().to_owned();
    let offered = fish_offers(&format!("dlock -u {typed} status nigh"), elsewhere.path());
    let spaced = fish_offers("dlock status wi", locks.path());
    let without = fish_offers("dlock status nigh", elsewhere.path());
    for holder in &mut holders {
        signal(holder.id(), libc::SIGTERM);
        wait_exit(holder, std::time::Duration::from_secs(20));
    }
    assert_eq!(offered, ["nightly-backup"]);
    assert!(without.is_empty(), "{without:?}");
    assert_eq!(spaced, ["with space"], "one candidate");

    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let started = std::time::Instant::now();
    let offered = fish_offers(&format!("dlock -b redis -u {url} status x"), locks.path());
    let took = started.elapsed();
    assert!(offered.is_empty(), "{offered:?}");
    assert!(took < std::time::Duration::from_millis(2500), "{took:?}");
}

/// The README's two install lines, run as the user who ran `cargo install` (a HOME of the test's
/// own, `dlock` in `~/.cargo/bin`), and the lines `dlock generate` prints itself: after either,
/// `man` finds dlock's pages and bash's completion is where bash-completion loads it.
#[test]
fn the_install_lines_put_the_man_pages_where_man_finds_them() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| l.contains("dlock generate -q --out \"$d\""))
        .expect("the README's install lines");
    let from_readme = format!("{}\n{}", lines[at], lines[at + 1]);
    let generated = tempfile::tempdir().unwrap();
    let said = output({
        let mut cmd = dlock();
        cmd.args(["generate", "--out"]).arg(generated.path());
        cmd
    });
    assert_eq!(code(&said), 0, "{}", stderr(&said));
    let printed: Vec<String> = stdout(&said)
        .lines()
        .filter_map(|l| l.strip_prefix("  ").map(str::to_owned))
        .collect();
    assert_eq!(printed.len(), 4, "{}", stdout(&said));
    for script in [from_readme, printed.join("\n")] {
        let home = tempfile::tempdir().unwrap();
        let bin = home.path().join(".cargo/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(dlock_bin(), bin.join("dlock")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            crate::support::programs::listed_path().to_string_lossy()
        );
        let run = |program_name: &str, args: &[&str]| {
            let mut cmd = program(program_name);
            cmd.args(args)
                .env("HOME", home.path())
                .env("PATH", &path)
                .env("DLOCK_CONFIG", "")
                .env_remove("MANPATH");
            output(cmd)
        };
        let installed = run("sh", &["-e", "-c", &script]);
        assert_eq!(code(&installed), 0, "{script}: {}", stderr(&installed));
        let found = run("man", &["-w", "dlock-run"]);
        let want = home.path().join(".cargo/share/man/man1/dlock-run.1");
        assert_eq!(
            stdout(&found).trim(),
            want.to_str().unwrap(),
            "{script}: {}",
            stderr(&found)
        );
        let completion = home
            .path()
            .join(".local/share/bash-completion/completions/dlock");
        assert!(completion.is_file(), "{script}");
    }
}

/// What bash offers at the end of `line` as bash itself calls the completion: COMP_LINE and
/// COMP_POINT set as well as COMP_WORDS and COMP_CWORD (the line split at blanks, and an empty
/// word being completed after a trailing blank), with DLOCK_URL naming the directory `url`.
fn bash_offers_for_line(line: &str, url: &std::path::Path) -> Vec<String> {
    let mut words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
    if line.ends_with(' ') {
        words.push("");
    }
    let script = format!(
        "source '{}/completions/dlock.bash'\n\
         COMP_LINE='{line}'\nCOMP_POINT={}\n\
         COMP_WORDS=({})\nCOMP_CWORD={}\n\
         _dlock_dynamic dlock \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        env!("CARGO_MANIFEST_DIR"),
        line.len(),
        words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        words.len() - 1
    );
    let bin = std::path::Path::new(dlock_bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        crate::support::programs::listed_path().to_string_lossy()
    );
    let out = output({
        let mut cmd = program("bash");
        cmd.arg("-c")
            .arg(script)
            .env("PATH", path)
            .env("DLOCK_CONFIG", "")
            .env("DLOCK_URL", url)
            .current_dir(url);
        cmd
    });
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// With `-b redis -u URL` on the line, bash offers the names of that Redis server's locks, not
/// those of the directory DLOCK_URL names: the lock held now, and one that ran and is free
/// (`list --runs`).
#[test]
fn bash_offers_the_lock_names_of_the_backend_on_the_line_held_and_run() {
    let server = crate::redis::server::RedisServer::start();
    let elsewhere = LockDir::new();
    let mut local = elsewhere.hold_in_background("deploy-local");
    let ready = elsewhere.file("held.ready");
    let script = format!("touch '{}'; exec sleep 30", ready.display());
    let mut held = server
        .dlock(&["run", "deploy-prod", "--", "sh", "-c", &script])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn dlock");
    wait_for_file(&ready, std::time::Duration::from_secs(20));
    let ran = output(server.dlock(&["run", "deploy-nightly", "--", "true"]));
    assert_eq!(code(&ran), 0, "{}", stderr(&ran));
    let url = server.url();
    let offered = bash_offers_for_line(
        &format!("dlock -b redis -u {url} status dep"),
        elsewhere.path(),
    );
    let with_run = bash_offers_for_line(&format!("dlock -u {url} run -n "), elsewhere.path());
    for child in [&mut held, &mut local] {
        signal(child.id(), libc::SIGTERM);
        wait_exit(child, std::time::Duration::from_secs(20));
    }
    assert_eq!(offered, ["deploy-nightly", "deploy-prod"]);
    assert_eq!(with_run, ["deploy-nightly", "deploy-prod"]);
}
