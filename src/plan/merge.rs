//! Right-sizing's evidence merged: what a group's hours of one stretch say ([`Partial`], from a
//! day's summary or from the hourly rollups), merged over a range ([`Merged`]) with the
//! percentiles taken as PostgreSQL takes them, and how ranges split into summarised days and the
//! hours left to read ([`Split`]). Pure: `store` and `days` read, this merges.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

/// What a group's hourly rows of a stretch of hours say (a summarised day's, or hours read from
/// the hourly rollups): the sums, the first and last hour, the slices, and every hour's peak
/// memory and compute-active fraction (the hours whose compute was measured), exactly, so that
/// stretches merge by concatenation and the percentiles of the merge are those of all the rows.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct Partial {
    held_seconds: Decimal,
    known_seconds: Decimal,
    compute_active_seconds: Decimal,
    first_hour: DateTime<Utc>,
    last_hour: DateTime<Utc>,
    slice_ids: Vec<i32>,
    memory_peaks: Vec<i64>,
    compute_ratios: Vec<f64>,
}

/// A group's partials merged over a range: the one path by which summarised days and hours read
/// from the hourly rollups become [`Evidence`](super::store::Evidence).
#[derive(Debug, Default)]
pub(super) struct Merged {
    held_seconds: Decimal,
    known_seconds: Decimal,
    compute_active_seconds: Decimal,
    hours: Option<(DateTime<Utc>, DateTime<Utc>)>,
    slices: HashSet<i32>,
    memory_peaks: Vec<i64>,
    compute_ratios: Vec<f64>,
}

impl Merged {
    pub(super) fn add(&mut self, p: Partial) {
        self.held_seconds += p.held_seconds;
        self.known_seconds += p.known_seconds;
        self.compute_active_seconds += p.compute_active_seconds;
        self.hours = Some(match self.hours {
            Some((first, last)) => (first.min(p.first_hour), last.max(p.last_hour)),
            None => (p.first_hour, p.last_hour),
        });
        self.slices.extend(p.slice_ids);
        self.memory_peaks.extend(p.memory_peaks);
        self.compute_ratios.extend(p.compute_ratios);
    }

    /// The merged figures: none when nothing was added.
    pub(super) fn finish(mut self) -> Option<Figures> {
        let (first, last) = self.hours?;
        self.memory_peaks.sort_unstable();
        self.compute_ratios.sort_unstable_by(f64::total_cmp);
        Some(Figures {
            slices: self.slices.len() as i64,
            span_seconds: (last - first).num_seconds() + 3600,
            held_seconds: self.held_seconds,
            known_seconds: self.known_seconds,
            compute_active_seconds: self.compute_active_seconds,
            memory_p99_bytes: percentile_disc(&self.memory_peaks, 0.99).unwrap_or(0),
            memory_max_bytes: self.memory_peaks.last().copied().unwrap_or(0),
            compute_p95: percentile_cont(&self.compute_ratios, 0.95),
        })
    }
}

/// A group's figures over a range, as [`Evidence`](super::store::Evidence) holds them.
pub(super) struct Figures {
    pub(super) slices: i64,
    /// From the first hour held to the end of the last.
    pub(super) span_seconds: i64,
    pub(super) held_seconds: Decimal,
    pub(super) known_seconds: Decimal,
    pub(super) compute_active_seconds: Decimal,
    pub(super) memory_p99_bytes: i64,
    pub(super) memory_max_bytes: i64,
    pub(super) compute_p95: Option<f64>,
}

/// PostgreSQL's `percentile_disc(p)` of `sorted` (ascending; none when empty): the first value
/// whose position reaches `ceil(p x n)` (src/backend/utils/adt/orderedsetaggs.c).
pub fn percentile_disc<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let row = (p * n as f64).ceil() as usize;
    sorted.get(row.clamp(1, n) - 1).copied()
}

/// PostgreSQL's `percentile_cont(p)` of `sorted` (ascending; none when empty), to the bit: the
/// rows at `floor` and `ceil` of `p x (n - 1)`, and between them `lo + f x (hi - lo)`, as
/// `float8_lerp` computes it (src/backend/utils/adt/orderedsetaggs.c).
pub fn percentile_cont(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let at = p * (n - 1) as f64;
    let (first, second) = (at.floor(), at.ceil());
    let lo = sorted[first as usize];
    if first == second {
        return Some(lo);
    }
    let hi = sorted[second as usize];
    Some(lo + (at - first) * (hi - lo))
}

/// How ranges read together split into summarised days and hours to read.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Split {
    /// Each summarised day a range covers whole, with the ranges that do.
    pub(super) days: BTreeMap<DateTime<Utc>, Vec<usize>>,
    /// The rest, in runs of adjacent stretches: each run's bounds (`[b0, b1)`, `[b1, b2)`, ...,
    /// what `width_bucket` numbers 1, 2, ...) and each stretch's ranges.
    pub(super) runs: Vec<Run>,
}

/// A run of adjacent stretches: its bounds and each stretch's ranges.
pub(super) type Run = (Vec<DateTime<Utc>>, Vec<Vec<usize>>);

impl Split {
    pub(super) fn of(
        ranges: &[(DateTime<Utc>, DateTime<Utc>)],
        summarised: &[DateTime<Utc>],
    ) -> Split {
        let day = chrono::Duration::hours(24);
        let mut split = Split::default();
        let mut rest: Vec<(DateTime<Utc>, DateTime<Utc>, usize)> = Vec::new();
        for (r, &(from, to)) in ranges.iter().enumerate() {
            let mut at = from;
            for &d in summarised.iter().filter(|&&d| d >= from && d + day <= to) {
                if at < d {
                    rest.push((at, d, r));
                }
                split.days.entry(d).or_default().push(r);
                at = d + day;
            }
            if at < to {
                rest.push((at, to, r));
            }
        }
        let mut points: Vec<DateTime<Utc>> = rest.iter().flat_map(|&(a, b, _)| [a, b]).collect();
        points.sort();
        points.dedup();
        for w in points.windows(2) {
            let (a, b) = (w[0], w[1]);
            let of: Vec<usize> = rest
                .iter()
                .filter(|&&(x, y, _)| x <= a && b <= y)
                .map(|&(_, _, r)| r)
                .collect();
            if of.is_empty() {
                continue;
            }
            match split.runs.last_mut() {
                Some((bounds, stretches)) if bounds.last() == Some(&a) => {
                    bounds.push(b);
                    stretches.push(of);
                }
                _ => split.runs.push((vec![a, b], vec![of])),
            }
        }
        split
    }

    /// The UTC days the runs touch.
    pub(super) fn raw_days(&self) -> Vec<DateTime<Utc>> {
        let mut days = Vec::new();
        for (bounds, _) in &self.runs {
            let (Some(&first), Some(&last)) = (bounds.first(), bounds.last()) else {
                continue;
            };
            let mut d = crate::domain::time::floor_day(first);
            while d < last {
                days.push(d);
                d += chrono::Duration::hours(24);
            }
        }
        days.sort();
        days.dedup();
        days
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(day: u32, hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, day, hour, 0, 0).unwrap()
    }

    #[test]
    fn percentiles_are_postgresqls_positions() {
        // percentile_disc(0.99) of 1..=100 is the 99th; of 1..=10, the 10th (ceil(9.9)).
        let hundred: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile_disc(&hundred, 0.99), Some(99));
        assert_eq!(percentile_disc(&hundred[..10], 0.99), Some(10));
        assert_eq!(percentile_disc(&hundred[..1], 0.99), Some(1));
        assert_eq!(percentile_disc::<i64>(&[], 0.99), None);
        // percentile_cont(0.95) of 0, 1, 2, 3, 4: position 3.8, 3 + 0.8 x 1.
        let five = [0.0, 1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_cont(&five, 0.95), Some(3.0 + 0.8 * 1.0));
        assert_eq!(percentile_cont(&[0.25], 0.95), Some(0.25));
        assert_eq!(percentile_cont(&[], 0.95), None);
    }

    #[test]
    fn ranges_split_into_their_whole_summarised_days_and_the_hours_left() {
        // A month and right-sizing's days from 14:00 on the 2nd to 06:00 on the 6th; the 2nd to
        // the 4th summarised.
        let month = (
            at(1, 0),
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
        );
        let days = (at(2, 14), at(6, 6));
        let split = Split::of(&[month, days], &[at(2, 0), at(3, 0), at(4, 0)]);
        // The 2nd is whole in the month only; the 3rd in both.
        assert_eq!(
            split.days.into_iter().collect::<Vec<_>>(),
            vec![
                (at(2, 0), vec![0]),
                (at(3, 0), vec![0, 1]),
                (at(4, 0), vec![0, 1])
            ]
        );
        // The rest: the month's 1st; right-sizing's afternoon of the 2nd; from the 5th, both
        // until 06:00 on the 6th, then the month alone.
        assert_eq!(
            split.runs,
            vec![
                (vec![at(1, 0), at(2, 0)], vec![vec![0]]),
                (vec![at(2, 14), at(3, 0)], vec![vec![1]]),
                (vec![at(5, 0), at(6, 6), month.1], vec![vec![0, 1], vec![0]]),
            ]
        );
    }
}
