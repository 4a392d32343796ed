//! dlock on MySQL (MariaDB) side by side with flock(1), the mysql idiom (a `GET_LOCK` held by a
//! mysql client session while it runs the command), the seed recipe (insert into a unique-key
//! table, retry every 50 ms, delete) and two floors of any tool that opens a connection per run
//! (this benchmark's own executable run as `floor URL`, with the client dlock uses: one connection
//! and one write, then the command; and as `floor-around URL`, a write before and after the
//! command, the least a lock whose record is on the server does; both with no lock at all), all
//! on this machine, in one run: uncontended latency and 8-way contended acquisitions per second,
//! reported as ratios.
//!
//! Run: `cargo bench --bench mysql`. It starts its own MariaDB server (tests/support) and stops it
//! at the end. Every loop is bounded by a count. `DLOCK_BENCH_BEFORE=PATH` adds an older dlock
//! beside this one, and pairs of contended turns of the two alone, compared by their rate and by
//! the CPU they cost the clients and the server (`Tools::beside_before`).

#[path = "../tests/mysql/server.rs"]
mod mysql_server;
mod side_by_side;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use mysql_server::{MyServer, DATABASE, PASSWORD};

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
    let server = MyServer::start();
    server.sql("CREATE TABLE seed_locks (name VARCHAR(64) PRIMARY KEY)");
    server.sql("CREATE TABLE bench_floor (name VARCHAR(64) PRIMARY KEY, n BIGINT)");
    let url = server.url_with("");
    let client = format!(
        "mariadb --no-defaults -h 127.0.0.1 -P {} -uroot {DATABASE}",
        server.port()
    );
    let mut peers = vec![
        (
            "mysql GET_LOCK idiom",
            // MariaDB takes no negative (endless) timeout: a year.
            format!("{client} -e \"SELECT GET_LOCK('bench', 31536000);\nsystem true\" >/dev/null"),
        ),
        (
            // Its own counter: the contended loop around it counts with `i`.
            "seed recipe (50 ms)",
            format!(
                "j=0; until {client} -e \"INSERT INTO seed_locks VALUES ('bench')\" 2>/dev/null; \
                 do [ $j -lt 2000 ] || exit 1; j=$((j+1)); sleep 0.05; done; true; \
                 {client} -e \"DELETE FROM seed_locks WHERE name = 'bench'\""
            ),
        ),
    ];
    peers.extend(side_by_side::floor_lines(&url));
    // Last but flock(1): the figures above read the others by their place.
    let before = side_by_side::before_line("mysql", &url).map(|line| {
        peers.push(line);
        peers.len()
    });
    let env = ("MYSQL_PWD", PASSWORD);
    let mut tools = side_by_side::Tools::around(dlock, "mysql", &url, peers, work.path(), env);
    tools.server = Some(server.pid());
    let flock = tools.flock();
    let medians = tools.uncontended(UNCONTENDED_RUNS);
    println!(
        "  goal: within 3x of flock(1): {:.2}x; faster than the mysql idiom: {:.2}x of it",
        medians[0] / medians[flock],
        medians[0] / medians[1]
    );
    println!(
        "  the floors (no lock): a connection and a write {:.2}x flock(1); a write, the command \
         and a write {:.2}x",
        medians[3] / medians[flock],
        medians[4] / medians[flock]
    );
    let rates = tools.contended(CONTENDERS, ROUNDS_EACH, TURNS);
    println!(
        "  goal: at least the mysql idiom: {:.2}x of it; {:.2}x of the seed recipe; {:.2}x of flock",
        rates[0] / rates[1],
        rates[0] / rates[2],
        rates[0] / rates[flock]
    );
    println!(
        "  the floors (no lock): a connection and a write {:.2}x of flock; a write, the command \
         and a write {:.2}x",
        rates[3] / rates[flock],
        rates[4] / rates[flock]
    );
    side_by_side::print_before(before, &medians, &rates);
    if let Some(before) = before {
        tools.beside_before(before, CONTENDERS, ROUNDS_EACH, BEFORE_TURNS);
    }
    support::idle::report_beside_flock(work.path(), dlock, "mysql", &url, IDLE);
    drop(server);
}

/// The floors of a tool that opens a connection per run: connect (with the client and the
/// password authentication dlock uses) and write; for `Floor::WriteAround`, the command and a
/// second write on the same connection. No lock, no lease.
fn connect_and_write(url: &str, shape: side_by_side::Floor) {
    use mysql::prelude::Queryable;
    let opts = mysql::Opts::from_url(url).expect("a MySQL URL");
    let mut conn = mysql::Conn::new(opts).expect("connect");
    let write = "INSERT INTO bench_floor VALUES ('bench', 1) ON DUPLICATE KEY UPDATE n = n + 1";
    conn.query_drop(write).expect("the write");
    if shape == side_by_side::Floor::WriteAround {
        side_by_side::command();
        conn.query_drop(write).expect("the second write");
    }
    drop(conn);
}
