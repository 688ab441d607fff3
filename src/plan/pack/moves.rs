//! Where the packing's layouts go and how to get there: each new layout to one of today's cards
//! (the most instances staying where they are), and the moves in an order in which no card ever
//! holds an invalid layout. Both visit what they compare by kind or by change, never all pairs, so
//! that a fleet of 10,000 cards plans in time linear in its cards.

use std::collections::{BTreeMap, BTreeSet};

/// One step of getting from today's layouts to the plan's. `Move`: the instance is created on its
/// new card, its workload moved, the old one deleted. When every destination is full (moves that
/// wait on one another), one instance is stopped first (`Stop`: deleted, its workload down) and
/// started again (`Start`) once its card has room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Move,
    Stop,
    Start,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub kind: StepKind,
    pub item: usize,
    pub from: usize,
    pub to: usize,
}

/// Which of today's `cards` each instance goes to (each of its shape `shape_of` and on card `card_of`
/// today): each `chosen` layout to a card of `today` (each card's counts of each of `shapes`
/// shapes), greatest overlap first, and as many instances of each shape as the new layout keeps on
/// a card stay there.
pub(super) fn targets(
    chosen: &[Vec<u8>],
    today: &[Vec<u8>],
    shape_of: &[usize],
    card_of: &[usize],
    cards: usize,
    shapes: usize,
) -> Vec<usize> {
    let layout_cards = layouts_to_cards(chosen, today);
    // Which instances stay: as many of each shape as the new layout keeps there.
    let items: Vec<(usize, usize)> = shape_of
        .iter()
        .copied()
        .zip(card_of.iter().copied())
        .collect();
    let mut target = vec![usize::MAX; items.len()];
    let mut room: Vec<Vec<u8>> = vec![vec![0u8; shapes]; cards];
    for (c, &n) in chosen.iter().zip(&layout_cards) {
        room[n].clone_from(c);
    }
    for (idx, &(shape, card)) in items.iter().enumerate() {
        if room[card][shape] > 0 {
            room[card][shape] -= 1;
            target[idx] = card;
        }
    }
    // The rest to the first card with room for their shape. Room only shrinks, so each shape's
    // first such card only moves on: one pass over the cards per shape.
    let mut first_room = vec![0usize; shapes];
    for (idx, &(shape, _)) in items.iter().enumerate() {
        if target[idx] == usize::MAX {
            let n = &mut first_room[shape];
            while *n < cards && room[*n][shape] == 0 {
                *n += 1;
            }
            assert!(*n < cards, "the chosen layouts hold every instance");
            room[*n][shape] -= 1;
            target[idx] = *n;
        }
    }
    target
}

/// At one level of [`layouts_to_cards`]: the chosen kinds at its overlap with a kind of today's
/// cards, and those cards.
type LevelKind<'a> = (Vec<usize>, &'a [usize]);

/// Each `chosen` layout's card of `today`: of every (layout, card) pair, greatest overlap first,
/// ties to the fuller card (so that the emptiest cards are the ones freed), then to the lower
/// card and the lower layout, each pair taken when neither is yet. Overlap and fullness depend
/// only on the two layouts, so the pairs are visited per distinct layout rather than one by one:
/// the layouts are a few dozen kinds, the cards thousands.
fn layouts_to_cards(chosen: &[Vec<u8>], today: &[Vec<u8>]) -> Vec<usize> {
    let overlap =
        |c: &[u8], t: &[u8]| -> u32 { c.iter().zip(t).map(|(a, b)| u32::from(*a.min(b))).sum() };
    let held = |t: &[u8]| -> u32 { t.iter().map(|&x| u32::from(x)).sum() };
    // The distinct chosen layouts, each with its layouts in order: within a kind the lowest
    // layout not yet placed is always the next taken.
    let mut chosen_kinds: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
    for (k, c) in chosen.iter().enumerate() {
        chosen_kinds.entry(c.as_slice()).or_default().push(k);
    }
    let chosen_kinds: Vec<(&[u8], Vec<usize>)> = chosen_kinds.into_iter().collect();
    let mut next = vec![0usize; chosen_kinds.len()];
    let mut today_kinds: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
    for (n, t) in today.iter().enumerate() {
        today_kinds.entry(t.as_slice()).or_default().push(n);
    }
    // Each (overlap, fullness) level, greatest first, with the cards it holds pairs for and,
    // per card's kind, the chosen kinds at that overlap.
    let mut levels: BTreeMap<(u32, u32), Vec<LevelKind<'_>>> = BTreeMap::new();
    for (t, ns) in &today_kinds {
        let mut by_overlap: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (ck, (c, _)) in chosen_kinds.iter().enumerate() {
            by_overlap.entry(overlap(c, t)).or_default().push(ck);
        }
        for (ov, cks) in by_overlap {
            levels
                .entry((ov, held(t)))
                .or_default()
                .push((cks, ns.as_slice()));
        }
    }
    let mut card_of = vec![usize::MAX; chosen.len()];
    let mut taken = vec![false; today.len()];
    for (_, kinds) in levels.into_iter().rev() {
        let mut at_level: Vec<(usize, &[usize])> = kinds
            .iter()
            .flat_map(|(cks, ns)| ns.iter().map(move |&n| (n, cks.as_slice())))
            .collect();
        at_level.sort_unstable_by_key(|&(n, _)| n);
        for (n, cks) in at_level {
            if taken[n] {
                continue;
            }
            let lowest = cks
                .iter()
                .filter_map(|&ck| chosen_kinds[ck].1.get(next[ck]).map(|&k| (k, ck)))
                .min();
            if let Some((k, ck)) = lowest {
                card_of[k] = n;
                taken[n] = true;
                next[ck] += 1;
            }
        }
    }
    assert!(
        card_of.iter().all(|&n| n != usize::MAX),
        "every chosen layout has a card"
    );
    card_of
}

/// The moves from today's layouts to `target`'s, in an order in which every card's layout stays
/// valid (`fits` says whether a card's members fit): each step the first stopped instance that
/// fits its card again is started, else the first instance left to move (in their order) that
/// fits its new card moves; when none does, the first left to move is stopped. Whether an instance
/// fits depends only on its new card's members, so one found not to fit is not asked again until
/// that card changes.
pub(super) fn steps(
    today: &[usize],
    target: &[usize],
    cards: usize,
    fits: &dyn Fn(&[usize]) -> bool,
) -> Vec<Step> {
    let mut on: Vec<Vec<usize>> = vec![Vec::new(); cards];
    for (idx, &n) in today.iter().enumerate() {
        on[n].push(idx);
    }
    let room_for = |on: &[Vec<usize>], i: usize| {
        let mut members = on[target[i]].clone();
        members.push(i);
        fits(&members)
    };
    // Left to move, in order; of those, the ones not known not to fit (`ready`), and the others
    // by the card they wait on.
    let mut pending: BTreeSet<usize> = (0..today.len())
        .filter(|&i| target[i] != today[i])
        .collect();
    let mut ready = pending.clone();
    let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); cards];
    // Each card's changes, and for a stopped instance found not to fit, its card's count then.
    let mut changes = vec![0u64; cards];
    let mut stopped: Vec<(usize, Option<u64>)> = Vec::new();
    fn changed(
        n: usize,
        changes: &mut [u64],
        waiting: &mut [Vec<usize>],
        ready: &mut BTreeSet<usize>,
        pending: &BTreeSet<usize>,
    ) {
        changes[n] += 1;
        for i in waiting[n].drain(..) {
            if pending.contains(&i) {
                ready.insert(i);
            }
        }
    }
    let mut steps = Vec::new();
    loop {
        let mut start = None;
        for (k, (i, blocked_at)) in stopped.iter_mut().enumerate() {
            if *blocked_at == Some(changes[target[*i]]) {
                continue;
            }
            if room_for(&on, *i) {
                start = Some(k);
                break;
            }
            *blocked_at = Some(changes[target[*i]]);
        }
        if let Some(k) = start {
            let (i, _) = stopped.remove(k);
            on[target[i]].push(i);
            changed(target[i], &mut changes, &mut waiting, &mut ready, &pending);
            steps.push(Step {
                kind: StepKind::Start,
                item: i,
                from: today[i],
                to: target[i],
            });
            continue;
        }
        let mut moving = None;
        while let Some(i) = ready.pop_first() {
            if room_for(&on, i) {
                moving = Some(i);
                break;
            }
            waiting[target[i]].push(i);
        }
        if let Some(i) = moving {
            pending.remove(&i);
            on[today[i]].retain(|&x| x != i);
            on[target[i]].push(i);
            changed(today[i], &mut changes, &mut waiting, &mut ready, &pending);
            changed(target[i], &mut changes, &mut waiting, &mut ready, &pending);
            steps.push(Step {
                kind: StepKind::Move,
                item: i,
                from: today[i],
                to: target[i],
            });
            continue;
        }
        // Every destination is full: stop one instance so that its card makes room.
        // (Once every move is done each card holds a part of its planned layout, so a stopped
        // instance always finds room: this loop ends.)
        let Some(i) = pending.pop_first() else {
            break;
        };
        on[today[i]].retain(|&x| x != i);
        changed(today[i], &mut changes, &mut waiting, &mut ready, &pending);
        stopped.push((i, None));
        steps.push(Step {
            kind: StepKind::Stop,
            item: i,
            from: today[i],
            to: target[i],
        });
    }
    steps
}
