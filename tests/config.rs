//! A fleet's settings without a command line: the configuration file and its precedence (option >
//! variable > file), several servers in one DLOCK_URL, the password file, and no password reaching
//! the command run under the lock.

use std::path::Path;
use std::process::Command;

use crate::support::redis_server::RedisServer;
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
