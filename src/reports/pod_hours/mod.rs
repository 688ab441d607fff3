//! The pod-hour sums a price reads, what the unit cost prices: [`super::store::usage_sums`] by the
//! hour and (team, namespace, workload, pod), summed here from the hourly rows as they are rather
//! than grouped twice in SQL (two million groups a 1,000-GPU month, which PostgreSQL sorted or
//! spilled to disk: most of the unit cost's time), and kept compact: each team, slice class and
//! place named once in a table, the rows holding their indices.
//!
//! The figures are the report's, digit for digit: each slice's rows of a pod and hour (its
//! containers) summed first, the shares applied after, the products and their sums exact, each sum
//! rounded once to 9 places half away from zero as SQL's `round` does. A time-sliced slice's memory
//! used is a quotient PostgreSQL rounds at its own scale: it is PostgreSQL's, of the row when the
//! slice's group is one row (nearly always), else asked for the group's sum.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

use crate::domain::exact::Exact;
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::reports::parallel;
use store::{ConsumerPlace, HourRows, SliceClass};

mod store;

/// The places SQL rounds each sum to.
const PLACES: u32 = 9;

/// A pod's place in the usage report's rows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub namespace: Option<String>,
    pub workload: Option<String>,
    pub pod: Option<String>,
}

/// The slice fields of an invoice line (a slice's kind says whether it is reserved).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineClass {
    pub model: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
}

/// A pod's sums of one hour and invoice line: the two a price reads (a reserved slice's held
/// compute and memory, a time-sliced one's active compute and memory used), as SQL rounds them.
#[derive(Debug, Clone, PartialEq)]
pub struct PodHourSum {
    pub hour: DateTime<Utc>,
    /// Indices into [`PodHourSums`]' tables.
    pub team: u32,
    pub place: u32,
    pub class: u32,
    /// The rate card version in force; none for hours no card covers.
    pub rate_card: Option<i64>,
    pub compute: Decimal,
    pub memory: Decimal,
}

/// The pod-hour sums of a range: the teams, classes and places, each in its order, and the rows
/// by their indices in the usage report's order (hour, team, namespace, workload, pod), then class.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodHourSums {
    pub teams: Vec<TeamId>,
    pub classes: Vec<LineClass>,
    pub places: Vec<Place>,
    pub rows: Vec<PodHourSum>,
}

/// The pod-hour sums of `[from, to)` (`team`'s only, if given).
pub async fn sums(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<PodHourSums, sqlx::Error> {
    // One snapshot: a batch written between two reads cannot bring a row whose consumer or
    // slice the other read did not see.
    let mut tx = crate::db::read_snapshot(pool).await?;
    let rows = store::pod_hour_rows(&mut tx, from, to, team).await?;
    let mut ids: Vec<i64> = rows.iter().map(|r| r.consumer_id).collect();
    parallel::sort(&mut ids, parallel::threads());
    ids.dedup();
    let consumers = store::consumer_places(&mut tx, &ids).await?;
    let slices = store::slice_classes(&mut tx).await?;
    let parts = parallel::parts_of(rows.len());
    let summed = sum(&rows, consumers, slices, parts)?;
    // The groups whose memory used must be PostgreSQL's quotient of their sum.
    let quotients = if summed.asked.is_empty() {
        Vec::new()
    } else {
        store::memory_used_of_groups(&mut tx, &summed.asked).await?
    };
    tx.commit().await?;
    summed.finish(&quotients)
}

/// The rows summed, but for the memory used PostgreSQL is asked for.
struct Summed {
    sums: PodHourSums,
    /// Rows whose memory used waits for PostgreSQL's quotients: the row, its exact part so far
    /// and its groups (indices into `asked`).
    pending: Vec<(usize, Exact, Vec<usize>)>,
    /// (hour, slice, consumers) of the groups of several rows of a time-sliced slice.
    asked: Vec<(DateTime<Utc>, i32, Vec<i64>)>,
}

/// Where each row goes: (hour, team, place, class, slice), the ranks of the tables.
type RowKey = (i64, u32, u32, u32, i32);

/// The tables, each in its order, and each slice's class, each consumer's place and each of the
/// rows' teams in them.
struct Tables {
    sums: PodHourSums,
    /// Slice id → (index into the slices, class).
    class_of: HashMap<i32, (usize, u32)>,
    place_of: HashMap<i64, u32>,
    /// A row's team index → the team's in `sums.teams`.
    team_of: Vec<u32>,
}

impl Tables {
    fn of(
        rows: &HourRows,
        consumers: Vec<ConsumerPlace>,
        slices: &[SliceClass],
    ) -> Result<Tables, sqlx::Error> {
        let mut classes: Vec<LineClass> = slices.iter().map(line_class).collect();
        classes.sort_unstable();
        classes.dedup();
        let mut class_of = HashMap::with_capacity(slices.len());
        for (i, s) in slices.iter().enumerate() {
            let class = classes
                .binary_search(&line_class(s))
                .expect("every slice's class is in the table");
            class_of.insert(s.slice_id, (i, index(class)?));
        }
        let mut by_place: Vec<(Place, i64)> = consumers
            .into_iter()
            .map(|c| {
                let place = Place {
                    namespace: c.namespace,
                    workload: c.workload,
                    pod: c.pod,
                };
                (place, c.consumer_id)
            })
            .collect();
        by_place.sort_unstable();
        let mut places: Vec<Place> = Vec::new();
        let mut place_of = HashMap::with_capacity(by_place.len());
        for (place, consumer) in by_place {
            if places.last() != Some(&place) {
                places.push(place);
            }
            place_of.insert(consumer, index(places.len() - 1)?);
        }
        // The teams the rows name, in order.
        let mut seen = vec![false; rows.teams.len()];
        for r in rows.iter() {
            seen[r.team as usize] = true;
        }
        let mut teams: Vec<(&TeamId, usize)> = rows
            .teams
            .iter()
            .enumerate()
            .filter(|&(i, _)| seen[i])
            .map(|(i, t)| (t, i))
            .collect();
        teams.sort_unstable();
        let mut team_of = vec![u32::MAX; rows.teams.len()];
        for (rank, &(_, i)) in teams.iter().enumerate() {
            team_of[i] = index(rank)?;
        }
        Ok(Tables {
            sums: PodHourSums {
                teams: teams.into_iter().map(|(t, _)| t.clone()).collect(),
                classes,
                places,
                rows: Vec::new(),
            },
            class_of,
            place_of,
            team_of,
        })
    }

    /// Each row's key, and the rows in their keys' order: the keys made in `parts` parts, each on
    /// a thread, and sorted on every core.
    fn order(&self, rows: &HourRows, parts: usize) -> Result<Vec<(RowKey, u32)>, sqlx::Error> {
        let n = rows.len();
        index(n)?;
        let mut keys = vec![((0, 0, 0, 0, 0), 0); n];
        let size = n.div_ceil(parts.max(1)).max(1);
        let parts: Vec<(usize, &mut [(RowKey, u32)])> = keys
            .chunks_mut(size)
            .enumerate()
            .map(|(p, part)| (p * size, part))
            .collect();
        parallel::each(parts, |(first, part)| {
            for (k, (i, r)) in part
                .iter_mut()
                .zip(rows.range(first..first + size).enumerate())
            {
                let place = *self
                    .place_of
                    .get(&r.consumer_id)
                    .ok_or_else(|| unseen("consumer", r.consumer_id))?;
                let &(_, class) = self
                    .class_of
                    .get(&r.slice_id)
                    .ok_or_else(|| unseen("slice", r.slice_id.into()))?;
                let team = self.team_of[r.team as usize];
                // Below 2^32: checked above.
                *k = (
                    (r.hour.timestamp(), team, place, class, r.slice_id),
                    (first + i) as u32,
                );
            }
            Ok(())
        })
        .into_iter()
        .collect::<Result<(), sqlx::Error>>()?;
        parallel::sort(&mut keys, parallel::threads());
        Ok(keys)
    }
}

/// A row key's pod-hour of one invoice line: all but the slice.
fn of_pod_hour(k: &RowKey) -> (i64, u32, u32, u32) {
    (k.0, k.1, k.2, k.3)
}

fn line_class(s: &SliceClass) -> LineClass {
    LineClass {
        model: s.model.clone(),
        kind: s.kind,
        profile: s.profile.clone(),
    }
}

/// A table's index as a row holds it.
fn index(i: usize) -> Result<u32, sqlx::Error> {
    u32::try_from(i).map_err(|_| sqlx::Error::Protocol("over 2^32 pod-hour rows".to_owned()))
}

/// A pod-hour's exact sums.
#[derive(Default)]
struct Acc {
    compute: Exact,
    memory: Exact,
    /// Groups whose memory used is asked for (indices into `asked`).
    pending: Vec<usize>,
}

/// The slices' classes and shares, as each part of the sums reads them.
struct Shares<'a> {
    slices: &'a [SliceClass],
    class_of: &'a HashMap<i32, (usize, u32)>,
    /// Each slice's compute and memory shares, exact, converted once.
    exact: Vec<(Exact, Exact)>,
}

/// The rows summed by pod-hour in `parts` parts, each on a thread.
fn sum(
    rows: &HourRows,
    consumers: Vec<ConsumerPlace>,
    slices: Vec<SliceClass>,
    parts: usize,
) -> Result<Summed, sqlx::Error> {
    let tables = Tables::of(rows, consumers, &slices)?;
    let order = tables.order(rows, parts)?;
    let Tables {
        mut sums, class_of, ..
    } = tables;
    let shares = Shares {
        slices: &slices,
        class_of: &class_of,
        exact: slices
            .iter()
            .map(|s| (s.compute_share.into(), s.memory_share.into()))
            .collect(),
    };
    // The pod-hours, in order, cut into parts (at a pod-hour's first row) that are summed each on
    // a thread of its own, into their own stretch of the sums' rows.
    let mut starts = vec![0];
    for p in 1..parts {
        let mut cut = (order.len() * p / parts).max(1);
        while cut < order.len() && of_pod_hour(&order[cut - 1].0) == of_pod_hour(&order[cut].0) {
            cut += 1;
        }
        if cut > *starts.last().expect("a first part") && cut < order.len() {
            starts.push(cut);
        }
    }
    let placeholder = PodHourSum {
        hour: DateTime::<Utc>::MIN_UTC,
        team: 0,
        place: 0,
        class: 0,
        rate_card: None,
        compute: Decimal::ZERO,
        memory: Decimal::ZERO,
    };
    // Each part's pod-hours: its rows of the sums.
    let groups: Vec<&[(RowKey, u32)]> = starts
        .iter()
        .enumerate()
        .map(|(p, &start)| &order[start..starts.get(p + 1).copied().unwrap_or(order.len())])
        .collect();
    let counts: Vec<usize> = groups
        .iter()
        .map(|g| {
            (0..g.len())
                .filter(|&i| i == 0 || of_pod_hour(&g[i - 1].0) != of_pod_hour(&g[i].0))
                .count()
        })
        .collect();
    sums.rows = vec![placeholder; counts.iter().sum()];
    let mut out: &mut [PodHourSum] = &mut sums.rows;
    let mut work = Vec::with_capacity(groups.len());
    for (group, n) in groups.into_iter().zip(counts) {
        let (mine, rest) = std::mem::take(&mut out).split_at_mut(n);
        out = rest;
        work.push((group, mine));
    }
    let done = parallel::each(work, |(group, out)| sum_part(rows, group, &shares, out));
    // The parts' pending rows and asked groups, their indices made the whole's.
    let mut pending = Vec::new();
    let mut asked = Vec::new();
    let mut first_row = 0;
    for part in done {
        let part = part?;
        let first_asked = asked.len();
        for (row, memory, groups) in part.pending {
            let groups = groups.into_iter().map(|g| g + first_asked).collect();
            pending.push((first_row + row, memory, groups));
        }
        asked.extend(part.asked);
        first_row += part.rows;
    }
    Ok(Summed {
        sums,
        pending,
        asked,
    })
}

/// One part's pending rows and asked groups, by its own indices, and how many rows it wrote.
struct Part {
    rows: usize,
    pending: Vec<(usize, Exact, Vec<usize>)>,
    asked: Vec<(DateTime<Utc>, i32, Vec<i64>)>,
}

/// Sums the pod-hours of `order` (whole ones) into `out`, one row each, in order.
fn sum_part(
    rows: &HourRows,
    order: &[(RowKey, u32)],
    shares: &Shares<'_>,
    out: &mut [PodHourSum],
) -> Result<Part, sqlx::Error> {
    let too_large = || sqlx::Error::Protocol("an hour's seconds overflow".to_owned());
    let mut pending = Vec::new();
    let mut asked = Vec::new();
    let mut written = 0;
    let mut i = 0;
    while i < order.len() {
        // A pod-hour of one invoice line: (hour, team, place, class).
        let (pod_hour, first) = order[i];
        let first = &rows[first as usize];
        let mut acc = Acc::default();
        while i < order.len() && of_pod_hour(&order[i].0) == of_pod_hour(&pod_hour) {
            // One slice's rows of the pod-hour (its containers), summed before its shares.
            let slice_id = order[i].0.4;
            let start = i;
            let (mut held, mut active) = (Decimal::ZERO, Decimal::ZERO);
            while i < order.len() && order[i].0 == order[start].0 {
                let r = &rows[order[i].1 as usize];
                held = held.checked_add(r.held).ok_or_else(too_large)?;
                active = active.checked_add(r.active).ok_or_else(too_large)?;
                i += 1;
            }
            let slice = shares.class_of[&slice_id].0;
            let (compute_share, memory_share) = &shares.exact[slice];
            if shares.slices[slice].reserved {
                let held = Exact::from(held);
                acc.compute += &held * compute_share;
                acc.memory += held * memory_share;
            } else {
                acc.compute += Exact::from(active) * compute_share;
                let group = &order[start..i];
                let one = &rows[group[0].1 as usize];
                match (rows.memory_used(one), group.len()) {
                    (Some(q), 1) => acc.memory += exact(q)?,
                    _ => {
                        acc.pending.push(asked.len());
                        asked.push((
                            one.hour,
                            slice_id,
                            group
                                .iter()
                                .map(|&(_, r)| rows[r as usize].consumer_id)
                                .collect(),
                        ));
                    }
                }
            }
        }
        let round = |x: &Exact| x.round_half_away(PLACES);
        if !acc.pending.is_empty() {
            pending.push((written, acc.memory.clone(), acc.pending));
        }
        out[written] = PodHourSum {
            hour: first.hour,
            team: pod_hour.1,
            place: pod_hour.2,
            class: pod_hour.3,
            rate_card: first.rate_card,
            compute: round(&acc.compute),
            memory: round(&acc.memory),
        };
        written += 1;
    }
    Ok(Part {
        rows: written,
        pending,
        asked,
    })
}

/// A row whose consumer or slice the snapshot does not hold: the books are broken, never a row
/// to drop or to name nobody.
fn unseen(what: &str, id: i64) -> sqlx::Error {
    sqlx::Error::Protocol(format!(
        "an hourly row's {what} {id} is not in the same snapshot"
    ))
}

impl Summed {
    fn finish(self, quotients: &[String]) -> Result<PodHourSums, sqlx::Error> {
        if quotients.len() != self.asked.len() {
            return Err(sqlx::Error::Protocol(format!(
                "asked for {} groups' memory used, got {}",
                self.asked.len(),
                quotients.len()
            )));
        }
        let mut sums = self.sums;
        for (row, mut memory, groups) in self.pending {
            for i in groups {
                memory += exact(&quotients[i])?;
            }
            sums.rows[row].memory = memory.round_half_away(PLACES);
        }
        Ok(sums)
    }
}

/// A decimal PostgreSQL wrote out, exactly (a quotient may have more places than a [`Decimal`]).
fn exact(text: &str) -> Result<Exact, sqlx::Error> {
    Decimal::from_str_exact(text)
        .map(Exact::from)
        .ok()
        .or_else(|| Exact::parse(text))
        .ok_or_else(|| sqlx::Error::Protocol(format!("{text:?} is not a decimal")))
}

#[cfg(test)]
mod tests;
