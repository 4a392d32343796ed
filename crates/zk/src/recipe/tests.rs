//! The queue recipe's rules, checked on listings.

use super::*;

fn q(names: &[&str]) -> Vec<Child> {
    queue(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

#[test]
fn children_sort_by_sequence_and_unknown_kinds_count_as_exclusive() {
    let children = q(&[
        "_c_b-__READ__0000000003",
        "_c_a-lock-0000000001",
        "not-a-lock-node",
        "x-12345-0000000002",
        "_c_c-__WRIT__0000000004",
        "_c_d-__SEAT__0000000005",
        "5f0c2a9e41d34b7c8e6f012345678901",
        "0123456789abcdef__rlock__0000000006",
        "0123456789abcdef__lock__0000000007",
    ]);
    let kinds: Vec<(i64, Kind)> = children.iter().map(|c| (c.sequence, c.kind)).collect();
    assert_eq!(
        kinds,
        [
            (1, Kind::Exclusive),
            (2, Kind::Exclusive),
            (3, Kind::Shared),
            (4, Kind::Exclusive),
            (5, Kind::Seat),
            (6, Kind::Shared),
            (7, Kind::Exclusive)
        ]
    );
}

#[test]
fn exclusive_waiters_watch_only_their_predecessor() {
    let children = q(&[
        "a-lock-0000000001",
        "b-lock-0000000002",
        "c-lock-0000000003",
    ]);
    assert_eq!(verdict(&children, 0, 1), Verdict::Owns);
    assert_eq!(
        verdict(&children, 1, 1),
        Verdict::Watch("a-lock-0000000001".into())
    );
    assert_eq!(
        verdict(&children, 2, 1),
        Verdict::Watch("b-lock-0000000002".into())
    );
}

#[test]
fn readers_share_until_a_writer_queues_and_writers_wait_for_readers() {
    let children = q(&[
        "r1-__READ__0000000001",
        "r2-__READ__0000000002",
        "w-lock-0000000003",
        "r3-__READ__0000000004",
    ]);
    assert_eq!(owners(&children, |_| 1), [0, 1]);
    assert_eq!(
        verdict(&children, 2, 1),
        Verdict::Watch("r2-__READ__0000000002".into())
    );
    assert_eq!(
        verdict(&children, 3, 1),
        Verdict::Watch("w-lock-0000000003".into())
    );
}

#[test]
fn seats_admit_the_first_n_alongside_readers() {
    let children = q(&[
        "s1-__SEAT__0000000001",
        "r-__READ__0000000002",
        "s2-__SEAT__0000000003",
        "s3-__SEAT__0000000004",
    ]);
    assert_eq!(owners(&children, |_| 2), [0, 1, 2]);
    assert_eq!(verdict(&children, 3, 2), Verdict::WatchChildren);
    let behind_writer = q(&["w-lock-0000000001", "s-__SEAT__0000000002"]);
    assert_eq!(
        verdict(&behind_writer, 1, 5),
        Verdict::Watch("w-lock-0000000001".into())
    );
}

#[test]
fn curators_mutex_lets_in_the_first_lock_node_whatever_stands_before_it() {
    let names: Vec<String> = [
        "_c_r-__READ__0000000001",
        "_c_m-lock-0000000003",
        "_c_s-__SEAT__0000000002",
        "_c_n-lock-0000000004",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        curator_mutex_first(&names).map(String::as_str),
        Some("_c_m-lock-0000000003")
    );
    let kept = [names.clone(), vec!["_k_k-lock-0000000000".into()]].concat();
    assert_eq!(
        curator_mutex_first(&kept).map(String::as_str),
        Some("_k_k-lock-0000000000")
    );
    assert_eq!(curator_mutex_first(&names[..1]), None);
}

#[test]
fn an_exclusive_pair_is_one_place_in_line_and_a_lone_companion_still_excludes() {
    let names = [
        "_c_p-lock-0000000001",
        "_c_p-__WRIT__0000000002",
        "_c_r-__READ__0000000003",
    ];
    let children = q(&names);
    let got: Vec<&str> = children.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(got, ["_c_p-lock-0000000001", "_c_r-__READ__0000000003"]);
    assert_eq!(owners(&children, |_| 1), [0]);
    let listing: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        companion_in(&listing, "_c_p-lock-0000000001").as_deref(),
        Some("_c_p-__WRIT__0000000002")
    );
    assert_eq!(companion_in(&listing, "_c_r-__READ__0000000003"), None);
    assert_eq!(
        companion_name("_c_p-lock-0000000009", "lock-", "__WRIT__").as_deref(),
        Some("_c_p-__WRIT__0000000010")
    );
    // A seat's `__READ__` goes with it the same way.
    let seat = q(&["_c_s-__SEAT__0000000004", "_c_s-__READ__0000000005"]);
    assert_eq!(seat.len(), 1);
    assert_eq!(seat[0].kind, Kind::Seat);
    // Without its `lock-` node, or not made with it, a `__WRIT__` node is a writer of its own.
    for names in [
        &["_c_p-__WRIT__0000000002", "_c_r-__READ__0000000003"][..],
        &["_c_p-lock-0000000001", "_c_p-__WRIT__0000000003"],
        &["_c_p-lock-0000000001", "_c_q-__WRIT__0000000002"],
        &["p-lock-0000000001", "p-__WRIT__0000000002"],
    ] {
        let writers = q(names)
            .iter()
            .filter(|c| c.name.contains(WRITE_KIND))
            .count();
        assert_eq!(writers, 1, "{names:?}");
    }
}

/// The clients in the model below: dlock's three kinds of holder (seats out of two), Curator's
/// mutex and its read-write lock's two halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    DlockExclusive,
    DlockShared,
    DlockSeat,
    CuratorMutex,
    CuratorWriter,
    CuratorReader,
}

/// Curator's `StandardLockInternalsDriver.standardFixForSorting`: what follows the last
/// `lock_name`, or the whole name without one.
fn fix_for_sorting<'a>(name: &'a str, lock_name: &str) -> &'a str {
    match name.rfind(lock_name) {
        Some(i) => &name[i + lock_name.len()..],
        None => name,
    }
}

/// Curator's `LockInternals.getSortedChildren` with a recipe's sorter.
fn curator_sorted<'a>(names: &[&'a str], fix: impl Fn(&'a str) -> &'a str) -> Vec<&'a str> {
    let mut sorted = names.to_vec();
    sorted.sort_by(|a, b| fix(a).cmp(fix(b)));
    sorted
}

/// Whether Curator lets `node` in, as the recipe `who` judges `names`.
fn curator_owns(who: Who, names: &[&str], node: &str) -> bool {
    // InterProcessReadWriteLock's SortingLockInternalsDriver.
    let read_write = |n| fix_for_sorting(fix_for_sorting(n, "__READ__"), "__WRIT__");
    match who {
        Who::CuratorMutex => curator_sorted(names, |n| fix_for_sorting(n, "lock-"))[0] == node,
        Who::CuratorWriter => curator_sorted(names, read_write)[0] == node,
        Who::CuratorReader => {
            let sorted = curator_sorted(names, read_write);
            let me = sorted.iter().position(|n| *n == node).unwrap();
            !sorted[..me].iter().any(|n| n.contains("__WRIT__"))
        }
        _ => unreachable!("not Curator"),
    }
}

proptest::proptest! {
    /// Whatever the order of arrivals, and whoever has left since, no dlock holder ever holds
    /// beside a Curator mutex, writer or reader it conflicts with, by either side's judgement.
    #[test]
    fn dlock_and_curators_recipes_never_hold_together(
        arrivals in proptest::collection::vec((0..6u8, proptest::bool::ANY), 1..8)
    ) {
        let whos = [
            Who::DlockExclusive,
            Who::DlockShared,
            Who::DlockSeat,
            Who::CuratorMutex,
            Who::CuratorWriter,
            Who::CuratorReader,
        ];
        // Each client's nodes (its first one is whom the others see it by), if it stayed.
        let mut clients: Vec<(Who, Vec<String>)> = Vec::new();
        let mut next = 1;
        for (i, (kind, stays)) in arrivals.into_iter().enumerate() {
            let who = whos[kind as usize];
            let kinds: &[&str] = match who {
                Who::DlockExclusive => &["lock-", "__WRIT__"],
                Who::DlockShared | Who::CuratorReader => &["__READ__"],
                Who::DlockSeat => &["__SEAT__", "__READ__"],
                Who::CuratorMutex => &["lock-"],
                Who::CuratorWriter => &["__WRIT__"],
            };
            let nodes: Vec<String> = kinds
                .iter()
                .map(|k| {
                    next += 1;
                    format!("_c_{i:08}-0000-4000-8000-000000000000-{k}{:010}", next - 1)
                })
                .collect();
            if stays {
                clients.push((who, nodes));
            }
        }
        let names: Vec<String> = clients.iter().flat_map(|(_, n)| n.clone()).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let dlock_queue = queue(&names);
        let dlock_owners: Vec<&str> = owners(&dlock_queue, |_| 2)
            .into_iter()
            .map(|i| dlock_queue[i].name.as_str())
            .collect();
        let holding: Vec<Who> = clients
            .iter()
            .filter(|(who, nodes)| match who {
                Who::DlockExclusive | Who::DlockShared | Who::DlockSeat => {
                    dlock_owners.contains(&nodes[0].as_str())
                }
                curator => curator_owns(*curator, &refs, &nodes[0]),
            })
            .map(|(who, _)| *who)
            .collect();
        let shared = |w: &Who| matches!(w, Who::DlockShared | Who::DlockSeat | Who::CuratorReader);
        for (i, a) in holding.iter().enumerate() {
            for b in &holding[i + 1..] {
                let dlock = [a, b].iter().any(|w| {
                    matches!(w, Who::DlockExclusive | Who::DlockShared | Who::DlockSeat)
                });
                // Not yet: Curator's mutex never waits for a `__READ__` or `__SEAT__` node
                // (DESIGN).
                let known_gap = ([a, b].contains(&&Who::DlockShared)
                    || [a, b].contains(&&Who::DlockSeat))
                    && [a, b].contains(&&Who::CuratorMutex);
                proptest::prop_assert!(
                    !dlock || known_gap || (shared(a) && shared(b)),
                    "{:?} and {:?} hold together: {:?}", a, b, names
                );
            }
        }
        // And a client alone gets in: the pair never waits for itself.
        if clients.len() == 1 {
            proptest::prop_assert_eq!(holding.len(), 1);
        }
    }
}

#[test]
fn an_exclusive_kept_node_and_its_companion_are_judged_once() {
    let names: Vec<String> = [
        "_k_a-lock-0000000000",
        "_k_a-__WRIT__0000000000",
        "_k_b-__WRIT__0000000000",
        "_k_c-__READ__0000000000",
        "_c_d-lock-0000000003",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        kept_companion("/x/dlock/n/_k_a-lock-0000000000").as_deref(),
        Some("/x/dlock/n/_k_a-__WRIT__0000000000")
    );
    assert_eq!(kept_companion("_k_c-__READ__0000000000"), None);
    assert_eq!(
        kept_companion("_k_e-__SEAT__0000000000").as_deref(),
        Some("_k_e-__READ__0000000000")
    );
    assert_eq!(kept_companion("_c_d-lock-0000000003"), None);
    // A lone companion keeps the lock by its own record.
    assert_eq!(
        kept_to_judge(&names),
        [
            "_k_a-lock-0000000000",
            "_k_b-__WRIT__0000000000",
            "_k_c-__READ__0000000000"
        ]
    );
    assert_eq!(
        kept_with_companion("/d", "_k_a-lock-0000000000", &names),
        ["/d/_k_a-lock-0000000000", "/d/_k_a-__WRIT__0000000000"]
    );
    assert_eq!(
        kept_with_companion("/d", "_k_c-__READ__0000000000", &names),
        ["/d/_k_c-__READ__0000000000"]
    );
}
