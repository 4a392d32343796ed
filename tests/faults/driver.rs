//! The fault driver: one fault at a time, each aimed at a holder caught at the start of its
//! critical section (see `Resource::arm`) or at the servers.

use std::collections::BTreeMap;
use std::time::Duration;

use super::clients::Board;
use super::resource::{Resource, Victim};
use crate::support::relay::Relay;
use crate::support::signal_group;
use crate::support::target::Target;

/// How long the driver waits for a client of the armed set to begin a critical section.
const CATCH_WITHIN: Duration = Duration::from_secs(10);
/// How long a cut-off or stopped holder's write may take to land once it runs again.
const WRITE_WITHIN: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// SIGKILL the holder's dlock.
    Kill,
    /// SIGSTOP the holder's dlock and command until another holder took over (a "GC pause"),
    /// then let the command write before dlock runs again: the write the lease cannot stop.
    Pause,
    /// Freeze the relays between the holder and `cut` of the servers.
    Partition { cut: usize },
    /// SIGSTOP a server (the leader of an ensemble) past the lease.
    ServerPause,
    /// Crash a server (the leader of an ensemble) and start it again.
    ServerRestart,
}

/// The faults a target can take, with their weights in a soak (the first round has each in turn).
pub fn menu(t: &Target) -> Vec<(Fault, u64)> {
    let mut menu = vec![(Fault::Pause, 3), (Fault::Kill, 2)];
    if t.backend() == "file" {
        return menu;
    }
    let n = t.ports.len();
    // One URL per server: Redlock (behind Sentinel, one URL names all the nodes, and only the
    // master counts).
    if n >= 3 && t.backend() == "redis" && t.urls().len() == n {
        // Redlock: cut off from a minority it must keep the lock, from a majority lose it.
        menu.insert(0, (Fault::Partition { cut: n / 2 + 1 }, 2));
        menu.insert(0, (Fault::Partition { cut: n / 2 }, 2));
    } else {
        menu.insert(0, (Fault::Partition { cut: n }, 3));
    }
    menu.extend([(Fault::ServerPause, 1), (Fault::ServerRestart, 1)]);
    menu
}

/// What a partition must do to its holder's run: keep the lock (exit 0, every write accepted) or
/// lose it (exit 79).
pub struct Expected {
    pub run: String,
    pub keeps: bool,
    pub fault: String,
}

pub struct Driver<'a> {
    pub t: &'a Target,
    pub resource: &'a Resource,
    pub board: &'a Board,
    /// Per relayed client (clients 0, 1, ...), one relay per server.
    pub relays: &'a [Vec<Relay>],
    pub ttl: Duration,
    pub faults: BTreeMap<String, usize>,
    pub expected: Vec<Expected>,
    pub missed: usize,
}

impl Driver<'_> {
    pub fn label(&self, fault: Fault) -> String {
        let n = self.t.ports.len();
        let what = self.t.servers.first().map_or("server", |s| s.what());
        match fault {
            Fault::Kill => "holder SIGKILLed".into(),
            Fault::Pause if self.t.backend() == "file" => "holder paused".into(),
            Fault::Pause => "holder paused past its lease".into(),
            Fault::Partition { .. } if n == 1 => "holder cut off from the server".into(),
            Fault::Partition { cut } if cut == n => "holder cut off from every server".into(),
            Fault::Partition { cut } if cut * 2 < n => {
                format!("holder cut off from {cut} of {n} servers (keeps the lock)")
            }
            Fault::Partition { cut } => {
                format!("holder cut off from {cut} of {n} servers (loses it)")
            }
            Fault::ServerPause => format!("{what} paused past the lease"),
            Fault::ServerRestart if what == "leader" => "leader killed and restarted".into(),
            Fault::ServerRestart if what == "master" => {
                "master killed, failed over, back as a replica".into()
            }
            Fault::ServerRestart => format!("{what} restarted"),
        }
    }

    /// Injects one fault; false when no holder could be caught for it.
    pub fn inject(&mut self, fault: Fault, rng: &mut super::Rng) -> bool {
        let done = match fault {
            Fault::Kill => self.kill(),
            Fault::Pause => self.pause(),
            Fault::Partition { cut } => self.partition(cut, rng),
            Fault::ServerPause => {
                let server = &self.t.servers[rng.below(self.t.servers.len() as u64) as usize];
                server.pause(self.ttl * 3 / 2);
                true
            }
            Fault::ServerRestart => {
                let server = &self.t.servers[rng.below(self.t.servers.len() as u64) as usize];
                server.restart();
                true
            }
        };
        if done {
            *self.faults.entry(self.label(fault)).or_default() += 1;
        } else {
            self.missed += 1;
        }
        done
    }

    /// The next holder among `clients` to begin its critical section, with its dlock's pid.
    fn catch(&self, clients: Vec<usize>) -> Option<(Victim, u32)> {
        let caught = self.resource.arm(clients).recv_timeout(CATCH_WITHIN);
        self.resource.disarm();
        let victim = caught.ok()?;
        match self.board.dlock_of(victim.client) {
            Some(dlock) => Some((victim, dlock)),
            None => {
                victim.go();
                None
            }
        }
    }

    fn every_client(&self) -> Vec<usize> {
        (0..self.board.current.lock().expect("board").len()).collect()
    }

    /// How long another holder may take to take over from one that stopped renewing: its lease
    /// or session runs out, then a waiter notices.
    fn takeover_within(&self) -> Duration {
        (self.ttl * 20).max(Duration::from_secs(10))
    }

    fn kill(&mut self) -> bool {
        let Some((victim, dlock)) = self.catch(self.every_client()) else {
            return false;
        };
        crate::support::signal(dlock, libc::SIGKILL);
        victim.go();
        true
    }

    fn pause(&mut self) -> bool {
        let Some((victim, dlock)) = self.catch(self.every_client()) else {
            return false;
        };
        let (run, token, command) = (victim.run.clone(), victim.token, victim.pid);
        // Both are stopped (or the pause is no fault at all); each leads a group of its own.
        assert!(signal_group(dlock, libc::SIGSTOP), "stop dlock {dlock}");
        if !signal_group(command, libc::SIGSTOP) {
            // Its command is gone already (a run asked it to end, and its dlock ended it, before
            // the stop came): there is nothing to pause; its dlock goes on.
            assert!(signal_group(dlock, libc::SIGCONT), "continue dlock {dlock}");
            victim.go();
            return false;
        }
        // The answer waits in the socket until the command runs again.
        victim.go();
        // A flock(2) lock has no lease: nobody can take over, the pause just ends.
        let limit = if self.t.backend() == "file" {
            self.ttl * 3 / 2
        } else {
            self.takeover_within()
        };
        let taken_over = self.resource.wait_for_token_above(token, limit);
        let before = self.resource.log().writes_by(&run);
        signal_group(command, libc::SIGCONT);
        if taken_over {
            // The stale write lands while dlock still sleeps: only fencing can refuse it.
            self.resource.wait_for_write_by(&run, before, WRITE_WITHIN);
        }
        signal_group(dlock, libc::SIGCONT);
        true
    }

    fn partition(&mut self, cut: usize, rng: &mut super::Rng) -> bool {
        let Some((victim, _)) = self.catch((0..self.relays.len()).collect()) else {
            return false;
        };
        let relays = &self.relays[victim.client];
        let mut order: Vec<usize> = (0..relays.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let frozen = &order[..cut];
        for &r in frozen {
            relays[r].freeze();
        }
        let keeps = cut * 2 < relays.len();
        if keeps {
            // Twice the lease, renewed through the majority it still reaches.
            std::thread::sleep(self.ttl * 2);
        } else {
            // Until another holder has the lock (its dlock has given up the command by then).
            self.resource
                .wait_for_token_above(victim.token, self.takeover_within());
        }
        self.expected.push(Expected {
            run: victim.run.clone(),
            keeps,
            fault: self.label(Fault::Partition { cut }),
        });
        victim.go();
        for &r in frozen {
            relays[r].thaw();
        }
        true
    }
}
