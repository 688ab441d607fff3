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
        {
            let shape_of: Vec<usize> = items.iter().map(|i| i.shape).collect();
            let card_of: Vec<usize> = items.iter().map(|i| i.card).collect();
            moves::targets(&chosen, &today, &shape_of, &card_of, cards, shapes.len())
        }
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
    let mut members_of: Vec<Vec<usize>> = vec![Vec::new(); cards];
    for (i, &n) in target.iter().enumerate() {
        members_of[n].push(i);
    }
    let mut placed = Vec::with_capacity(items.len());
    let mut used = Vec::new();
    for (n, members) in members_of.iter().enumerate() {
        if members.is_empty() {
            continue;
        }
        used.push(n);
        // A chosen layout always fits; today's (kept when the solver found nothing better) may
        // not, if a card was cut anew within its last hour: it is then shown without starts.
        let starts = layout(members).ok().flatten();
        for (k, &i) in members.iter().enumerate() {
            placed.push(Placed {
                item: i,
                card: n,
                start: starts.as_ref().map(|s| s[k]),
            });
        }
    }
    placed.sort_by_key(|p| p.item);
    let today: Vec<usize> = items.iter().map(|i| i.card).collect();
    let steps = moves::steps(&today, target, cards, &|members| layout(members).is_ok());
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

mod moves;
mod strand;

pub use moves::{Step, StepKind};

#[cfg(test)]
mod tests;
