//! A fleet's settings without a command line: the configuration file and its precedence (option >
//! variable > file), several servers in one DLOCK_URL, the password file, and no password reaching
//! the command run under the lock.

use std::path::Path;
use std::process::Command;

use crate::redis::server::RedisServer;
use crate::support::*;

/// `dlock` reading `config` as its configuration file.
fn with_config(config: &Path) -> Command {
    let mut cmd = dlock();
    cmd.env("DLOCK_CONFIG", config);
    cmd
}

/// Where `dlock status` says the lock lives (`file:/dir`), from its first line.
fn location(mut cmd: Command) -> String {
    cmd.args(["status", "x"]);
    let out = output(cmd);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stdout(&out);
    let start = text.find('(').expect("a location") + 1;
    text[start..text.rfind(')').expect("a location")].to_owned()
}

#[test]
fn an_option_beats_its_variable_which_beats_the_configuration_file() {
    let scratch = LockDir::new();
    let [from_file, from_env, from_flag] = ["file", "env", "flag"].map(|d| scratch.file(d));
    for dir in [&from_file, &from_env, &from_flag] {
        std::fs::create_dir(dir).unwrap();
    }
    let config = scratch.file("config");
    std::fs::write(&config, format!("# fleet\nurl = {}\n", from_file.display())).unwrap();

    let shown = |dir: &Path| format!("{}/x.lock", dir.display());
    assert_eq!(location(with_config(&config)), shown(&from_file));
    let mut cmd = with_config(&config);
    cmd.env("DLOCK_URL", &from_env);
    assert_eq!(location(cmd), shown(&from_env));
    let mut cmd = with_config(&config);
    cmd.env("DLOCK_URL", &from_env).arg("--url").arg(&from_flag);
    assert_eq!(location(cmd), shown(&from_flag));
}

#[test]
fn the_user_configuration_is_found_under_xdg_config_home() {
    let scratch = LockDir::new();
    let locks = scratch.file("locks");
    std::fs::create_dir(&locks).unwrap();
    std::fs::create_dir_all(scratch.file("xdg/dlock")).unwrap();
    std::fs::write(
        scratch.file("xdg/dlock/config"),
        format!("url = {}\n", locks.display()),
    )
    .unwrap();
    let mut cmd = dlock();
    cmd.env_remove("DLOCK_CONFIG")
        .env("XDG_CONFIG_HOME", scratch.file("xdg"));
    assert_eq!(location(cmd), format!("{}/x.lock", locks.display()));
}

#[test]
fn a_malformed_configuration_line_is_a_usage_error_naming_file_and_line() {
    let scratch = LockDir::new();
    let config = scratch.file("config");
    for (text, says) in [
        ("backend = file\nurl\n", "line 2: expected `key = value`"),
        ("colour = blue\n", "line 1: unknown key \"colour\""),
        ("\n\nwait = soon\n", "line 3: invalid wait 'soon'"),
        (
            "backend = memcached\n",
            "line 1: invalid backend 'memcached'",
        ),
        (
            "ttl = 5s\nttl = 6s\n",
            "line 2: ttl is already set on line 1",
        ),
        (
            "# x\nurl = \"/tmp\n",
            "line 2: a quote the value does not close",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let mut cmd = with_config(&config);
        cmd.args(["run", "x", "--", "true"]);
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{text:?}: {err}");
        assert!(
            err.starts_with(&format!("dlock: {}", config.display())) && err.contains(says),
            "{text:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_missing_configuration_file_named_by_dlock_config_is_an_error() {
    let scratch = LockDir::new();
    let out = output(with_config(&scratch.file("none")));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read the configuration file"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("os error"), "{}", stderr(&out));
}

/// A server that wants a password, and a password file with it.
fn guarded_redis(scratch: &LockDir) -> (RedisServer, std::path::PathBuf) {
    let server = RedisServer::start_with(&["--requirepass", "s3cr3t-pw"]);
    let password = scratch.file("password");
    std::fs::write(&password, "s3cr3t-pw\n").unwrap();
    // Readable by nobody else, or dlock refuses it.
    std::fs::set_permissions(
        &password,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    (server, password)
}

#[test]
fn the_password_file_gives_the_password_no_command_line_shows() {
    let scratch = LockDir::new();
    let (server, password) = guarded_redis(&scratch);
    let url = format!("redis://127.0.0.1:{}", server.port());
    let mut without = dlock();
    without.args(["-b", "redis", "-u", &url, "status", "x"]);
    let out = output(without);
    assert_eq!(code(&out), 69, "{}", stderr(&out));

    let mut flag = dlock();
    flag.args(["-b", "redis", "-u", &url, "--password-file"])
        .arg(&password)
        .args(["status", "x"]);
    let out = output(flag);
    assert_eq!(code(&out), 1, "{}", stderr(&out));

    let config = scratch.file("config");
    std::fs::write(
        &config,
        format!(
            "backend = redis\nurl = {url}\npassword-file = {}\n",
            password.display()
        ),
    )
    .unwrap();
    let mut from_file = with_config(&config);
    from_file.args(["run", "x", "--", "true"]);
    let out = output(from_file);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn the_command_does_not_receive_a_password_dlock_read() {
    let scratch = LockDir::new();
    let (server, password) = guarded_redis(&scratch);
    let url = format!("redis://:s3cr3t-pw@127.0.0.1:{}", server.port());
    let seen = scratch.file("env");
    let mut cmd = dlock();
    cmd.env("DLOCK_BACKEND", "redis")
        .env("DLOCK_URL", &url)
        .env("DLOCK_PASSWORD_FILE", &password)
        .args(["run", "x", "--", "sh", "-c", "env > \"$0\""])
        .arg(&seen);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let env = std::fs::read_to_string(&seen).unwrap();
    assert!(!env.contains("s3cr3t-pw"), "{env}");
    assert!(env.contains("DLOCK_BACKEND=redis\n"), "{env}");
    assert!(
        env.contains(&format!("DLOCK_PASSWORD_FILE={}", password.display())),
        "the path is no secret: {env}"
    );
}

#[test]
fn dlock_url_lists_several_servers_separated_by_commas_or_spaces() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let list = format!("{},{} {}", urls[0], urls[1], urls[2]);
    let mut cmd = dlock();
    cmd.env("DLOCK_BACKEND", "redis")
        .env("DLOCK_URL", &list)
        .args(["status", "x"]);
    let out = output(cmd);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    for server in &servers {
        let port = format!(":{}", server.port());
        assert!(stdout(&out).contains(&port), "{}", stdout(&out));
    }
    // The same list in one --url.
    let out = output({
        let mut cmd = dlock();
        cmd.args(["-b", "redis", "-u", &list, "status", "x"]);
        cmd
    });
    assert_eq!(code(&out), 1, "-u {list}: {}", stderr(&out));
    for server in &servers {
        let port = format!(":{}", server.port());
        assert!(stdout(&out).contains(&port), "{}", stdout(&out));
    }
}

#[test]
fn a_quoted_value_in_the_configuration_file_is_the_value_inside_the_quotes() {
    let scratch = LockDir::new();
    let locks = scratch.file("locks");
    std::fs::create_dir(&locks).unwrap();
    let config = scratch.file("config");
    std::fs::write(
        &config,
        format!("backend = 'file'\nurl = \"{}\"\n", locks.display()),
    )
    .unwrap();
    assert_eq!(
        location(with_config(&config)),
        format!("{}/x.lock", locks.display())
    );
}

/// A `ttl` from the file longer than the backend keeps is refused naming the file and line, the
/// backend and its limit; the same ttl is a lease on a backend that keeps it.
#[test]
fn a_ttl_from_the_file_beyond_the_backend_s_limit_is_refused_naming_the_line() {
    let scratch = LockDir::new();
    let config = scratch.file("config");
    std::fs::write(&config, "# fleet\nttl = 25d\n").unwrap();
    let mut cmd = with_config(&config);
    cmd.args([
        "-b",
        "zk",
        "-u",
        "zk://127.0.0.1:1",
        "run",
        "n",
        "--",
        "true",
    ]);
    let out = output(cmd);
    let err = stderr(&out);
    assert_eq!(code(&out), 64, "{err}");
    assert!(
        err.contains(&format!("ttl ({} line 2) 25d", config.display()))
            && err.contains("too long for the zk backend: at most 24d"),
        "{err}"
    );
    let mut cmd = with_config(&config);
    cmd.arg("--url")
        .arg(scratch.path())
        .args(["run", "n", "--", "true"]);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `dlock ARGS` in a private mount namespace where `etc` is /etc, so that `etc/dlock/config` is the
/// system's configuration file (as the default-directory tests place /run), with the user's files
/// under `home` and no DLOCK_* variable of the caller's. The binary is opened before the mount and
/// run through its descriptor, as the mount may hide its path.
fn with_system_config(etc: &Path, home: &Path) -> Command {
    assert_eq!(
        own_uid(),
        0,
        "these tests mount a directory over /etc in a private namespace, which needs root (as in \
         CI)"
    );
    let mut cmd = program("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-ec"])
        .arg("exec 9<\"$1\"\nmount --bind \"$0\" /etc\nshift\nexec /proc/self/fd/9 \"$@\"")
        .arg(etc)
        .arg(dlock_bin())
        .stdin(std::process::Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("DLOCK_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("HOME", home).env_remove("XDG_CONFIG_HOME");
    cmd
}

/// A scratch place with a system file (`etc/dlock/config`) and a user's (`home/.config/dlock/
/// config`), each written only when given.
struct Layers {
    scratch: LockDir,
}

impl Layers {
    fn new(system: &str, user: Option<&str>) -> Layers {
        let scratch = LockDir::new();
        std::fs::create_dir_all(scratch.file("etc/dlock")).unwrap();
        std::fs::create_dir_all(scratch.file("home/.config/dlock")).unwrap();
        for dir in ["etc", "etc/dlock"] {
            std::fs::set_permissions(
                scratch.file(dir),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        }
        std::fs::write(scratch.file("etc/dlock/config"), system).unwrap();
        if let Some(user) = user {
            std::fs::write(scratch.file("home/.config/dlock/config"), user).unwrap();
        }
        Layers { scratch }
    }

    fn user(&self) -> String {
        self.scratch
            .file("home/.config/dlock/config")
            .display()
            .to_string()
    }

    fn dlock(&self) -> Command {
        with_system_config(&self.scratch.file("etc"), &self.scratch.file("home"))
    }

    /// `dlock config`'s lines, as `ORIGIN<TAB>key = value`.
    fn shown(&self, mut cmd: Command) -> Vec<String> {
        cmd.arg("config");
        let out = output(cmd);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).lines().map(str::to_owned).collect()
    }
}

const SYSTEM: &str = "/etc/dlock/config";

/// The fleet's Redis in /etc/dlock/config and a user's file with only `wait = 5m`: the run uses the
/// fleet's Redis (the user's file adds its key, it does not replace the system's), `-v` names both
/// files, and `dlock config` shows each setting with the file and line it came from.
#[test]
fn a_user_file_adds_keys_to_the_system_file_and_never_drops_its_servers() {
    let server = RedisServer::start();
    let url = server.url();
    let layers = Layers::new(
        &format!("backend = redis\nurl = {url}\nttl = 20s\n"),
        Some("wait = 5m\nmessage = alice's\n"),
    );
    let mut cmd = layers.dlock();
    cmd.args(["-v", "run", "fleet", "--", "true"]);
    let out = output(cmd);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(
        err.contains(&format!("read configuration file {SYSTEM}\n"))
            && err.contains(&format!("read configuration file {}\n", layers.user())),
        "{err}"
    );
    assert!(
        err.contains(&format!("using redis://127.0.0.1:{}", server.port())),
        "{err}"
    );
    let user = layers.user();
    assert_eq!(
        layers.shown(layers.dlock()),
        [
            format!("{SYSTEM} line 1\tbackend = redis"),
            format!("{SYSTEM} line 2\turl = {url}"),
            format!("{user} line 1\twait = 5m"),
            format!("{SYSTEM} line 3\tttl = 20s"),
            format!("{user} line 2\tmessage = alice's"),
        ]
    );
    // The environment beats the files, key by key, and the command line the environment.
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_TTL", "30s")
        .env("DLOCK_CONNECT_TIMEOUT", "3s")
        .args(["--connect-timeout", "2s"]);
    let shown = layers.shown(cmd);
    assert!(
        shown.contains(&"DLOCK_TTL\tttl = 30s".to_owned()),
        "{shown:?}"
    );
    assert!(
        shown.contains(&"--connect-timeout\tconnect-timeout = 2s".to_owned()),
        "{shown:?}"
    );
    assert!(
        shown.contains(&format!("{user} line 1\twait = 5m")),
        "{shown:?}"
    );
}

/// `backend` and `url` travel as a pair: the most specific layer that sets either sets both. A
/// URL brings the backend its scheme names; a backend alone keeps the servers below only when they
/// are that backend's; DLOCK_CONFIG takes the user's file's place, and set empty reads no file.
#[test]
fn the_backend_and_the_url_come_from_one_layer() {
    let locks = LockDir::new();
    let [user_dir, env_dir, flag_dir] = ["user", "env", "flag"].map(|d| {
        let dir = locks.file(d);
        std::fs::create_dir(&dir).unwrap();
        dir.display().to_string()
    });
    let system = "backend = redis\nurl = redis://127.0.0.1:1\n";
    let sys_pair = [
        format!("{SYSTEM} line 1\tbackend = redis"),
        format!("{SYSTEM} line 2\turl = redis://127.0.0.1:1"),
    ];
    // A user's URL: the file backend its path names, not the system's redis.
    let layers = Layers::new(system, Some(&format!("url = {user_dir}\n")));
    let user = layers.user();
    assert_eq!(
        layers.shown(layers.dlock()),
        [
            format!("the scheme of {user} line 1\tbackend = file"),
            format!("{user} line 1\turl = {user_dir}"),
        ]
    );
    assert_eq!(location(layers.dlock()), format!("{user_dir}/x.lock"));
    // A user's backend alone: not paired with the system's URL of another backend.
    let layers = Layers::new(system, Some("backend = file\n"));
    assert_eq!(
        layers.shown(layers.dlock()),
        [format!("{} line 1\tbackend = file", layers.user())]
    );
    // The same backend alone keeps the system's servers; so does DLOCK_BACKEND, which a parent
    // dlock sets for its command where its servers came from the files.
    let layers = Layers::new(system, Some("backend = redis\n"));
    let shown = layers.shown(layers.dlock());
    assert_eq!(shown[1], sys_pair[1], "{shown:?}");
    let layers = Layers::new(system, None);
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_BACKEND", "redis");
    assert_eq!(
        layers.shown(cmd),
        [
            "DLOCK_BACKEND\tbackend = redis".to_owned(),
            sys_pair[1].clone()
        ]
    );
    // The environment's URL beats the files' pair, and the command line's the environment's.
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_URL", &env_dir);
    assert_eq!(
        layers.shown(cmd),
        [
            "the scheme of DLOCK_URL\tbackend = file".to_owned(),
            format!("DLOCK_URL\turl = {env_dir}"),
        ]
    );
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_URL", &env_dir).args(["-u", &flag_dir]);
    assert_eq!(
        layers.shown(cmd),
        [
            "the scheme of --url\tbackend = file".to_owned(),
            format!("--url\turl = {flag_dir}"),
        ]
    );
    // `-b` alone drops a URL of another backend below it, and keeps one of its own.
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_URL", "redis://127.0.0.1:1")
        .args(["-b", "file"]);
    let shown = layers.shown(cmd);
    assert_eq!(shown, ["--backend\tbackend = file"], "{shown:?}");
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_URL", &env_dir).args(["-b", "file"]);
    assert_eq!(
        layers.shown(cmd),
        [
            "--backend\tbackend = file".to_owned(),
            format!("DLOCK_URL\turl = {env_dir}"),
        ]
    );
    // DLOCK_CONFIG in the user's file's place, the system's still read; empty: no file at all.
    let config = locks.file("config");
    std::fs::write(&config, format!("url = {flag_dir}\n")).unwrap();
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_CONFIG", &config).arg("-v");
    cmd.args(["run", "x", "--", "true"]);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for read in [SYSTEM.to_owned(), config.display().to_string()] {
        assert!(
            stderr(&out).contains(&format!("read configuration file {read}\n")),
            "{}",
            stderr(&out)
        );
    }
    assert!(
        stderr(&out).contains(&format!("using file:{flag_dir}")),
        "{}",
        stderr(&out)
    );
    let mut cmd = layers.dlock();
    cmd.env("DLOCK_CONFIG", "");
    assert_eq!(layers.shown(cmd), ["default\tbackend = file"]);
}

/// `wait` in the system's file and `no-wait` in the user's: the user's wins, so a busy lock fails
/// at once (75); both in one file is refused naming the file and lines, not the environment.
#[test]
fn a_clash_of_keys_in_the_files_is_settled_by_the_more_specific_file_or_named_by_line() {
    let t = crate::support::target::Target::file_backend();
    let mut holder = crate::contract::Holding::start(&t, &["clash"]);
    let url = t.args[1].clone();
    let layers = Layers::new(
        &format!("url = {url}\nwait = 10m\n"),
        Some("no-wait = yes\n"),
    );
    let mut cmd = layers.dlock();
    cmd.args(["run", "clash", "--", "true"]);
    let out = output_within(cmd, std::time::Duration::from_secs(60));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(holder.is_running());
    holder.let_go();

    let scratch = LockDir::new();
    let config = scratch.file("config");
    std::fs::write(&config, format!("url = {url}\nno-wait = yes\nwait = 1m\n")).unwrap();
    let mut cmd = with_config(&config);
    cmd.args(["run", "clash", "--", "true"]);
    let out = output(cmd);
    let at = config.display();
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "dlock: no-wait ({at} line 2) and wait ({at} line 3) are both set: remove one, or \
             give -n or -w\n"
        )
    );
}

/// `#` after white space starts a comment, also after a value or a quoted value; within quotes it
/// is text. A URL with a comment after it is the URL alone, not a password to mask.
#[test]
fn a_comment_may_follow_a_value() {
    let scratch = LockDir::new();
    let locks = scratch.file("locks");
    std::fs::create_dir(&locks).unwrap();
    let config = scratch.file("config");
    for text in [
        format!("backend = file # x\nurl = {}  # primary\n", locks.display()),
        format!("url = \"{}\"  # quoted\n", locks.display()),
    ] {
        std::fs::write(&config, &text).unwrap();
        assert_eq!(
            location(with_config(&config)),
            format!("{}/x.lock", locks.display()),
            "{text}"
        );
    }
    std::fs::write(
        &config,
        "url = redis://u:s3cr3t@127.0.0.1:6379  # primary\nmessage = \"deploy #42\" # x\n",
    )
    .unwrap();
    let mut cmd = with_config(&config);
    cmd.arg("config");
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let at = config.display();
    assert_eq!(
        stdout(&out),
        format!(
            "the scheme of {at} line 1\tbackend = redis\n{at} line 1\turl = \
             redis://u@127.0.0.1:6379\n{at} line 2\tmessage = deploy #42\n"
        )
    );
}

/// A file's `backend` that contradicts its own `url` is refused naming the file and both lines.
#[test]
fn a_backend_and_url_of_one_file_that_disagree_are_refused_naming_the_lines() {
    let scratch = LockDir::new();
    let config = scratch.file("config");
    std::fs::write(
        &config,
        "backend = zk\n# x\nurl = redis://:pw@127.0.0.1:1\n",
    )
    .unwrap();
    let mut cmd = with_config(&config);
    cmd.args(["run", "x", "--", "true"]);
    let out = output(cmd);
    let err = stderr(&out);
    assert_eq!(code(&out), 64, "{err}");
    assert!(
        err.starts_with(&format!(
            "dlock: {} line 1: backend zk does not fit the url on line 3",
            config.display()
        )) && !err.contains("pw"),
        "{err}"
    );
}

/// `supersede` and `cancel-in-progress` are for the runs that need them, never a whole fleet's:
/// a configuration file that sets either is refused (64), naming the file and the line and what
/// to do instead, before anything is taken; the variable works.
#[test]
fn supersede_and_cancel_in_progress_are_refused_in_a_configuration_file() {
    let scratch = LockDir::new();
    for key in ["supersede", "cancel-in-progress"] {
        let config = scratch.file(&format!("{key}.config"));
        std::fs::write(
            &config,
            format!("url = {}\n{key} = yes\n", scratch.path().display()),
        )
        .unwrap();
        let mut cmd = with_config(&config);
        cmd.args(["run", "x", "--", "true"]);
        let out = output(cmd);
        assert_eq!(code(&out), 64, "{}", stderr(&out));
        let said = stderr(&out);
        let line = format!(
            "{} line 2: {key} is not for a configuration file",
            config.display()
        );
        assert!(
            said.contains(&line) && said.contains(&format!("--{key}")),
            "{said}"
        );
    }
    assert!(!scratch.file("x.lock").exists(), "nothing is taken");
    let mut cmd = dlock();
    cmd.env("DLOCK_SUPERSEDE", "1")
        .args(["--url"])
        .arg(scratch.path())
        .args(["run", "x", "--", "true"]);
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
