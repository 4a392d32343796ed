//! A child's stderr collected on a thread, so that a test can wait for a line or read everything
//! the child said without blocking on the pipe (unlike `Watched`, it leaves the child to the test).

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{holds_within, wait_until};

/// How long a test waits for a line it expects.
const LINE_WITHIN: Duration = Duration::from_secs(60);

pub struct Stderr {
    text: Arc<Mutex<String>>,
    reader: JoinHandle<()>,
}

impl Stderr {
    /// Collects the stderr of `child`, which must have been spawned with it piped.
    pub fn of(child: &mut Child) -> Stderr {
        let pipe = child.stderr.take().expect("stderr piped");
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        Stderr { text, reader }
    }

    /// Waits for a line containing `needle` (a minute at most).
    pub fn wait_for(&self, needle: &str) {
        wait_until(&format!("stderr to say {needle:?}"), LINE_WITHIN, || {
            self.text.lock().unwrap().contains(needle)
        });
    }

    /// What the child wrote, all of it once its stderr has closed: read after its exit, the
    /// last lines may still be on their way (5 s at most, for a failure's message while it runs).
    pub fn text(&self) -> String {
        holds_within(Duration::from_secs(5), || self.reader.is_finished());
        self.text.lock().unwrap().clone()
    }
}
