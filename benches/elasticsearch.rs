//! dlock on Elasticsearch (an OpenSearch node) side by side with the plain idiom a user would
//! script on the same node, in one run: `curl -X PUT .../_create/NAME` (retried every 100 ms while
//! it answers 409), the command, then `curl -X DELETE .../_doc/NAME`. Uncontended latency (the two
//! interleaved) and 8-way contended acquisitions per second (taking turns, round by round), each
//! as a ratio; then a line of 50 dlock waiters: how soon the head of the line sees a release (p50)
//! and what the line costs the node (requests a second, from the index's own counters).
//!
//! Run: `cargo bench --bench elasticsearch`. It starts its own node (tests/support's launcher,
//! its jars fetched by scripts/test) and stops it at the end. Every loop is bounded both by a
//! count and by a time budget.

#[path = "../tests/opensearch/server.rs"]
mod opensearch_server;
#[path = "../tests/support/mod.rs"]
mod support;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::program;

use opensearch_server::OpenSearchServer;
use support::figures::{goal, middle, ms};

const UNCONTENDED_RUNS: usize = 100;
const UNCONTENDED_BUDGET: Duration = Duration::from_secs(90);
const CONTENDERS: usize = 8;
const ROUNDS_EACH: usize = 10;
const CONTENDED_LIMIT: Duration = Duration::from_secs(180);
const CONTENDED_ROUNDS: usize = 3;
/// The line of waiters, and how many releases the head's latency is measured over.
const WAITERS: usize = 50;
const HANDOFFS: usize = 20;

fn main() {
    println!(
        "{}",
        support::build::describe(std::path::Path::new(support::dlock_bin()))
    );
    let dlock = support::dlock_bin();
    let node = OpenSearchServer::start();
    let base = node.url();
    let url = format!("elasticsearch://127.0.0.1:{}/bench", node.port());
    println!(
        "dlock {dlock}\nOpenSearch node at {base}, green after {:?}\n",
        node.started_in()
    );
    let idiom = |name: &str| {
        format!(
            "until curl -sf -o /dev/null -X PUT -H 'Content-Type: application/json' -d '{{}}' \
             '{base}/bench/_create/{name}'; do sleep 0.1; done; true; \
             curl -sf -o /dev/null -X DELETE '{base}/bench/_doc/{name}'"
        )
    };
    let dlock_run = |name: &str| format!("{dlock} --url {url} -q run {name} -- true");
    // The index exists before either side's first run.
    assert_eq!(code_of(&dlock_run("warm-up")), 0);

    let tools = [
        ("dlock elasticsearch", dlock_run("u")),
        ("curl _create/DELETE", idiom("u2")),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); tools.len()];
    let started = Instant::now();
    for _ in 0..UNCONTENDED_RUNS {
        if started.elapsed() > UNCONTENDED_BUDGET {
            break;
        }
        for (i, (name, line)) in tools.iter().enumerate() {
            let t = Instant::now();
            assert_eq!(code_of(line), 0, "{name} failed");
            samples[i].push(t.elapsed());
        }
    }
    let medians: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
    println!("uncontended, median of {} runs each:", samples[0].len());
    for ((name, _), m) in tools.iter().zip(&medians) {
        println!("  {name:<20} {:>8.3} ms", ms(*m));
    }
    let ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
    goal(
        "curl idiom / dlock elasticsearch",
        ratio,
        ">= 0.5",
        ratio >= 0.5,
    );

    let loops = [
        ("dlock elasticsearch", dlock_run("c")),
        ("curl _create/DELETE", idiom("c2")),
    ];
    println!(
        "\n{CONTENDERS}-way contended, {ROUNDS_EACH} acquisitions each, {CONTENDED_ROUNDS} rounds \
         taking turns (acquisitions per second):"
    );
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); loops.len()];
    let mut ratios = Vec::new();
    // dlock's requests to the node while its contenders run (the idiom's failed creates are not
    // counted by the node's indexing stats).
    let (mut requests, mut busy) = (0, Duration::ZERO);
    for _ in 0..CONTENDED_ROUNDS {
        for (i, ((_, one), rates)) in loops.iter().zip(&mut rates).enumerate() {
            let (before, at) = (writes(&node), Instant::now());
            rates.push(contended(one));
            if i == 0 {
                requests += writes(&node) - before;
                busy += at.elapsed();
            }
        }
        if let (Some(d), Some(c)) = (rates[0].last(), rates[1].last()) {
            ratios.push(d / c);
        }
    }
    for ((name, _), rates) in loops.iter().zip(&rates) {
        println!("  {name:<20} {:>8.1}/s", middle(rates.clone()));
    }
    println!(
        "  dlock's requests to the node: {:.1}/s",
        requests as f64 / busy.as_secs_f64()
    );
    let ratio = middle(ratios);
    goal(
        "dlock elasticsearch / curl idiom",
        ratio,
        ">= 1",
        ratio >= 1.0,
    );

    line_of_waiters(&node, dlock, &url);
}

/// 50 waiters on one held lock: the node's requests a second while they wait, then the time from
/// each release to the next holder's start, over `HANDOFFS` releases, each once the line has
/// settled. Each holder's command writes
/// the time it started into `in.PID` and holds until `go.PID` appears.
fn line_of_waiters(node: &OpenSearchServer, dlock: &str, url: &str) {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let d = dir.path().display().to_string();
    let hold = || {
        program("sh")
            .arg("-c")
            .arg(format!(
                "{dlock} --url {url} -q run -w 600 line -- sh -c \
                 'date +%s%N > {d}/in.tmp.$$; mv {d}/in.tmp.$$ {d}/in.$$; i=0; \
                 while [ ! -e {d}/go.$$ ] && [ $i -lt 12000 ]; do sleep 0.01; i=$((i+1)); done'"
            ))
            .stdout(Stdio::null())
            .spawn()
            .expect("a waiter")
    };
    let started = |seen: &mut Vec<String>| -> Option<(String, u128)> {
        let entries = std::fs::read_dir(dir.path()).ok()?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("in.").filter(|p| !p.starts_with("tmp")) {
                if !seen.iter().any(|s| s == pid) {
                    seen.push(pid.to_owned());
                    let ns = std::fs::read_to_string(e.path())
                        .ok()?
                        .trim()
                        .parse()
                        .ok()?;
                    return Some((pid.to_owned(), ns));
                }
            }
        }
        None
    };
    let next = |seen: &mut Vec<String>| {
        let end = Instant::now() + Duration::from_secs(120);
        while Instant::now() < end {
            if let Some(found) = started(seen) {
                return found;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("no holder started within 120 s");
    };
    let mut seen = Vec::new();
    let mut children: Vec<Child> = vec![hold()];
    let (mut holder, _) = next(&mut seen);
    for _ in 0..WAITERS {
        children.push(hold());
    }
    // Let every waiter join the line, then count the node's writes and no-op updates.
    std::thread::sleep(Duration::from_secs(10));
    let (before, at) = (writes(node), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    let rate = (writes(node) - before) as f64 / at.elapsed().as_secs_f64();
    println!("\na line of {WAITERS} waiters:");
    println!("  requests to the node: {rate:.1}/s");
    goal("requests a second, 50 waiters", rate, "<= 50", rate <= 50.0);
    let mut handoffs = Vec::new();
    for _ in 0..HANDOFFS {
        // The line settles first (every waiter polls within 2 s): what is measured is how soon
        // the head sees a release, not how soon the one behind learns it is now the head.
        std::thread::sleep(Duration::from_millis(2500));
        let released = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        std::fs::write(format!("{d}/go.{holder}"), "").expect("let go");
        let (pid, ns) = next(&mut seen);
        handoffs.push(Duration::from_nanos(ns.saturating_sub(released) as u64));
        holder = pid;
    }
    let p50 = median(&mut handoffs);
    println!(
        "  release to the next holder's start, median of {}: {:.1} ms",
        handoffs.len(),
        ms(p50)
    );
    goal(
        "head of the line, p50",
        ms(p50),
        "<= 100 ms",
        p50 <= Duration::from_millis(100),
    );
    // Everyone else goes through at once: a go file for every pid there will be is not known, so
    // each remaining holder is let go as it starts.
    for _ in 0..WAITERS - HANDOFFS {
        std::fs::write(format!("{d}/go.{holder}"), "").expect("let go");
        holder = next(&mut seen).0;
    }
    std::fs::write(format!("{d}/go.{holder}"), "").expect("let go");
    for child in &mut children {
        support::wait_exit(child, Duration::from_secs(120));
    }
}

/// The node's writes and no-op updates on the index so far: one per dlock request.
fn writes(node: &OpenSearchServer) -> u64 {
    let (_, json) = node.json("GET", "/bench/_stats/indexing", None);
    let ix = &json["_all"]["primaries"]["indexing"];
    ix["index_total"].as_u64().unwrap_or(0) + ix["noop_update_total"].as_u64().unwrap_or(0)
}

fn code_of(line: &str) -> i32 {
    program("sh")
        .arg("-c")
        .arg(line)
        .stdout(Stdio::null())
        .status()
        .ok()
        .and_then(|s| s.code())
        .unwrap_or(-1)
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Acquisitions per second of `CONTENDERS` shell loops running `one` `ROUNDS_EACH` times.
fn contended(one: &str) -> f64 {
    let script = format!("for i in $(seq {ROUNDS_EACH}); do {one} || exit 1; done");
    let started = Instant::now();
    let mut loops: Vec<Child> = (0..CONTENDERS)
        .map(|_| {
            program("sh")
                .arg("-c")
                .arg(&script)
                .stdout(Stdio::null())
                .spawn()
                .expect("start a contender")
        })
        .collect();
    for child in &mut loops {
        let status = support::wait_exit(child, CONTENDED_LIMIT);
        assert!(status.success(), "a contender failed: {one}");
    }
    (CONTENDERS * ROUNDS_EACH) as f64 / started.elapsed().as_secs_f64()
}
