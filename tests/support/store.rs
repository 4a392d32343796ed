//! What the suite knows of a store, given once by the store's own test folder: its `store.rs`
//! holds a `static STORE: Store` (`tests/NAME/store.rs`), which each `Target` on it carries, and
//! `stores!` in tests/main.rs lists every folder. `Store` and `Caps` have no default, so a store
//! that leaves a field out does not compile, and nothing outside its folder names it.

use super::caps::Caps;
use super::target::Target;

/// `--backend BACKEND --url URL`.
pub fn backend_at(backend: &str, url: String) -> Vec<String> {
    vec!["--backend".into(), backend.into(), "--url".into(), url]
}

/// `127.0.0.1:PORT,127.0.0.1:PORT...`: a URL's hosts for servers on these loopback ports.
pub fn loopback_hosts(ports: &[u16]) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    hosts.join(",")
}

/// One store, as the contract's scenarios, the fault checker and the documentation's examples
/// see it.
pub struct Store {
    /// `--backend`'s value for it, which the command also gives its command in `DLOCK_BACKEND`.
    pub backend: &'static str,
    /// Whether this build has it: the test crate is built with the features dlock is
    /// (`cfg!(feature = "NAME")`).
    pub built: bool,
    /// The URL schemes (before `://`) that select it, for a documented line that names it by its
    /// URL only.
    pub schemes: &'static [&'static str],
    /// `--backend` and `--url` for its servers on these loopback ports.
    pub args: fn(&[u16]) -> Vec<String>,
    /// What it can do, which the contract's scenarios ask instead of which store it is.
    pub caps: Caps,
    /// How many sixths of the file backend's rounds a loop of contending runs makes on this
    /// target: fewer where an acquisition costs more, so that it takes about as long on each.
    pub rounds_sixths: fn(&Target) -> usize,
    /// The target a documented line that selects it runs on (docs_examples.rs).
    pub for_examples: fn() -> Target,
}
