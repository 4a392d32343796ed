//! Interop with `etcdctl lock` (Debian's etcd-client): dlock's exclusive lock and etcdctl's exclude
//! each other both ways, so do etcdctl and dlock's shared and limit holders, and a name with `/` or
//! `%` meets etcdctl's on its escaped key prefix (an unescaped `/` meets the name before it);
//! etcdctl waits for a --min-hold; status labels etcdctl holders as not dlock's.

use super::*;

#[test]
fn etcdctl_lock_waits_out_a_min_hold() {
    let server = shared();
    let started = Instant::now();
    let out = output(on(
        server,
        &["run", "--min-hold", "3", "interop-kept", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The owner's key stays, on a lease of 3s that etcd keeps: etcdctl queues behind it.
    let out = output(server.lock("/dlock/interop-kept", &["true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "etcdctl took the lock {:?} after a run with --min-hold 3",
        started.elapsed()
    );
}

#[test]
fn exclusive_lock_and_etcdctl_lock_exclude_each_other_both_ways() {
    let server = shared();
    let dir = LockDir::new();
    // etcdctl holds: dlock finds the lock busy, then waits for it and gets it once etcdctl lets go.
    let go = dir.file("etcdctl.go");
    let marker = dir.file("etcdctl.in");
    let script = format!(
        "echo $ETCD_LOCK_REV > {}; {}",
        marker.display(),
        hold_until(&go)
    );
    let mut etcdctl = server
        .lock("/dlock/interop", &["sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let out = output(on(server, &["run", "--no-wait", "interop", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let mut dlock_waiter = spawn_holder(server, &dir, &[], "interop", "d");
    wait_for_keys(server, "interop", 2);
    assert!(!is_in(&dir, "d"), "dlock ran while etcdctl held the lock");
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut etcdctl, T).success());
    wait_for_file(&dir.file("d.in"), T);
    let etcdctl_rev = read_pid(&marker) as u64;
    assert!(token_of(&dir, "d") > etcdctl_rev);

    // dlock holds: etcdctl waits until dlock lets go.
    let etcdctl_in = dir.file("etcdctl2.in");
    let mut etcdctl = server
        .lock(
            "/dlock/interop",
            &[
                "sh",
                "-c",
                &format!("echo $ETCD_LOCK_REV > {}", etcdctl_in.display()),
            ],
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_keys(server, "interop", 2);
    assert!(
        !etcdctl_in.exists(),
        "etcdctl ran while dlock held the lock"
    );
    let_go(&dir, "d");
    assert_eq!(exit_code(&mut dlock_waiter), 0);
    assert!(wait_exit(&mut etcdctl, T).success());
    assert!(read_pid(&etcdctl_in) as u64 > token_of(&dir, "d"));
}

#[test]
fn etcdctl_waits_for_shared_and_limit_holders() {
    let server = shared();
    let dir = LockDir::new();
    for (flags, name) in [
        (&["--shared"][..], "interop-shared"),
        (&["--limit", "3"][..], "interop-seat"),
    ] {
        let mut holder = start_holder(server, &dir, flags, name, name);
        let got = dir.file(&format!("{name}.etcdctl"));
        let mut etcdctl = server
            .lock(
                &format!("/dlock/{name}"),
                &["sh", "-c", &format!("touch {}", got.display())],
            )
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_keys(server, name, 2);
        assert!(!got.exists(), "etcdctl ran beside a dlock {flags:?} holder");
        let_go(&dir, name);
        assert_eq!(exit_code(&mut holder), 0);
        assert!(wait_exit(&mut etcdctl, T).success());
        assert!(got.exists());
    }
}

#[test]
fn etcdctl_holder_excludes_shared_and_limit_and_an_escaped_name_meets_both_ways() {
    let server = shared();
    let dir = LockDir::new();
    // A name with `/` and `%` is one escaped key prefix, which etcdctl must be given as such.
    for (flags, name, prefix) in [
        (&["--shared"][..], "interop-s", "interop-s"),
        (&["--limit", "3"][..], "interop-l", "interop-l"),
        (&[][..], "interop/a%b", "interop%2Fa%25b"),
    ] {
        // etcdctl holds: dlock is refused, waits, and gets in once etcdctl lets go.
        let tag = prefix.replace('%', "_");
        let go = dir.file(&format!("{tag}.etcdctl.go"));
        let marker = dir.file(&format!("{tag}.etcdctl.in"));
        let script = format!("touch {}; {}", marker.display(), hold_until(&go));
        let mut etcdctl = server
            .lock(&format!("/dlock/{prefix}"), &["sh", "-c", &script])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_file(&marker, T);
        let mut args = vec!["run", "--no-wait"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[name, "--", "true"]);
        let out = output(on(server, &args));
        assert_eq!(code(&out), 75, "{flags:?} {name}: {}", stderr(&out));
        let mut waiter = spawn_holder(server, &dir, flags, name, &tag);
        wait_for_keys(server, prefix, 2);
        assert!(!is_in(&dir, &tag), "dlock {flags:?} ran beside etcdctl");
        std::fs::write(&go, "").unwrap();
        assert!(wait_exit(&mut etcdctl, T).success());
        wait_for_file(&dir.file(&format!("{tag}.in")), T);
        // dlock holds: etcdctl waits until dlock lets go (shared and limit: etcdctl_waits_for_...).
        let got = dir.file(&format!("{tag}.etcdctl2"));
        let mut etcdctl = server
            .lock(
                &format!("/dlock/{prefix}"),
                &["sh", "-c", &format!("touch {}", got.display())],
            )
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_keys(server, prefix, 2);
        assert!(!got.exists(), "etcdctl ran beside dlock {flags:?} {name}");
        let_go(&dir, &tag);
        assert_eq!(exit_code(&mut waiter), 0);
        assert!(wait_exit(&mut etcdctl, T).success());
        assert!(got.exists());
    }
}

/// An etcdctl holder is labelled as other clients' holders are on the other stores. And etcdctl
/// given a name with an unescaped `/` takes a key under the prefix of the name before the `/`
/// (etcd's prefix scheme): dlock's lock of that name is busy while it holds, though etcdctl does
/// not wait for that lock's dlock holders, and dlock's lock of the whole name is another.
#[test]
fn an_etcdctl_holder_is_labelled_and_an_unescaped_slash_blocks_the_name_before_it() {
    let server = shared();
    let dir = LockDir::new();
    let go = dir.file("etcdctl.go");
    let marker = dir.file("etcdctl.in");
    let script = format!("touch {}; {}", marker.display(), hold_until(&go));
    let mut etcdctl = server
        .lock("/dlock/interop-nest/b", &["sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let out = output(on(server, &["status", "--json", "interop-nest"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    let owner = holders[0]["owner"].as_str().unwrap();
    assert!(owner.starts_with("(not dlock: etcdctl lease "), "{json}");
    let out = output(on(server, &["status", "interop-nest"]));
    assert!(
        stdout(&out).contains(&format!("owner {owner}")),
        "{}",
        stdout(&out)
    );
    let out = output(on(
        server,
        &["run", "--no-wait", "interop-nest", "--", "true"],
    ));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = output(on(
        server,
        &["run", "--no-wait", "interop-nest/b", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::write(&go, "").unwrap();
    assert!(wait_exit(&mut etcdctl, T).success());

    let mut holder = start_holder(server, &dir, &[], "interop-nest", "d");
    let mut etcdctl = server
        .lock("/dlock/interop-nest/b", &["true"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_exit(&mut etcdctl, T).success());
    assert!(
        holder.try_wait().unwrap().is_none(),
        "etcdctl must get in while dlock holds interop-nest"
    );
    let_go(&dir, "d");
    assert_eq!(exit_code(&mut holder), 0);
}
