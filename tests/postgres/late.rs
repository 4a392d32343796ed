//! The PostgreSQL backend when an answer comes too late: an attempt the client gave up on may
//! still be granted at the server, and the acquisition must take that grant as its own.

use crate::postgres::{Pg, T};
use crate::postgres::server::PgServer;
use crate::support::*;

/// An attempt that timed out at the client may still be granted at the server once it gets its
/// turn (its transaction commits although nobody reads the answer): the row it left is the
/// waiter's own, and the waiter's next attempt takes it as granted, with the token it was given,
/// rather than failing on a duplicate row or waiting behind itself until that row's lease ends.
#[test]
fn an_attempt_granted_after_it_timed_out_is_taken_as_granted() {
    let pg = Pg::shared("t_late_");
    let (mut h, _) = pg.holder(&[], "late", "h");
    // Shared: beside its own stray row, an attempt without the fix would insert a second one.
    let (mut w, werr) = pg.start(
        &["--shared", "--ttl", "3s", "--connect-timeout", "1s"],
        "late",
        "w",
    );
    let server = PgServer::use_shared();
    wait_until("w in line", T, || {
        server.psql("SELECT count(*) FROM t_late_queue") == "1"
    });
    // Every change of "late" now queues behind this transaction for 4 s: first the holder's
    // release, then the waiter's re-checks (one a second), each given up by the waiter after 1 s.
    let mut stall = server.psql_in_background(
        "t-late",
        "SELECT 1 FROM t_late_tokens WHERE name = 'late' FOR UPDATE; SELECT pg_sleep(4)",
    );
    let waiting_on_row = |n: usize| {
        server
            .psql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE '%acquire_v%'",
            )
            .parse::<usize>()
            .unwrap_or(0)
            >= n
    };
    wait_until("the counter row of late to be held", T, || {
        server.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 't-late' \
             AND query LIKE '%pg_sleep%' AND state = 'active'",
        ) == "1"
    });
    pg.let_go("h");
    wait_until("the release to queue for the row", T, || {
        server.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%INSERT INTO public.t_late_tokens AS t%'",
        ) == "1"
    });
    // Two attempts of the waiter behind the release: the first is granted after the waiter gave
    // up on it.
    wait_until("two attempts to queue behind it", T, || waiting_on_row(2));
    drop(server);
    assert!(wait_exit(&mut h, T).success());
    let _ = wait_exit(&mut stall, T);
    wait_for_file(&pg.dir.file("w.in"), T);
    assert_eq!(
        pg.token("w"),
        pg.token("h") + 1,
        "the token of the grant it missed: {}",
        werr.text()
    );
    pg.let_go("w");
    assert!(wait_exit(&mut w, T).success(), "{}", werr.text());
    assert_eq!(
        PgServer::use_shared().psql("SELECT count(*) FROM t_late_locks"),
        "0"
    );
}
