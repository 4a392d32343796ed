//! What holding a lock costs while nothing happens: the CPU time (user + system, from
//! `/proc/PID/stat`) of the locking process itself, not of its command, over a quiet period, for
//! several lockers at once, side by side.

use super::programs::program;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{read_pid, signal, wait_exit};

/// Starts each `(name, locker)` with a command appended that records its pid and sleeps, waits
/// until every command runs, and reports each locker's CPU time over the next `quiet`. The
/// commands are then ended (SIGTERM to the command, so a locker that does not forward signals, as
/// flock(1), ends too) and each locker must exit 0 within `quiet`.
pub fn idle_cpu(work: &Path, lockers: Vec<(&str, Command)>, quiet: Duration) -> Vec<Duration> {
    let mut running = Vec::new();
    for (i, (name, mut locker)) in lockers.into_iter().enumerate() {
        let marker = work.join(format!("idle-{i}.pid"));
        let child = locker
            .args(["sh", "-c", r#"echo $$ > "$0"; exec sleep 100000"#])
            .arg(&marker)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        running.push((name, child, marker));
    }
    let commands: Vec<u32> = running.iter().map(|(_, _, m)| read_pid(m)).collect();
    let before: Vec<Duration> = running.iter().map(|(_, c, _)| cpu(c.id())).collect();
    std::thread::sleep(quiet);
    let after: Vec<Duration> = running.iter().map(|(_, c, _)| cpu(c.id())).collect();
    for ((name, child, _), command) in running.iter_mut().zip(commands) {
        signal(command, libc::SIGTERM);
        let status = wait_exit(child, quiet);
        // The command died of SIGTERM: dlock reports 128 + 15, flock(1) passes 143 on too.
        assert!(matches!(status.code(), Some(0 | 143)), "{name}: {status}");
    }
    after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect()
}

/// `idle_cpu` for `quiet`, printed side by side with the goal (under 50 ms a minute).
pub fn report(work: &Path, lockers: Vec<(&str, Command)>, quiet: Duration) {
    let names: Vec<String> = lockers.iter().map(|(n, _)| n.to_string()).collect();
    println!(
        "\nidle: the locker's own CPU (utime + stime, in ticks of {} ms) while its command sleeps {}:",
        tick().as_millis(),
        humantime::format_duration(quiet)
    );
    let per_minute = |d: Duration| d.as_secs_f64() * 1000.0 * 60.0 / quiet.as_secs_f64().max(1.0);
    for (name, spent) in names.iter().zip(idle_cpu(work, lockers, quiet)) {
        println!(
            "  {name:<24} {:8.0} ms  ({:.0} ms a minute; goal under 50)",
            spent.as_secs_f64() * 1000.0,
            per_minute(spent)
        );
    }
}

/// `report` for dlock on `backend` at `url` beside flock(1) on a file in `work`.
pub fn report_beside_flock(work: &Path, dlock: &str, backend: &str, url: &str, quiet: Duration) {
    let mut dlock_idle = super::programs::build(dlock);
    dlock_idle.args(["--backend", backend, "--url", url, "run", "idle", "--"]);
    let mut flock_idle = program("flock");
    flock_idle.arg(work.join("idle.lock"));
    let name = format!("dlock {backend}");
    report(
        work,
        vec![(&name, dlock_idle), ("flock(1)", flock_idle)],
        quiet,
    );
}

/// A process's own CPU time so far (all its threads; not its children).
fn cpu(pid: u32) -> Duration {
    cpu_times(&pid.to_string()).0
}

/// A process's CPU time so far, from `/proc/PID/stat` (`pid` may be `self`): its own (all its
/// threads), and its own with that of the children it has reaped.
pub fn cpu_times(pid: &str) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15,
    // cutime 16, cstime 17.
    let rest = stat.rsplit_once(") ").expect("stat").1;
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| fields[i].parse::<u32>().expect("a time of /proc/PID/stat");
    let own = ticks(11) + ticks(12);
    (tick() * own, tick() * (own + ticks(13) + ticks(14)))
}

/// The unit of `/proc/PID/stat`'s times.
fn tick() -> Duration {
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Duration::from_secs(1) / u32::try_from(per_second).unwrap_or(100).max(1)
}
