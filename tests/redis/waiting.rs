//! Waiting by events and one connection per run: a release hands the lock over with no command
//! from the waiter, waiters go in arrival order, a waiter that gives up leaves nothing behind,
//! forged queue entries are shown escaped, many names share one connection, and runs close theirs
//! without TIME_WAIT sockets.

use super::*;

/// EVALSHA calls the server has run so far.
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_release_hands_the_lock_over_and_the_waiter_confirms_it_in_one_call() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    // Load the scripts, so that no NOSCRIPT retry is counted below.
    assert_eq!(
        code(&output(dlock_at(&url, &["run", "warm", "--", "true"]))),
        0
    );
    let mut holder = start_holder(&url, &[], "over", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let started = dir.file("waiter-pid");
    let script = format!("echo $$ > {}; exec sleep 60", started.display());
    let mut waiter = Watched::start(dlock_at(
        &url,
        &[
            "-v", "run", "--ttl", "3s", "over", "--", "sh", "-c", &script,
        ],
    ));
    wait_until("the waiter to queue", T, || queued(&server, "over") == 1);
    let before = script_calls(&server);
    signal(holder.child.id(), libc::SIGTERM);
    holder.wait_for_more("released", 1, T);
    let child = read_pid(&started);
    // The holder's release granted the lock, and the waiter, woken by the grant, confirmed it
    // in one call (its fallback re-check would come only a second after it queued).
    assert_eq!(
        script_calls(&server) - before,
        2,
        "the holder's release, then the waiter's one confirmation"
    );
    holder.finish(T);

    // The lock it was handed is a lock like any other: renewed (every second), then lost when
    // its key goes.
    waiter.wait_for_more("renewed", 2, T);
    delete_holders_and_see_the_loss(&server, "over", waiter, child, Duration::from_secs(3));
}

#[test]
fn many_names_are_held_and_renewed_over_one_connection() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let names: Vec<String> = (0..200).map(|i| format!("many/{i:03}")).collect();
    let marker = dir.file("in");
    // (A 2 s lease, renewed every 667ms: a 600ms one, 200 renewals every 200ms by a debug build,
    // was lost on a 2-core machine busy with builds.)
    let mut args = vec!["-v", "run", "--ttl", "2s"];
    args.extend(names.iter().map(String::as_str));
    let script = format!("touch {}; exec sleep 60", marker.display());
    args.extend(["--", "sh", "-c", &script]);
    let mut holder = Watched::start(dlock_at(&[server.url()], &args));
    wait_for_file(&marker, T);
    // Two rounds of renewals of all 200, through the one connection.
    holder.wait_for_more("renewed", 2 * 200, T);
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(
        clients.lines().count(),
        2,
        "dlock's connection and ours:\n{clients}"
    );
    let out = output(dlock_at(&[server.url()], &["list", "many/"]));
    assert_eq!(stdout(&out).lines().count(), 200, "{}", stdout(&out));
    signal(holder.child.id(), libc::SIGTERM);
    let (status, stderr) = holder.finish(T);
    assert_eq!(status, 128 + libc::SIGTERM, "{stderr}");
    assert_eq!(
        server.keys().len(),
        2 * 200,
        "only the token counters and the last runs stay"
    );
}

#[test]
fn runs_close_their_connections_without_leaving_time_wait_sockets() {
    let server = RedisServer::start();
    let before = time_wait_sockets(server.port());
    for _ in 0..3 {
        let out = output(dlock_at(&[server.url()], &["run", "tw", "--", "true"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    // A normal close leaves each run's socket in TIME_WAIT for a minute: at hundreds of runs per
    // second those would use up the local ports. dlock resets after its last answer instead.
    assert_eq!(time_wait_sockets(server.port()), before);
}

/// Loopback TCP sockets in TIME_WAIT with `port` at either end (/proc/net/tcp, state 06).
fn time_wait_sockets(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[3] == "06"
                && (fields[1].ends_with(&port) || fields[2].ends_with(&port))
        })
        .count()
}

/// Any client of the server may publish on a waiter's grant channel: a forged grant, with a
/// token the store never handed out, gives the waiter nothing. The lock and its token come from
/// the store: the waiter waits on while the holder holds, then gets the store's next token.
#[test]
fn a_forged_grant_message_gives_a_waiter_nothing() {
    let server = RedisServer::start();
    forged_grant_gives_nothing(&[server.url()], "forged", &server, 1, |owner| {
        redis::cmd("PUBLISH")
            .arg(format!("dlock:wake:{owner}"))
            .arg("dlock:{forged} 1000000")
            .query(&mut server.connection())
            .unwrap()
    });
}

/// The forged-grant attack at `urls`: a holder of `name`, a waiter in line behind it (in the
/// queue on `queue`), then `forge(OWNER)` sends a grant with a token the store never gave on the
/// waiter's channels, and says how many listeners it reached (`listeners` expected). The waiter
/// runs nothing while the holder holds, and once it releases, runs with the store's next token.
pub(super) fn forged_grant_gives_nothing(
    urls: &[String],
    name: &str,
    queue: &RedisServer,
    listeners: i64,
    forge: impl Fn(&str) -> i64,
) {
    let dir = LockDir::new();
    let holder = start_holder(urls, &[], name, &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let started = dir.file("token");
    // Written whole, then named: the file is never seen empty.
    let script = format!(
        "echo $DLOCK_TOKEN > {0}.new && mv {0}.new {0}; exec sleep 60",
        started.display()
    );
    let mut waiter = Watched::start(dlock_at(
        urls,
        &["-v", "run", name, "--", "sh", "-c", &script],
    ));
    wait_until("the waiter to queue", T, || queued(queue, name) == 1);
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("dlock:{{{name}}}:queue"))
        .arg(0)
        .arg(-1)
        .query(&mut queue.connection())
        .unwrap();
    let owner = members[0].split(' ').next().unwrap().to_string();
    assert_eq!(
        forge(&owner),
        listeners,
        "the waiter listens on its grant channels"
    );
    waiter.sees_no_line_with("acquired", Duration::from_secs(1));
    assert!(
        !started.exists(),
        "the waiter's command ran beside the holder"
    );
    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
    wait_for_file(&started, T);
    // Above the holder's 1. Not always 2: with Redlock an attempt that missed the majority (a server
    // slow to answer on a loaded machine) has taken a token from each server it reached.
    let token: u64 = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .expect("the waiter's token");
    assert!(
        token >= 2,
        "the waiter's token {token} is not above the holder's 1"
    );
    signal(waiter.child.id(), libc::SIGTERM);
    waiter.finish(T);
}

/// How many waiters are queued for `name`.
pub(super) fn queued(server: &RedisServer, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("dlock:{{{name}}}:queue"))
        .query(&mut server.connection())
        .unwrap()
}

#[test]
fn waiters_acquire_in_arrival_order() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "fifo", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let order = dir.file("order");
    let mut waiters = Vec::new();
    for i in 1..=5 {
        let append = format!("echo {i} >> {}", order.display());
        waiters.push(
            dlock_at(&url, &["run", "fifo", "--", "sh", "-c", &append])
                .spawn()
                .unwrap(),
        );
        wait_until(&format!("waiter {i} to queue"), T, || {
            queued(&server, "fifo") == i
        });
    }
    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
    for mut w in waiters {
        assert!(wait_exit(&mut w, T).success());
    }
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "1\n2\n3\n4\n5\n");
}

/// Any client can write the queue: a forged waiter entry (a terminal escape in its message, a mode
/// and pid dlock never writes) is shown as unreadable and escaped by `status`, never raw, and a
/// waiter with a message is shown with it.
#[test]
fn forged_waiter_entries_are_shown_unreadable_and_escaped() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "q", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let mut conn = server.connection();
    for (ticket, entry) in [
        (1u64, "ab exclusive 1000 2 h\tdeploy \u{1b}]0;owned\u{7}"),
        (2, "cd bogus 1000 -1 h"),
        (3, "ef shared 1000 7 box\tfine \"text\""),
    ] {
        redis::cmd("ZADD")
            .arg("dlock:{q}:queue")
            .arg(ticket * 1_000_000)
            .arg(entry)
            .query::<()>(&mut conn)
            .unwrap();
        redis::cmd("ZADD")
            .arg("dlock:{q}:alive")
            .arg(99_999_999_999_999u64)
            .arg(entry)
            .query::<()>(&mut conn)
            .unwrap();
    }
    let out = output(dlock_at(&url, &["status", "q"]));
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    let waiting: Vec<&str> = text.lines().filter(|l| l.contains("waiting:")).collect();
    assert_eq!(waiting.len(), 3, "{text}");
    assert!(
        waiting[0].contains("unreadable record") && waiting[0].contains("\\u{1b}"),
        "{text}"
    );
    assert!(waiting[1].contains("unreadable record"), "{text}");
    assert!(
        waiting[2].starts_with("  waiting: shared by box pid 7 since ")
            && waiting[2].ends_with(" ago, owner ef")
            && text.contains(r#"    message "fine \"text\"""#),
        "{text}"
    );
    let out = output(dlock_at(&url, &["status", "--json", "q"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert!(json["waiters"][0]["unreadable"].is_string(), "{json}");
    assert_eq!(json["waiters"][2]["message"], "fine \"text\"", "{json}");
    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
}

#[test]
fn a_waiter_that_gives_up_leaves_nothing_behind() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(&url, &[], "tidy", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let held_keys = server.keys();
    assert_eq!(
        held_keys,
        [
            "dlock:{tidy}:holders",
            "dlock:{tidy}:last-run",
            "dlock:{tidy}:owners",
            "dlock:{tidy}:token"
        ]
    );

    // Gives up at its deadline.
    let out = output(dlock_at(
        &url,
        &["run", "-w", "300ms", "tidy", "--", "true"],
    ));
    assert_eq!(code(&out), 75);
    assert_eq!(server.keys(), held_keys);

    // Gives up on a signal, while queued and subscribed (the holder listens on its own channel).
    let channels = || -> Vec<String> {
        redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("dlock:wake:*")
            .query(&mut server.connection())
            .unwrap()
    };
    let holders_channel = channels();
    assert_eq!(holders_channel.len(), 1, "{holders_channel:?}");
    let mut waiter = dlock_at(&url, &["run", "tidy", "--", "true"])
        .spawn()
        .unwrap();
    wait_until("the waiter to queue", T, || queued(&server, "tidy") == 1);
    assert_eq!(channels().len(), 2, "the waiter listens before it queues");
    signal(waiter.id(), libc::SIGTERM);
    assert_eq!(wait_exit(&mut waiter, T).code(), Some(128 + libc::SIGTERM));
    assert_eq!(server.keys(), held_keys);
    wait_until("the waiter's channel to go", T, || {
        channels() == holders_channel
    });

    signal(holder.child.id(), libc::SIGTERM);
    holder.finish(T);
    assert_eq!(
        server.keys(),
        ["dlock:{tidy}:last-run", "dlock:{tidy}:token"],
        "only the token counter and the last run stay"
    );
}

/// A holder with `--cancel-in-progress` listens on its group record's channel, which any client
/// may publish on: a forged message there (empty, or claiming a request to end) only makes it
/// read its record, which names no request, so its command runs to its end and it exits 0.
#[test]
fn a_forged_word_on_the_group_channel_cancels_nobody() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let (ready, go) = (dir.file("ready"), dir.file("go"));
    let script = format!(
        "touch {r}; i=0; while [ ! -e {g} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        r = ready.display(),
        g = go.display()
    );
    let holder = Watched::start(dlock_at(
        &url,
        &[
            "-v",
            "run",
            "--cancel-in-progress",
            "grouped",
            "--",
            "sh",
            "-c",
            &script,
        ],
    ));
    wait_for_file(&ready, T);
    let channel = "dlock:wake:group:dlock:{grouped}";
    let listeners = || -> i64 {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut server.connection())
            .unwrap();
        n
    };
    wait_until("the holder to listen", T, || listeners() == 1);
    for forged in [
        "",
        r#"{"cancel":{"targets":["*"],"by":{"owner":"mallory"}}}"#,
        "cancel",
    ] {
        let reached: i64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(forged)
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(reached, 1, "the forged word reached the holder");
    }
    std::fs::write(&go, "").unwrap();
    let (code, said) = holder.finish(T);
    assert_eq!(code, 0, "{said}");
    assert!(
        !said.contains("request to end") && !said.contains("cancelled"),
        "{said}"
    );
}
