//! The packer's second objective: with the number of cards fixed, layouts that strand less
//! (`domain::layout`: capacity no profile can take beside the instances there). Two cards' instances
//! are shared out anew between them when another split of the same instances strands less, until no
//! pair of cards gains: the stranding is lowered, not proved the least. Of splits that strand as
//! little, the one that keeps most of the two layouts as they were (fewer moves). Deterministic: the
//! layouts are tried in their order, and of equal gains the first found is taken.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::domain::layout::stranded_mig;
use crate::domain::profiles::{Instance, check_layout};
use crate::domain::slice::ShareWeights;

/// What a card's layout strands, weighed as billing weighs it (`ShareWeights::weigh`), in units
/// of 1 / (compute slices x memory slices) of a card, so that it stays exact; none when the
/// layout does not fit.
struct Weigher<'a> {
    /// Each shape's instance, by the shape's index.
    shapes: &'a [Instance],
    total_compute: u8,
    total_memory: u8,
    weights: ShareWeights,
    seen: BTreeMap<Vec<u8>, Option<Decimal>>,
}

impl Weigher<'_> {
    fn stranded(&mut self, counts: &[u8]) -> Option<Decimal> {
        if let Some(v) = self.seen.get(counts) {
            return *v;
        }
        let instances: Vec<Instance> = counts
            .iter()
            .enumerate()
            .flat_map(|(s, &n)| std::iter::repeat_n(self.shapes[s], usize::from(n)))
            .collect();
        let v = check_layout(&instances, self.total_compute, self.total_memory)
            .is_ok()
            .then(|| {
                let s = stranded_mig(&instances, self.total_compute, self.total_memory);
                self.weights.weigh(
                    Decimal::from(u32::from(s.compute_slices) * u32::from(self.total_memory)),
                    Decimal::from(u32::from(s.memory_slices) * u32::from(self.total_compute)),
                )
            });
        self.seen.insert(counts.to_vec(), v);
        v
    }
}

/// Two cards' instances shared out: what the two layouts strand together, and each one's counts.
#[derive(Clone)]
struct Split {
    stranded: Decimal,
    first: Vec<u8>,
    second: Vec<u8>,
}

impl<'a> Weigher<'a> {
    fn new(
        shapes: &'a [Instance],
        total_compute: u8,
        total_memory: u8,
        weights: ShareWeights,
    ) -> Self {
        Weigher {
            shapes,
            total_compute,
            total_memory,
            weights,
            seen: BTreeMap::new(),
        }
    }
}

/// Whether `chosen` (each card's counts of each of `shapes`) frees none of `today`'s cards in use
/// and strands no less than they do, weighed as [`strand_less`] weighs it; false when a layout
/// does not fit.
pub(super) fn gains_nothing(
    chosen: &[Vec<u8>],
    today: &[Vec<u8>],
    shapes: &[Instance],
    total_compute: u8,
    total_memory: u8,
    weights: ShareWeights,
) -> bool {
    let in_use: Vec<&Vec<u8>> = today.iter().filter(|t| t.iter().any(|&n| n > 0)).collect();
    if chosen.len() < in_use.len() {
        return false;
    }
    let mut w = Weigher::new(shapes, total_compute, total_memory, weights);
    let now: Option<Decimal> = in_use.iter().map(|l| w.stranded(l)).sum();
    let then: Option<Decimal> = chosen.iter().map(|l| w.stranded(l)).sum();
    matches!((now, then), (Some(now), Some(then)) if then >= now)
}

/// `chosen` (each card's counts of each of `shapes`) with pairs of cards' instances shared out anew where
/// that strands less; as many cards, the same instances.
pub(super) fn strand_less(
    mut chosen: Vec<Vec<u8>>,
    shapes: &[Instance],
    total_compute: u8,
    total_memory: u8,
    weights: ShareWeights,
) -> Vec<Vec<u8>> {
    let mut w = Weigher::new(shapes, total_compute, total_memory, weights);
    // Each pair of layouts' best split, kept: most pairs are the same from one round to the next.
    let mut splits: BTreeMap<(Vec<u8>, Vec<u8>), Option<Split>> = BTreeMap::new();
    loop {
        // The distinct layouts, in the order they first appear, and how many cards have each.
        let mut kinds: Vec<(Vec<u8>, usize)> = Vec::new();
        for c in &chosen {
            match kinds.iter_mut().find(|(k, _)| k == c) {
                Some((_, n)) => *n += 1,
                None => kinds.push((c.clone(), 1)),
            }
        }
        // The gain, the two layouts (indices into `kinds`) and their split.
        let mut best: Option<(Decimal, usize, usize, Split)> = None;
        for a in 0..kinds.len() {
            for b in a..kinds.len() {
                if a == b && kinds[a].1 < 2 {
                    continue;
                }
                let (x, y) = (&kinds[a].0, &kinds[b].0);
                let (Some(sx), Some(sy)) = (w.stranded(x), w.stranded(y)) else {
                    continue;
                };
                let split = splits
                    .entry((x.clone(), y.clone()))
                    .or_insert_with(|| best_split(x, y, &mut w));
                if let Some(split) = split
                    && split.stranded < sx + sy
                    && best
                        .as_ref()
                        .is_none_or(|(g, ..)| sx + sy - split.stranded > *g)
                {
                    best = Some((sx + sy - split.stranded, a, b, split.clone()));
                }
            }
        }
        let Some((_, a, b, Split { first, second, .. })) = best else {
            return chosen;
        };
        // Every pair of cards with those layouts gains as much: split them all.
        let pairs = if a == b {
            kinds[a].1 / 2
        } else {
            kinds[a].1.min(kinds[b].1)
        };
        let (ka, kb) = (kinds[a].0.clone(), kinds[b].0.clone());
        let (mut left_a, mut left_b) = (pairs, pairs);
        for c in chosen.iter_mut() {
            // Of two cards alike, the first of each pair takes `first`, the next `second`.
            if *c == ka && left_a > 0 && (a != b || left_a == left_b) {
                left_a -= 1;
                c.clone_from(&first);
            } else if *c == kb && left_b > 0 {
                left_b -= 1;
                c.clone_from(&second);
            }
        }
    }
}

/// The instances two cards' counts have in common.
fn overlap(c: &[u8], t: &[u8]) -> u32 {
    c.iter().zip(t).map(|(p, q)| u32::from(*p.min(q))).sum()
}

/// The split of the instances of `a` and `b` onto two cards, neither empty, that strands least,
/// and what it strands; of those that strand as little, the one that keeps most of `a` and `b` as
/// they are (fewer moves), then the first in the order of the counts.
fn best_split(a: &[u8], b: &[u8], w: &mut Weigher) -> Option<Split> {
    struct Search<'s, 'w> {
        a: &'s [u8],
        b: &'s [u8],
        both: Vec<u8>,
        w: &'s mut Weigher<'w>,
        /// The best split so far and the instances it keeps where they were.
        best: Option<(Split, u32)>,
    }
    fn walk(s: usize, first: &mut Vec<u8>, search: &mut Search) {
        if s == search.both.len() {
            let second: Vec<u8> = search
                .both
                .iter()
                .zip(first.iter())
                .map(|(b, f)| b - f)
                .collect();
            if first.iter().all(|&n| n == 0) || second.iter().all(|&n| n == 0) {
                return;
            }
            let (Some(x), Some(y)) = (search.w.stranded(first), search.w.stranded(&second)) else {
                return;
            };
            let kept = (overlap(first, search.a) + overlap(&second, search.b))
                .max(overlap(first, search.b) + overlap(&second, search.a));
            if search
                .best
                .as_ref()
                .is_none_or(|(b, k)| x + y < b.stranded || (x + y == b.stranded && kept > *k))
            {
                search.best = Some((
                    Split {
                        stranded: x + y,
                        first: first.clone(),
                        second,
                    },
                    kept,
                ));
            }
            return;
        }
        for n in 0..=search.both[s] {
            first[s] = n;
            // The shapes after `s` are at zero here: more of this one that does not fit on a
            // card never fits with them either.
            if n > 0 && search.w.stranded(first).is_none() {
                break;
            }
            walk(s + 1, first, search);
        }
        first[s] = 0;
    }
    let both: Vec<u8> = a.iter().zip(b).map(|(p, q)| p + q).collect();
    let mut first = vec![0u8; both.len()];
    let mut search = Search {
        a,
        b,
        both,
        w,
        best: None,
    };
    walk(0, &mut first, &mut search);
    search.best.map(|(split, _)| split)
}
