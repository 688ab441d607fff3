//! Packing one GPU model's MIG instances onto the fewest cards, exactly.
//!
//! The method is the configuration integer program of bin packing: every multiset of profiles that
//! one card can hold (checked against NVIDIA's placement table by [`check_layout`]) is a column,
//! and the program chooses how many cards take each, covering every profile's count, with as few
//! cards as it can. The columns are few (a 7/8 card holds a few dozen maximal multisets), so the
//! program is small whatever the fleet's size. `microlp` (pure Rust) solves its linear relaxation,
//! whose optimum rounded up bounds every packing from below; the relaxation's solution rounded down
//! packs most instances, and the integer program (branch and bound) packs the few left. A packing
//! that meets the bound is proven the fewest (`optimal`); one that does not is said to be unproven.
//! Then, with the number of cards fixed, two cards' instances are shared out anew where another
//! split strands less (`pack/strand.rs`: the second objective, lowered, not proved the least); the new
//! layouts go to today's cards so that as many instances as possible stay where they are (greedy
//! by overlap: the third objective, minimised, not proved minimal), and the moves are ordered by
//! simulating them, so that no card ever holds an invalid layout on the way. A packing that frees
//! no card and strands no less than today is no plan at all: today's layouts stay, nothing moves.

use std::collections::BTreeMap;
use std::time::Duration;

use microlp::{ComparisonOp, OptimizationDirection, Problem};

use crate::domain::profiles::{Instance, check_layout};
use crate::domain::slice::ShareWeights;

/// A profile as the packer sees it: its name, slice counts and how many one card may hold.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shape {
    pub profile: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub max_per_card: u8,
}

impl Shape {
    fn instance(&self) -> Instance {
        Instance {
            compute_slices: self.compute_slices,
            memory_slices: self.memory_slices,
        }
    }
}

/// One MIG instance to place, and the card it is on today (an index into the cards given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: String,
    pub shape: usize,
    pub card: usize,
}

/// Where an instance goes: the card (an index into today's cards) and its start on the memory-slice
/// axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub item: usize,
    pub card: usize,
    pub start: Option<u8>,
}

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

#[derive(Debug, Clone, PartialEq)]
pub struct Packing {
    /// Whether the packing meets the linear relaxation's bound: no fewer cards can hold them.
    pub optimal: bool,
    /// The cards that hold instances in the plan (indices into today's cards).
    pub used: Vec<usize>,
    pub placed: Vec<Placed>,
    pub steps: Vec<Step>,
}

#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("a card of this model cannot hold a {0} instance")]
    Unplaceable(String),
    #[error("the packing program could not be solved: {0}")]
    Solver(String),
}

/// Packs `items` (of `shapes`) onto cards of `total_compute`/`total_memory` slices, of which there
/// are `cards` today; of layouts on as many cards, those that strand less, weighed with `weights`.
pub fn pack(
    shapes: &[Shape],
    items: &[Item],
    cards: usize,
    total_compute: u8,
    total_memory: u8,
    weights: ShareWeights,
    time_limit: Duration,
) -> Result<Packing, PackError> {
    if items.is_empty() {
        return Ok(Packing {
            optimal: true,
            used: Vec::new(),
            placed: Vec::new(),
            steps: Vec::new(),
        });
    }
    let fits = |counts: &[u8]| -> bool {
        let instances: Vec<Instance> = counts
            .iter()
            .enumerate()
            .flat_map(|(s, &n)| std::iter::repeat_n(shapes[s].instance(), usize::from(n)))
            .collect();
        check_layout(&instances, total_compute, total_memory).is_ok()
    };
    let mut demand = vec![0u32; shapes.len()];
    for i in items {
        demand[i.shape] += 1;
    }
    for (s, shape) in shapes.iter().enumerate() {
        let mut one = vec![0u8; shapes.len()];
        one[s] = 1;
        if demand[s] > 0 && !fits(&one) {
            return Err(PackError::Unplaceable(shape.profile.clone()));
        }
    }
    let configs = maximal_configs(shapes, &demand, &fits);

    // The linear relaxation first: its optimum, rounded up, bounds every packing from below.
    // Its solution rounded down is most of a packing; the few instances left are packed by the
    // integer program, which stays small (at most one fractional column per profile).
    let relaxed = solve(&configs, &demand, false, time_limit)?;
    let bound = (relaxed.iter().sum::<f64>() - 1e-6).ceil().max(0.0) as usize;
    let mut chosen: Vec<Vec<u8>> = Vec::new();
    let mut left = demand.clone();
    for (c, x) in configs.iter().zip(&relaxed) {
        let n = (x + 1e-9).floor().max(0.0) as usize;
        for _ in 0..n {
            for (s, l) in left.iter_mut().enumerate() {
                *l = l.saturating_sub(u32::from(c[s]));
            }
        }
        chosen.extend(std::iter::repeat_n(c.clone(), n));
    }
    if left.iter().any(|&l| l > 0) {
        let rest = solve(&configs, &left, true, time_limit)?;
        for (c, x) in configs.iter().zip(&rest) {
            chosen.extend(std::iter::repeat_n(c.clone(), x.round().max(0.0) as usize));
        }
    }
    // Proven the fewest when the packing meets the bound.
    let optimal = chosen.iter().filter(|c| c.iter().any(|&n| n > 0)).count() <= bound;
    // Cover exactly: what a chosen card could hold beyond the demand stays empty.
    let mut surplus: Vec<i64> = (0..shapes.len())
        .map(|s| chosen.iter().map(|c| i64::from(c[s])).sum::<i64>() - i64::from(demand[s]))
        .collect();
    for c in chosen.iter_mut().rev() {
        for (s, extra) in surplus.iter_mut().enumerate() {
            let take = (*extra).min(i64::from(c[s])).max(0);
            c[s] -= take as u8;
            *extra -= take;
        }
    }
    chosen.retain(|c| c.iter().any(|&n| n > 0));
    if chosen.len() > cards {
        // Today's layouts are valid, so the optimum never needs more cards than there are: a
        // solver that stopped early may, and then today's layout is the plan.
        return Ok(keep_today(
            items,
            cards,
            shapes,
            total_compute,
            total_memory,
        ));
    }
    // As many cards, stranding less: the second objective.
    let instances: Vec<Instance> = shapes.iter().map(Shape::instance).collect();
    let chosen = strand::strand_less(chosen, &instances, total_compute, total_memory, weights);

    // Today's instances per card and shape.
    let mut today = vec![vec![0u8; shapes.len()]; cards];
    for i in items {
        today[i.card][i.shape] += 1;
    }
    // A packing that frees no card and strands no less than today's layouts would only move
    // instances for nothing: today's layouts are the plan.
    let target = if strand::gains_nothing(
        &chosen,
        &today,
        &instances,
        total_compute,
        total_memory,
        weights,
    ) {
        items.iter().map(|i| i.card).collect()
    } else {
        targets(&chosen, &today, items, cards, shapes.len())
    };
    Ok(finish(
        items,
        &target,
        cards,
        shapes,
        total_compute,
        total_memory,
        optimal,
    ))
}

/// Which of today's `cards` each instance of `items` goes to: each `chosen` layout to a card of
/// `today` (each card's counts of each of `shapes` shapes), greatest overlap first, and as many
/// instances of each shape as the new layout keeps on a card stay there.
fn targets(
    chosen: &[Vec<u8>],
    today: &[Vec<u8>],
    items: &[Item],
    cards: usize,
    shapes: usize,
) -> Vec<usize> {
    // Each chosen layout to a card of today, greatest overlap first; ties go to the fuller card,
    // so that the emptiest cards are the ones freed.
    let overlap =
        |c: &[u8], t: &[u8]| -> u32 { c.iter().zip(t).map(|(a, b)| u32::from(*a.min(b))).sum() };
    let mut pairs: Vec<(u32, u32, usize, usize)> = Vec::new();
    for (k, c) in chosen.iter().enumerate() {
        for (n, t) in today.iter().enumerate() {
            let held: u32 = t.iter().map(|&x| u32::from(x)).sum();
            pairs.push((overlap(c, t), held, k, n));
        }
    }
    pairs.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.3.cmp(&b.3)));
    let mut card_of = vec![None; chosen.len()];
    let mut taken = vec![false; cards];
    for (_, _, k, n) in pairs {
        if card_of[k].is_none() && !taken[n] {
            card_of[k] = Some(n);
            taken[n] = true;
        }
    }
    // Which instances stay: as many of each shape as the new layout keeps there.
    let mut target = vec![usize::MAX; items.len()];
    let mut room: Vec<Vec<u8>> = vec![vec![0u8; shapes]; cards];
    for (k, c) in chosen.iter().enumerate() {
        let n = card_of[k].expect("every chosen layout has a card");
        room[n].clone_from(c);
    }
    for (idx, i) in items.iter().enumerate() {
        if room[i.card][i.shape] > 0 {
            room[i.card][i.shape] -= 1;
            target[idx] = i.card;
        }
    }
    for (idx, i) in items.iter().enumerate() {
        if target[idx] == usize::MAX {
            let n = (0..cards)
                .find(|&n| room[n][i.shape] > 0)
                .expect("the chosen layouts hold every instance");
            room[n][i.shape] -= 1;
            target[idx] = n;
        }
    }
    target
}

fn keep_today(
    items: &[Item],
    cards: usize,
    shapes: &[Shape],
    total_compute: u8,
    total_memory: u8,
) -> Packing {
    let target: Vec<usize> = items.iter().map(|i| i.card).collect();
    finish(
        items,
        &target,
        cards,
        shapes,
        total_compute,
        total_memory,
        false,
    )
}

/// The placements of the new layouts and the steps that reach them.
fn finish(
    items: &[Item],
    target: &[usize],
    cards: usize,
    shapes: &[Shape],
    total_compute: u8,
    total_memory: u8,
    optimal: bool,
) -> Packing {
    let layout = |members: &[usize]| -> Result<Option<Vec<u8>>, ()> {
        let instances: Vec<Instance> = members
            .iter()
            .map(|&i| shapes[items[i].shape].instance())
            .collect();
        check_layout(&instances, total_compute, total_memory).map_err(|_| ())
    };
    let mut placed = Vec::with_capacity(items.len());
    let mut used = Vec::new();
    for n in 0..cards {
        let members: Vec<usize> = (0..items.len()).filter(|&i| target[i] == n).collect();
        if members.is_empty() {
            continue;
        }
        used.push(n);
        // A chosen layout always fits; today's (kept when the solver found nothing better) may
        // not, if a card was cut anew within its last hour: it is then shown without starts.
        let starts = layout(&members).ok().flatten();
        for (k, &i) in members.iter().enumerate() {
            placed.push(Placed {
                item: i,
                card: n,
                start: starts.as_ref().map(|s| s[k]),
            });
        }
    }
    placed.sort_by_key(|p| p.item);

    // The moves, in an order in which every card's layout stays valid.
    let mut on: Vec<Vec<usize>> = vec![Vec::new(); cards];
    for (idx, i) in items.iter().enumerate() {
        on[i.card].push(idx);
    }
    let mut pending: Vec<usize> = (0..items.len())
        .filter(|&i| target[i] != items[i].card)
        .collect();
    let mut stopped: Vec<usize> = Vec::new();
    let mut steps = Vec::new();
    while !pending.is_empty() || !stopped.is_empty() {
        let room_for = |on: &Vec<Vec<usize>>, i: usize| {
            let mut members = on[target[i]].clone();
            members.push(i);
            layout(&members).is_ok()
        };
        if let Some(k) = stopped.iter().position(|&i| room_for(&on, i)) {
            let i = stopped.remove(k);
            on[target[i]].push(i);
            steps.push(Step {
                kind: StepKind::Start,
                item: i,
                from: items[i].card,
                to: target[i],
            });
            continue;
        }
        if let Some(k) = pending.iter().position(|&i| room_for(&on, i)) {
            let i = pending.remove(k);
            on[items[i].card].retain(|&x| x != i);
            on[target[i]].push(i);
            steps.push(Step {
                kind: StepKind::Move,
                item: i,
                from: items[i].card,
                to: target[i],
            });
            continue;
        }
        // Every destination is full: stop one instance so that its card makes room.
        // (Once every move is done each card holds a part of its planned layout, so a stopped
        // instance always finds room: this loop ends.)
        if pending.is_empty() {
            break;
        }
        let i = pending.remove(0);
        on[items[i].card].retain(|&x| x != i);
        stopped.push(i);
        steps.push(Step {
            kind: StepKind::Stop,
            item: i,
            from: items[i].card,
            to: target[i],
        });
    }
    Packing {
        optimal,
        used,
        placed,
        steps,
    }
}

/// How many cards take each configuration so that every shape's demand is covered with the fewest
/// cards: integer (branch and bound) or the linear relaxation.
fn solve(
    configs: &[Vec<u8>],
    demand: &[u32],
    integer: bool,
    time_limit: Duration,
) -> Result<Vec<f64>, PackError> {
    let mut problem = Problem::new(OptimizationDirection::Minimize);
    problem.set_time_limit(time_limit);
    let most: u32 = demand.iter().sum();
    let vars: Vec<_> = configs
        .iter()
        .map(|_| {
            if integer {
                problem.add_integer_var(1.0, (0, i32::try_from(most).unwrap_or(i32::MAX)))
            } else {
                problem.add_var(1.0, (0.0, f64::from(most)))
            }
        })
        .collect();
    for (s, &d) in demand.iter().enumerate() {
        if d == 0 {
            continue;
        }
        let row: Vec<_> = configs
            .iter()
            .zip(&vars)
            .filter(|(c, _)| c[s] > 0)
            .map(|(c, v)| (*v, f64::from(c[s])))
            .collect();
        problem.add_constraint(row.as_slice(), ComparisonOp::Ge, f64::from(d));
    }
    let solution = problem
        .solve()
        .map_err(|e| PackError::Solver(e.to_string()))?
        .into_solution()
        .map_err(|_| PackError::Solver("no solution within the time limit".into()))?;
    Ok(vars.iter().map(|v| solution.var_value(*v)).collect())
}

/// Every multiset of shapes one card holds to which no instance of a shape in demand can be added.
fn maximal_configs(shapes: &[Shape], demand: &[u32], fits: &dyn Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let mut out: BTreeMap<Vec<u8>, ()> = BTreeMap::new();
    let mut counts = vec![0u8; shapes.len()];
    fn walk(
        s: usize,
        counts: &mut Vec<u8>,
        shapes: &[Shape],
        demand: &[u32],
        fits: &dyn Fn(&[u8]) -> bool,
        out: &mut BTreeMap<Vec<u8>, ()>,
    ) {
        if s == shapes.len() {
            if counts.iter().all(|&n| n == 0) {
                return;
            }
            let maximal = (0..shapes.len()).all(|t| {
                if demand[t] == 0 || counts[t] >= shapes[t].max_per_card {
                    return true;
                }
                counts[t] += 1;
                let more = fits(counts);
                counts[t] -= 1;
                !more
            });
            if maximal {
                out.insert(counts.clone(), ());
            }
            return;
        }
        let limit = if demand[s] == 0 {
            0
        } else {
            shapes[s].max_per_card
        };
        for n in 0..=limit {
            counts[s] = n;
            if n > 0 && !fits(counts) {
                break;
            }
            walk(s + 1, counts, shapes, demand, fits, out);
        }
        counts[s] = 0;
    }
    walk(0, &mut counts, shapes, demand, fits, &mut out);
    out.into_keys().collect()
}

mod strand;

#[cfg(test)]
mod tests;
