//! A key of the wrong type in dlock's namespace, as another client writes it (redis-py's
//! `lock('dlock:{x}:holders')` makes a string there): each command on that lock fails with one
//! line naming the key, and `list` still shows every other lock.

use super::*;

#[test]
fn a_key_of_the_wrong_type_is_named_and_hides_no_other_lock() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let mut conn = server.connection();
    // What redis-py's Lock writes: a string with a token, set if absent.
    // `status` and `release --force` read the owners only of a held lock: with a bad owners key a
    // free lock reads free.
    let cases: [(&str, &str, &[&str], &[&str]); 2] = [
        (
            "x",
            "dlock:{x}:holders",
            &["SET", "dlock:{x}:holders", "a1b2c3", "NX"],
            &["run", "status", "release"],
        ),
        (
            "w",
            "dlock:{w}:owners",
            &["RPUSH", "dlock:{w}:owners", "item"],
            &["run"],
        ),
    ];
    for (name, key, make, commands) in cases {
        let mut cmd = redis::cmd(make[0]);
        for arg in &make[1..] {
            cmd.arg(*arg);
        }
        cmd.query::<()>(&mut conn).unwrap();
        for command in commands {
            let args: &[&str] = match *command {
                "run" => &["run", name, "--", "true"],
                "status" => &["status", name],
                _ => &["release", "--force", name],
            };
            let out = output(server.dlock(args));
            let err = stderr(&out);
            assert_eq!(code(&out), 69, "{args:?}: {err}");
            assert!(
                err.contains(&format!("the key {key} is not the")) && err.lines().count() == 1,
                "{args:?}: {err}"
            );
        }
    }
    // Another lock, held: `list` shows it, and says which lock it skipped and why.
    let go = dir.file("go");
    let script = format!(
        "touch {}; i=0; while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        dir.file("in").display(),
        go.display()
    );
    let mut holder = server
        .dlock(&["run", "y", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("in"), T);
    let out = output(server.dlock(&["list", "--json"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["y"], "{list}");
    assert!(
        stderr(&out).contains("dlock:{x}:holders"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut holder, T).success());
    // The key is left as it is, for whoever wrote it.
    let kept: String = redis::cmd("GET")
        .arg("dlock:{x}:holders")
        .query(&mut conn)
        .unwrap();
    assert_eq!(kept, "a1b2c3");
}
