//! Hand-built fleets with known optima, every layout checked against the placement table.

use super::*;

/// H100 80GB profiles: (name, compute, memory, most per card).
const H100: &[(&str, u8, u8, u8)] = &[
    ("1g.10gb", 1, 1, 7),
    ("1g.20gb", 1, 2, 4),
    ("2g.20gb", 2, 2, 3),
    ("3g.40gb", 3, 4, 2),
    ("4g.40gb", 4, 4, 1),
    ("7g.80gb", 7, 8, 1),
];

fn shapes() -> Vec<Shape> {
    H100.iter()
        .map(|&(p, c, m, n)| Shape {
            profile: p.into(),
            compute_slices: c,
            memory_slices: m,
            max_per_card: n,
        })
        .collect()
}

/// Today's cards, each a list of profile names.
fn fleet(cards: &[&[&str]]) -> Vec<Item> {
    let shapes = shapes();
    let mut items = Vec::new();
    for (n, card) in cards.iter().enumerate() {
        for p in *card {
            items.push(Item {
                id: format!("MIG-{n}-{}", items.len()),
                shape: shapes.iter().position(|s| s.profile == *p).unwrap(),
                card: n,
            });
        }
    }
    items
}

/// NVIDIA's placement table read here on its own (not through `check_layout`): profile id,
/// starts, size.
fn placements() -> Vec<(u32, Vec<u8>, u8)> {
    let text = include_str!("../../../data/mig-placements.csv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("profile_id"))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[2].split_whitespace()
                    .map(|s| s.parse().unwrap())
                    .collect(),
                f[3].parse().unwrap(),
            )
        })
        .collect()
}

/// Checks every card of the packing by hand: each instance at a start its profile allows, no
/// two overlapping on the memory-slice axis, at most 7 compute slices, every instance once.
fn assert_valid(packing: &Packing, items: &[Item]) {
    let ids: BTreeMap<&str, u32> = BTreeMap::from([
        ("1g.10gb", 19),
        ("1g.20gb", 15),
        ("2g.20gb", 14),
        ("3g.40gb", 9),
        ("4g.40gb", 5),
        ("7g.80gb", 0),
    ]);
    let table = placements();
    let shapes = shapes();
    assert_eq!(packing.placed.len(), items.len());
    let mut seen: Vec<usize> = packing.placed.iter().map(|p| p.item).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), items.len(), "every instance placed once");
    for &card in &packing.used {
        let mut used = [false; 8];
        let mut compute = 0u32;
        for p in packing.placed.iter().filter(|p| p.card == card) {
            let shape = &shapes[items[p.item].shape];
            let (_, starts, size) = table
                .iter()
                .find(|(id, _, _)| *id == ids[shape.profile.as_str()])
                .unwrap();
            let start = p.start.expect("a 7/8 card's instances have starts");
            assert!(starts.contains(&start), "{} at {start}", shape.profile);
            assert_eq!(*size, shape.memory_slices);
            for s in start..start + size {
                assert!(!used[usize::from(s)], "overlap at memory slice {s}");
                used[usize::from(s)] = true;
            }
            compute += u32::from(shape.compute_slices);
        }
        assert!(compute <= 7, "{compute} compute slices on card {card}");
    }
}

fn packed(cards: &[&[&str]]) -> (Packing, Vec<Item>) {
    let items = fleet(cards);
    let p = pack(
        &shapes(),
        &items,
        cards.len(),
        7,
        8,
        ShareWeights::default(),
        Duration::from_secs(20),
    )
    .unwrap();
    assert_valid(&p, &items);
    (p, items)
}

/// First fit over the cards in order, largest memory first: what a simple packer does.
fn first_fit_decreasing(cards: &[&[&str]]) -> usize {
    let shapes = shapes();
    let mut items = fleet(cards);
    items.sort_by_key(|i| {
        let s = &shapes[i.shape];
        (
            std::cmp::Reverse(s.memory_slices),
            std::cmp::Reverse(s.compute_slices),
        )
    });
    let mut bins: Vec<Vec<Instance>> = Vec::new();
    for i in items {
        let inst = shapes[i.shape].instance();
        match bins.iter_mut().find(|b| {
            let mut with = (*b).clone();
            with.push(inst);
            check_layout(&with, 7, 8).is_ok()
        }) {
            Some(b) => b.push(inst),
            None => bins.push(vec![inst]),
        }
    }
    bins.len()
}

#[test]
fn seven_cards_of_one_small_instance_each_fit_on_one() {
    let one: &[&str] = &["1g.10gb"];
    let (p, items) = packed(&[one; 7]);
    assert!(p.optimal);
    assert_eq!(p.used.len(), 1);
    // Six move onto the card that keeps its own.
    assert_eq!(
        p.placed
            .iter()
            .filter(|x| items[x.item].card != x.card)
            .count(),
        6
    );
    assert_eq!(p.steps.len(), 6);
    assert!(p.steps.iter().all(|s| s.kind == StepKind::Move));
}

#[test]
fn the_optimum_where_first_fit_decreasing_needs_a_card_more() {
    // Two 3g.40gb and four 2g.20gb: first fit by size puts both 3g on one card (8 memory
    // slices) and needs two cards for the 2g (7 compute slices hold three): 3 cards. The
    // optimum is 2: 3g.40gb + 2 x 2g.20gb twice.
    let cards: &[&[&str]] = &[
        &["3g.40gb"],
        &["3g.40gb"],
        &["2g.20gb"],
        &["2g.20gb"],
        &["2g.20gb", "2g.20gb"],
    ];
    assert_eq!(first_fit_decreasing(cards), 3);
    let (p, _) = packed(cards);
    assert!(p.optimal);
    assert_eq!(p.used.len(), 2);
}

#[test]
fn a_four_g_and_a_three_g_share_a_card_but_two_four_g_never_do() {
    let cards: &[&[&str]] = &[&["4g.40gb"], &["4g.40gb"], &["3g.40gb"], &["3g.40gb"]];
    let (p, _) = packed(cards);
    assert!(p.optimal);
    assert_eq!(p.used.len(), 2);
}

#[test]
fn a_full_card_stays_and_whole_card_instances_never_share() {
    let cards: &[&[&str]] = &[
        &["7g.80gb"],
        &["7g.80gb"],
        &["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        &["1g.10gb"],
    ];
    let (p, items) = packed(cards);
    assert!(p.optimal);
    // 3g + 2g + 1g + 1g fill 7 compute slices: the fourth 1g needs a card of its own.
    assert_eq!(p.used.len(), 4);
    assert!(p.steps.is_empty(), "nothing gains from moving");
    assert!(p.placed.iter().all(|x| items[x.item].card == x.card));
}

#[test]
fn memory_slice_seven_takes_no_small_instance() {
    // Seven 1g.10gb use memory slices 0-6 and every compute slice; the eighth memory slice
    // is unusable by a 1g, so eight need two cards, and four 1g.20gb (2 memory slices each)
    // fill one card's memory.
    let one: &[&str] = &["1g.10gb"];
    let (p, _) = packed(&[one; 8]);
    assert!(p.optimal);
    assert_eq!(p.used.len(), 2);
    let two: &[&str] = &["1g.20gb"];
    let (p, _) = packed(&[two; 5]);
    assert!(p.optimal);
    assert_eq!(p.used.len(), 2);
}

#[test]
fn a_mixed_fleet_reaches_the_memory_bound() {
    // 60 cards, each half used: 30 hold a 3g.40gb alone, 30 a 2g.20gb with a 1g.10gb. Their
    // 210 memory slices need at least 27 cards of 8, and 27 suffice (an exhaustive search
    // over every card configuration, run outside this code, finds 27 the optimum): e.g.
    // 3g.40gb + 2g.20gb + 2 x 1g.10gb fills a card's 7 compute and 8 memory slices.
    let a: &[&str] = &["3g.40gb"];
    let b: &[&str] = &["2g.20gb", "1g.10gb"];
    let cards: Vec<&[&str]> = (0..60).map(|n| if n % 2 == 0 { a } else { b }).collect();
    let (p, _) = packed(&cards);
    assert!(p.optimal);
    assert_eq!(p.used.len(), 27);
    assert!(first_fit_decreasing(&cards) >= 27);
}

/// Each used card's profiles, sorted, by card.
fn layouts(p: &Packing, items: &[Item]) -> Vec<(usize, Vec<String>)> {
    let shapes = shapes();
    p.used
        .iter()
        .map(|&card| {
            let mut profiles: Vec<String> = p
                .placed
                .iter()
                .filter(|x| x.card == card)
                .map(|x| shapes[items[x.item].shape].profile.clone())
                .collect();
            profiles.sort();
            (card, profiles)
        })
        .collect()
}

#[test]
fn of_layouts_on_as_many_cards_the_one_that_strands_less() {
    // A 4g.40gb and seven 1g.10gb: 11 compute slices, two cards. The relaxation takes the 4g.40gb
    // with three 1g.10gb (its maximal column) and the other four on a card of their own: the
    // first card's memory slice 7 has no compute slice left, stranded. Moving one 1g.10gb strands
    // nothing: a 4g.40gb and two 1g.10gb leave a 1g.20gb room at 6, five 1g.10gb a 1g.10gb and a
    // 1g.20gb. (A 4g.40gb and one 1g.10gb beside six would strand nothing either, but moves two.)
    let cards: &[&[&str]] = &[
        &["4g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"],
        &["1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"],
    ];
    let (p, items) = packed(cards);
    assert!(p.optimal);
    assert_eq!(
        layouts(&p, &items),
        vec![
            (
                0,
                vec!["1g.10gb".into(), "1g.10gb".into(), "4g.40gb".into()]
            ),
            (1, vec!["1g.10gb".to_owned(); 5]),
        ]
    );
    assert_eq!(p.steps.len(), 1);
    assert_eq!((p.steps[0].from, p.steps[0].to), (0, 1));
    // The same again, whatever the run.
    assert_eq!(packed(cards).0, p);
}

#[test]
fn a_layout_that_strands_nothing_is_left_as_it_is() {
    // Two cards that each strand nothing, nothing moves. (The relaxation's columns alone would
    // move a 1g.10gb onto the 4g.40gb's card, stranding its memory slice 7.)
    let cards: &[&[&str]] = &[
        &["4g.40gb", "1g.10gb", "1g.10gb"],
        &["1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"],
    ];
    let (p, _) = packed(cards);
    assert_eq!(p.used.len(), 2);
    assert!(p.steps.is_empty());
}

#[test]
fn cards_that_can_free_none_and_strand_nothing_less_are_left_as_they_are() {
    // The demo's two A100s (profiles as an H100's): six 1g.10gb, and a 2g.20gb, two 1g.10gb and a
    // 3g.40gb. 13 compute slices need two cards, and neither strands anything (the first's
    // seventh compute slice and memory slice 6 still take a 1g.10gb; the second is full). The
    // relaxation's columns split them otherwise (a 3g.40gb beside the six, then stopped and
    // started again): five steps, three instances moved, that freed nothing and stranded nothing less.
    let cards: &[&[&str]] = &[
        &["1g.10gb"; 6],
        &["2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"],
    ];
    let (p, items) = packed(cards);
    assert!(p.optimal);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(
        layouts(&p, &items),
        vec![
            (0, vec!["1g.10gb".to_owned(); 6]),
            (
                1,
                vec![
                    "1g.10gb".into(),
                    "1g.10gb".into(),
                    "2g.20gb".into(),
                    "3g.40gb".into()
                ]
            ),
        ]
    );
}
