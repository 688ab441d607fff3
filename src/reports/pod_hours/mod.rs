//! The pod-hour sums a price reads, what the unit cost prices: [`super::store::usage_sums`] by the
//! hour and (team, namespace, workload, pod), summed here from the hourly rows as they are rather
//! than grouped twice in SQL (two million groups a 1,000-GPU month, which PostgreSQL sorted or
//! spilled to disk: most of the unit cost's time).
//!
//! The figures are the report's, digit for digit: each slice's rows of a pod and hour (its
//! containers) summed first, the shares applied after, the products and their sums exact, each sum
//! rounded once to 9 places half away from zero as SQL's `round` does. A time-sliced slice's memory
//! used is a quotient PostgreSQL rounds at its own scale: it is PostgreSQL's, of the row when the
//! slice's group is one row (nearly always), else asked for the group's sum.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::PgPool;

use super::usage::UsageSums;
use crate::domain::exact::Exact;
use crate::domain::team::TeamId;
use crate::domain::usage::OccupancySums;
use store::{ConsumerPlace, HourRow, SliceClass};

mod store;

/// The places SQL rounds each sum to.
const PLACES: u32 = 9;

/// The pod-hour sums of `[from, to)` (`team`'s only, if given), one per hour, team, invoice line
/// and pod, in the usage report's order (hour, team, namespace, workload, pod), with only the sums
/// a price reads (a reserved slice's held compute and memory, a time-sliced one's active compute
/// and used memory; the others zero).
pub async fn sums(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    team: Option<&TeamId>,
) -> Result<Vec<UsageSums>, sqlx::Error> {
    // One snapshot: a batch written between two reads cannot bring a row whose consumer or
    // slice the other read did not see.
    let mut tx = crate::db::read_snapshot(pool).await?;
    let rows = store::pod_hour_rows(&mut tx, from, to, team).await?;
    let consumers = store::pod_hour_consumers(&mut tx, from, to, team).await?;
    let slices = store::slice_classes(&mut tx).await?;
    let summed = sum(&rows, &consumers, &slices)?;
    // The groups whose memory used must be PostgreSQL's quotient of their sum.
    let quotients = if summed.asked.is_empty() {
        Vec::new()
    } else {
        store::memory_used_of_groups(&mut tx, &summed.asked).await?
    };
    tx.commit().await?;
    summed.finish(&consumers, &slices, &quotients)
}

/// A slice's rows of one pod and hour (and team, and so rate card).
struct SliceGroup {
    held: Decimal,
    active: Decimal,
    /// The group's first row (an index into the rows), and the others (nearly always none).
    first: usize,
    more: Vec<usize>,
}

/// A pod-hour of one invoice line (team, slice class, rate card), its exact sums.
#[derive(Default)]
struct PodHour {
    held_compute: Exact,
    held_memory: Exact,
    active_compute: Exact,
    memory_used: Exact,
    /// Groups whose memory used is asked for (indices into `asked`).
    pending: Vec<usize>,
}

/// (hour, team, slice class, place): a class and a place are the index of the first slice and
/// consumer that has it.
type PodHourKey<'r> = (DateTime<Utc>, &'r TeamId, usize, usize);

/// The rows summed, but for the memory used PostgreSQL is asked for.
struct Summed<'r> {
    /// Each pod-hour's rate card (its hour's) and sums.
    pod_hours: HashMap<PodHourKey<'r>, (Option<i64>, PodHour)>,
    /// (hour, slice, consumers) of the groups of several rows of a time-sliced slice.
    asked: Vec<(DateTime<Utc>, i32, Vec<i64>)>,
}

/// Index of each slice's class (model, kind, profile, reserved) and of each consumer's place.
fn classes_and_places(
    consumers: &[ConsumerPlace],
    slices: &[SliceClass],
) -> (HashMap<i32, (usize, usize)>, HashMap<i64, usize>) {
    let mut class_of = HashMap::new();
    let mut first = HashMap::new();
    for (i, s) in slices.iter().enumerate() {
        let class = *first
            .entry((&s.model, s.kind, &s.profile, s.reserved))
            .or_insert(i);
        class_of.insert(s.slice_id, (i, class));
    }
    let mut place_of = HashMap::new();
    let mut first = HashMap::new();
    for (i, c) in consumers.iter().enumerate() {
        let place = *first
            .entry((&c.namespace, &c.workload, &c.pod))
            .or_insert(i);
        place_of.insert(c.consumer_id, place);
    }
    (class_of, place_of)
}

fn sum<'r>(
    rows: &'r [HourRow],
    consumers: &[ConsumerPlace],
    slices: &[SliceClass],
) -> Result<Summed<'r>, sqlx::Error> {
    let (class_of, place_of) = classes_and_places(consumers, slices);
    // Each slice's compute and memory shares, exact, converted once.
    let shares: Vec<(Exact, Exact)> = slices
        .iter()
        .map(|s| (s.compute_share.into(), s.memory_share.into()))
        .collect();
    // Each slice's rows of a pod and hour first, as SQL sums them before the shares.
    let mut groups: HashMap<(DateTime<Utc>, i32, &TeamId, usize), SliceGroup> =
        HashMap::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let place = *place_of
            .get(&r.consumer_id)
            .ok_or_else(|| unseen("consumer", r.consumer_id))?;
        match groups.entry((r.hour, r.slice_id, &r.team, place)) {
            Entry::Vacant(v) => {
                v.insert(SliceGroup {
                    held: r.held,
                    active: r.active,
                    first: i,
                    more: Vec::new(),
                });
            }
            Entry::Occupied(mut o) => {
                let g = o.get_mut();
                let too_large = || sqlx::Error::Protocol("an hour's seconds overflow".to_owned());
                g.held = g.held.checked_add(r.held).ok_or_else(too_large)?;
                g.active = g.active.checked_add(r.active).ok_or_else(too_large)?;
                g.more.push(i);
            }
        }
    }
    let mut pod_hours: HashMap<_, (Option<i64>, PodHour)> = HashMap::with_capacity(groups.len());
    let mut asked = Vec::new();
    for ((hour, slice_id, team, place), g) in groups {
        let &(slice, class) = class_of
            .get(&slice_id)
            .ok_or_else(|| unseen("slice", slice_id.into()))?;
        let s = &slices[slice];
        let first = &rows[g.first];
        let (_, p) = pod_hours
            .entry((hour, team, class, place))
            .or_insert_with(|| (first.rate_card, PodHour::default()));
        let (compute_share, memory_share) = &shares[slice];
        if s.reserved {
            let held = Exact::from(g.held);
            p.held_compute += &held * compute_share;
            p.held_memory += held * memory_share;
        } else {
            p.active_compute += Exact::from(g.active) * compute_share;
            match (&first.memory_used, g.more.is_empty()) {
                (Some(q), true) => p.memory_used += exact(q)?,
                _ => {
                    p.pending.push(asked.len());
                    let members = std::iter::once(g.first).chain(g.more.iter().copied());
                    asked.push((
                        hour,
                        slice_id,
                        members.map(|i| rows[i].consumer_id).collect(),
                    ));
                }
            }
        }
    }
    Ok(Summed { pod_hours, asked })
}

/// A row whose consumer or slice the snapshot does not hold: the books are broken, never a row
/// to drop or to name nobody.
fn unseen(what: &str, id: i64) -> sqlx::Error {
    sqlx::Error::Protocol(format!(
        "an hourly row's {what} {id} is not in the same snapshot"
    ))
}

impl Summed<'_> {
    fn finish(
        self,
        consumers: &[ConsumerPlace],
        slices: &[SliceClass],
        quotients: &[String],
    ) -> Result<Vec<UsageSums>, sqlx::Error> {
        if quotients.len() != self.asked.len() {
            return Err(sqlx::Error::Protocol(format!(
                "asked for {} groups' memory used, got {}",
                self.asked.len(),
                quotients.len()
            )));
        }
        let round = |x: &Exact| x.round_half_away(PLACES);
        // In the usage report's order (hour, team, namespace, workload, pod), by ranks: the
        // pricing that reads them keeps its rows in that order, and inserts faster in it.
        let mut teams: Vec<&TeamId> = self.pod_hours.keys().map(|k| k.1).collect();
        teams.sort_unstable();
        teams.dedup();
        let mut places: Vec<usize> = (0..consumers.len()).collect();
        places.sort_by(|&a, &b| {
            let (a, b) = (&consumers[a], &consumers[b]);
            (&a.namespace, &a.workload, &a.pod).cmp(&(&b.namespace, &b.workload, &b.pod))
        });
        let mut place_rank = vec![0; consumers.len()];
        for (rank, &i) in places.iter().enumerate() {
            place_rank[i] = rank;
        }
        let team_rank: HashMap<&TeamId, usize> =
            teams.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let mut pod_hours: Vec<_> = self
            .pod_hours
            .into_iter()
            .map(|(k, v)| ((k.0, team_rank[k.1], place_rank[k.3], k.2), k, v))
            .collect();
        pod_hours.sort_unstable_by_key(|(rank, _, _)| *rank);
        pod_hours
            .into_iter()
            .map(|(_, (hour, team, class, place), (rate_card, mut p))| {
                for &i in &p.pending {
                    p.memory_used += exact(&quotients[i])?;
                }
                let s = &slices[class];
                let c = &consumers[place];
                Ok(UsageSums {
                    bucket: hour,
                    team: team.clone(),
                    model: s.model.clone(),
                    kind: s.kind,
                    profile: s.profile.clone(),
                    rate_card,
                    node: None,
                    namespace: c.namespace.clone(),
                    workload: c.workload.clone(),
                    pod: c.pod.clone(),
                    container: None,
                    labels: Vec::new(),
                    gpu_uuid: None,
                    gpu_instance_id: None,
                    dra_claim: None,
                    reserved: s.reserved,
                    sums: OccupancySums {
                        held_compute: round(&p.held_compute),
                        held_memory: round(&p.held_memory),
                        active_compute: round(&p.active_compute),
                        memory_used: round(&p.memory_used),
                        ..OccupancySums::default()
                    },
                })
            })
            .collect()
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
