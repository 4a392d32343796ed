//! Tree locks: siblings run together, an ancestor and its descendants exclude each other both
//! ways, and `..` is refused.

use std::process::Child;

use super::T;
use crate::support::target::Target;
use crate::support::*;

/// Holds `--tree PATH` in the background until the returned marker's twin `.stop` file appears.
fn hold_tree(t: &Target, tag: &str, path: &str, extra: &[&str]) -> (Child, String) {
    let log = t.scratch_file("log");
    let script = format!(
        "echo start {tag} >> {log}; touch {m}; while [ ! -e {m}.stop ]; do sleep 0.02; done; echo end {tag} >> {log}",
        m = t.scratch_file(tag)
    );
    let mut args = vec!["run", "--tree"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[path, "--", "sh", "-c", &script]);
    (t.dlock(&args).spawn().unwrap(), t.scratch_file(tag))
}

fn stop(child: &mut Child, marker: &str) {
    std::fs::write(format!("{marker}.stop"), "").unwrap();
    assert!(wait_exit(child, T).success());
}

/// Siblings under one directory run at the same time; an ancestor excludes its subtree both ways.
pub fn tree_siblings_run_together_and_ancestors_exclude_descendants(t: &Target) {
    let (mut a, ma) = hold_tree(t, "a", "/projects/site/a.txt", &[]);
    let (mut b, mb) = hold_tree(t, "b", "/projects/site//b.txt/", &[]);
    // Both siblings are inside at once: each waits for the stop file, so this proves overlap.
    wait_for_file(std::path::Path::new(&ma), T);
    wait_for_file(std::path::Path::new(&mb), T);

    // The ancestor cannot get in while work below runs...
    let out = output(t.dlock(&["run", "--tree", "-n", "/projects/site", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // ...but a reader of the subtree can.
    let out = output(t.dlock(&[
        "run",
        "--tree",
        "--shared",
        "-n",
        "/projects/site",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // A waiting ancestor gets in only after both siblings end.
    let (mut parent, mp) = hold_tree(t, "parent", "/projects/./site", &[]);
    stop(&mut a, &ma);
    stop(&mut b, &mb);
    wait_for_file(std::path::Path::new(&mp), T);
    // Work below now waits for the ancestor.
    let out = output(t.dlock(&["run", "--tree", "-n", "/projects/site/c.txt", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    stop(&mut parent, &mp);

    let log = std::fs::read_to_string(t.scratch_file("log")).unwrap();
    let order: Vec<&str> = log.lines().collect();
    let pos = |l: &str| {
        order
            .iter()
            .position(|x| *x == l)
            .unwrap_or_else(|| panic!("{l} in {log}"))
    };
    assert!(
        pos("start parent") > pos("end a") && pos("start parent") > pos("end b"),
        "{log}"
    );
    assert!(
        pos("start b") < pos("end a") && pos("start a") < pos("end b"),
        "siblings overlap: {log}"
    );
}

pub fn tree_paths_with_dotdot_are_refused(t: &Target) {
    let out = output(t.dlock(&["run", "--tree", "/projects/../etc", "--", "true"]));
    assert_eq!(code(&out), 64);
    assert!(stderr(&out).contains("`..`"), "{}", stderr(&out));
}
