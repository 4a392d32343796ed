//! dlock on PostgreSQL side by side with flock(1), the psql idiom (an advisory lock held by a
//! psql session while it runs the command) and two floors of any tool that opens a connection per
//! run: this benchmark's own executable run as `floor URL`, with the client dlock uses
//! (tokio-postgres), making one connection and one write to a table and then running the
//! command, and as `floor-around URL`, writing before and after the command (the least a lock
//! whose record is on the server does), both with no lock at all. All on this machine, in one
//! run: uncontended latency and 8-way contended acquisitions per second, reported as ratios.
//!
//! Run: `cargo bench --bench postgres`. It starts its own PostgreSQL server (tests/support) and
//! stops it at the end. Every loop is bounded by a count. `DLOCK_BENCH_BEFORE=PATH` adds an older
//! dlock beside this one, and pairs of contended turns of the two alone, compared by their rate
//! and by the CPU they cost the clients and the server (`Tools::beside_before`).

#[path = "../tests/postgres/server.rs"]
mod pg_server;
mod side_by_side;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use pg_server::{PgServer, PASSWORD};

const UNCONTENDED_RUNS: usize = 40;
const CONTENDERS: usize = 8;
const ROUNDS_EACH: usize = 10;
/// Contended turns of each tool, taking turns; each figure is the median of its turns.
const TURNS: usize = 5;
/// Pairs of contended turns of this dlock and the one before, when there is one.
const BEFORE_TURNS: usize = 15;
/// How long a holder sits idle while its CPU is measured.
const IDLE: Duration = Duration::from_secs(60);

fn main() {
    if side_by_side::run_floor_if_asked(connect_and_write) {
        return;
    }
    println!(
        "{}",
        support::build::describe(std::path::Path::new(support::dlock_bin()))
    );
    let dlock = support::dlock_bin();
    let work = tempfile::tempdir().expect("temp dir");
    let server = PgServer::start();
    let url = server.url_with("");
    let port = server.port().to_string();
    server.psql("CREATE TABLE bench_floor (name text PRIMARY KEY, n bigint)");
    let mut peers = vec![(
        "psql pg_advisory_lock",
        format!(
            "psql -X -q -h 127.0.0.1 -p {port} -U postgres -d postgres \
             -c 'SELECT pg_advisory_lock(1)' -c '\\! true' >/dev/null"
        ),
    )];
    peers.extend(side_by_side::floor_lines(&url));
    // Last but flock(1): the figures above read the others by their place.
    let before = side_by_side::before_line("postgres", &url).map(|line| {
        peers.push(line);
        peers.len()
    });
    let env = ("PGPASSWORD", PASSWORD);
    let mut tools = side_by_side::Tools::around(dlock, "postgres", &url, peers, work.path(), env);
    tools.server = Some(server.pid());
    let flock = tools.flock();
    let medians = tools.uncontended(UNCONTENDED_RUNS);
    println!(
        "  goal: within 3x of flock(1): {:.2}x; faster than psql: {:.2}x of psql",
        medians[0] / medians[flock],
        medians[0] / medians[1]
    );
    println!(
        "  the floors (no lock): a connection and a write {:.2}x flock(1); a write, the command \
         and a write {:.2}x",
        medians[2] / medians[flock],
        medians[3] / medians[flock]
    );
    let rates = tools.contended(CONTENDERS, ROUNDS_EACH, TURNS);
    println!(
        "  goal: at least the psql idiom: {:.2}x of psql; 0.5x flock(1): {:.2}x of flock",
        rates[0] / rates[1],
        rates[0] / rates[flock]
    );
    println!(
        "  the floors (no lock): a connection and a write {:.2}x of flock; a write, the command \
         and a write {:.2}x",
        rates[2] / rates[flock],
        rates[3] / rates[flock]
    );
    side_by_side::print_before(before, &medians, &rates);
    if let Some(before) = before {
        tools.beside_before(before, CONTENDERS, ROUNDS_EACH, BEFORE_TURNS);
    }
    support::idle::report_beside_flock(work.path(), dlock, "postgres", &url, IDLE);
    drop(server);
}

/// The floors of a tool that opens a connection per run: connect (with the client and the
/// password authentication dlock uses) and write; for `Floor::WriteAround`, the command and a
/// second write on the same connection. No lock, no lease.
fn connect_and_write(url: &str, shape: side_by_side::Floor) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let connection = tokio::spawn(connection);
        let write = "INSERT INTO bench_floor VALUES ('bench', 1) \
                     ON CONFLICT (name) DO UPDATE SET n = bench_floor.n + 1";
        client.batch_execute(write).await.expect("the write");
        if shape == side_by_side::Floor::WriteAround {
            side_by_side::command();
            client.batch_execute(write).await.expect("the second write");
        }
        drop(client);
        let _ = connection.await;
    });
}
