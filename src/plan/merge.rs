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

/// What a window of summarised days says of a group (`evidence_window`, migration 0031): the
/// sums, hours and slices as a [`Partial`] has them, but of the hours' values only the largest
/// (`*_top`) and how many there were in all (`*_count`): enough for the percentiles counted from
/// the top, as long as the range read adds few values of its own.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct WindowPartial {
    pub(super) held_seconds: Decimal,
    pub(super) known_seconds: Decimal,
    pub(super) compute_active_seconds: Decimal,
    pub(super) first_hour: DateTime<Utc>,
    pub(super) last_hour: DateTime<Utc>,
    pub(super) slice_ids: Vec<i32>,
    pub(super) memory_count: i64,
    pub(super) memory_top: Vec<i64>,
    pub(super) compute_count: i64,
    pub(super) compute_top: Vec<f64>,
}

/// A group's partials merged over a range: the one path by which summarised days, windows and
/// hours read from the hourly rollups become [`Evidence`](super::store::Evidence).
#[derive(Debug, Default)]
pub(super) struct Merged {
    held_seconds: Decimal,
    known_seconds: Decimal,
    compute_active_seconds: Decimal,
    hours: Option<(DateTime<Utc>, DateTime<Utc>)>,
    slices: HashSet<i32>,
    memory_peaks: Values<i64>,
    compute_ratios: Values<f64>,
}

/// Values of which some inputs kept only their largest: how many there were in all, and the fewest
/// largest values an input that left some out kept (none: every value is here). The largest `k`
/// values of all are then among those here for any `k` up to that.
#[derive(Debug)]
struct Values<T> {
    here: Vec<T>,
    count: usize,
    kept: Option<usize>,
}

impl<T> Default for Values<T> {
    fn default() -> Self {
        Values {
            here: Vec::new(),
            count: 0,
            kept: None,
        }
    }
}

impl<T: Copy> Values<T> {
    fn extend(&mut self, values: Vec<T>) {
        self.count += values.len();
        self.here.extend(values);
    }

    /// The `top` largest of `count` values.
    fn extend_top(&mut self, top: Vec<T>, count: i64) {
        let count = usize::try_from(count).unwrap_or(0).max(top.len());
        if top.len() < count {
            self.kept = Some(self.kept.map_or(top.len(), |k| k.min(top.len())));
        }
        self.count += count;
        self.here.extend(top);
    }

    /// The values here, sorted, with the ascending position of each of all the values.
    fn sorted(mut self, cmp: impl FnMut(&T, &T) -> std::cmp::Ordering) -> Sorted<T> {
        self.here.sort_unstable_by(cmp);
        Sorted {
            kept: self.kept.unwrap_or(self.here.len()).min(self.here.len()),
            here: self.here,
            count: self.count,
        }
    }
}

/// Sorted values, the largest `kept` of `count` values in all at the end of `here`.
#[derive(Debug)]
pub(super) struct Sorted<T> {
    here: Vec<T>,
    count: usize,
    kept: usize,
}

impl<T: Copy> Sorted<T> {
    /// Every value, ascending, none left out.
    #[cfg(test)]
    pub(super) fn all(here: Vec<T>) -> Self {
        Sorted {
            count: here.len(),
            kept: here.len(),
            here,
        }
    }

    /// The value at ascending position `i` of all the values, if it is among those kept.
    fn at(&self, i: usize) -> Result<T, LeftOut> {
        let from_top = self.count.checked_sub(1 + i).ok_or(LeftOut)?;
        if from_top >= self.kept {
            return Err(LeftOut);
        }
        Ok(self.here[self.here.len() - 1 - from_top])
    }

    fn last(&self) -> Option<T> {
        self.here.last().copied()
    }
}

/// A percentile's position fell among the values a window left out: the range is read from its
/// days instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LeftOut;

impl Merged {
    pub(super) fn add(&mut self, p: Partial) {
        self.add_sums(
            (p.held_seconds, p.known_seconds, p.compute_active_seconds),
            (p.first_hour, p.last_hour),
            p.slice_ids,
        );
        self.memory_peaks.extend(p.memory_peaks);
        self.compute_ratios.extend(p.compute_ratios);
    }

    pub(super) fn add_window(&mut self, w: WindowPartial) {
        self.add_sums(
            (w.held_seconds, w.known_seconds, w.compute_active_seconds),
            (w.first_hour, w.last_hour),
            w.slice_ids,
        );
        self.memory_peaks.extend_top(w.memory_top, w.memory_count);
        self.compute_ratios
            .extend_top(w.compute_top, w.compute_count);
    }

    fn add_sums(
        &mut self,
        (held, known, active): (Decimal, Decimal, Decimal),
        (first_hour, last_hour): (DateTime<Utc>, DateTime<Utc>),
        slice_ids: Vec<i32>,
    ) {
        self.held_seconds += held;
        self.known_seconds += known;
        self.compute_active_seconds += active;
        self.hours = Some(match self.hours {
            Some((first, last)) => (first.min(first_hour), last.max(last_hour)),
            None => (first_hour, last_hour),
        });
        self.slices.extend(slice_ids);
    }

    /// The merged figures: none when nothing was added; [`LeftOut`] when a percentile's position
    /// is among the values a window left out.
    pub(super) fn finish(self) -> Result<Option<Figures>, LeftOut> {
        let Some((first, last)) = self.hours else {
            return Ok(None);
        };
        let memory = self.memory_peaks.sorted(Ord::cmp);
        let compute = self.compute_ratios.sorted(f64::total_cmp);
        Ok(Some(Figures {
            slices: self.slices.len() as i64,
            span_seconds: (last - first).num_seconds() + 3600,
            held_seconds: self.held_seconds,
            known_seconds: self.known_seconds,
            compute_active_seconds: self.compute_active_seconds,
            memory_p99_bytes: percentile_disc(&memory, 0.99)?.unwrap_or(0),
            memory_max_bytes: memory.last().unwrap_or(0),
            compute_p95: percentile_cont(&compute, 0.95)?,
        }))
    }

    /// What a window keeps of this merge of its days: the largest values, as many as the
    /// percentiles' positions take from the top once `hours` more hours of each of its slices are
    /// added (a range's part days and today's hours); none when nothing was added.
    pub(super) fn window(mut self, hours: usize) -> Option<WindowPartial> {
        let more = hours * self.slices.len().max(1);
        let keep = |count: usize, p: f64, disc: bool| -> usize {
            let n = count + more;
            if n == 0 {
                return 0;
            }
            // The lowest ascending position the percentile takes of n values.
            let lowest = if disc {
                ((p * n as f64).ceil() as usize).clamp(1, n) - 1
            } else {
                (p * (n - 1) as f64).floor() as usize
            };
            n - lowest
        };
        let (first_hour, last_hour) = self.hours?;
        let (memory_count, compute_count) = (self.memory_peaks.count, self.compute_ratios.count);
        let mut memory = std::mem::take(&mut self.memory_peaks).sorted(Ord::cmp).here;
        let mut compute = std::mem::take(&mut self.compute_ratios)
            .sorted(f64::total_cmp)
            .here;
        let (km, kc) = (
            keep(memory_count, 0.99, true),
            keep(compute_count, 0.95, false),
        );
        memory.drain(..memory.len().saturating_sub(km));
        compute.drain(..compute.len().saturating_sub(kc));
        let mut slice_ids: Vec<i32> = self.slices.into_iter().collect();
        slice_ids.sort_unstable();
        Some(WindowPartial {
            held_seconds: self.held_seconds,
            known_seconds: self.known_seconds,
            compute_active_seconds: self.compute_active_seconds,
            first_hour,
            last_hour,
            slice_ids,
            memory_count: i64::try_from(memory_count).unwrap_or(i64::MAX),
            memory_top: memory,
            compute_count: i64::try_from(compute_count).unwrap_or(i64::MAX),
            compute_top: compute,
        })
    }
}

/// A group's figures over a range, as [`Evidence`](super::store::Evidence) holds them.
#[derive(Debug, PartialEq)]
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

/// PostgreSQL's `percentile_disc(p)` of `sorted` (none when empty): the first value whose
/// position reaches `ceil(p x n)` (src/backend/utils/adt/orderedsetaggs.c).
pub(super) fn percentile_disc<T: Copy>(sorted: &Sorted<T>, p: f64) -> Result<Option<T>, LeftOut> {
    let n = sorted.count;
    if n == 0 {
        return Ok(None);
    }
    let row = (p * n as f64).ceil() as usize;
    sorted.at(row.clamp(1, n) - 1).map(Some)
}

/// PostgreSQL's `percentile_cont(p)` of `sorted` (none when empty), to the bit: the rows at
/// `floor` and `ceil` of `p x (n - 1)`, and between them `lo + f x (hi - lo)`, as `float8_lerp`
/// computes it (src/backend/utils/adt/orderedsetaggs.c).
pub(super) fn percentile_cont(sorted: &Sorted<f64>, p: f64) -> Result<Option<f64>, LeftOut> {
    let n = sorted.count;
    if n == 0 {
        return Ok(None);
    }
    let at = p * (n - 1) as f64;
    let (first, second) = (at.floor(), at.ceil());
    let lo = sorted.at(first as usize)?;
    if first == second {
        return Ok(Some(lo));
    }
    let hi = sorted.at(second as usize)?;
    Ok(Some(lo + (at - first) * (hi - lo)))
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
        let all = |n: i64| Sorted::all((1..=n).collect::<Vec<i64>>());
        assert_eq!(percentile_disc(&all(100), 0.99), Ok(Some(99)));
        assert_eq!(percentile_disc(&all(10), 0.99), Ok(Some(10)));
        assert_eq!(percentile_disc(&all(1), 0.99), Ok(Some(1)));
        assert_eq!(percentile_disc(&all(0), 0.99), Ok(None));
        // percentile_cont(0.95) of 0, 1, 2, 3, 4: position 3.8, 3 + 0.8 x 1.
        let five = Sorted::all(vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        assert_eq!(percentile_cont(&five, 0.95), Ok(Some(3.0 + 0.8 * 1.0)));
        assert_eq!(
            percentile_cont(&Sorted::all(vec![0.25]), 0.95),
            Ok(Some(0.25))
        );
        assert_eq!(percentile_cont(&Sorted::all(vec![]), 0.95), Ok(None));
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

    /// A stretch of `hours` hours of each of `slices` slices from `first`, its values drawn from
    /// `rnd` (ties and repeats on purpose: values of a small range).
    fn stretch(first: u32, hours: u32, slices: i32, rnd: &mut impl FnMut(u64) -> u64) -> Partial {
        let n = (hours * slices as u32) as usize;
        let memory_peaks: Vec<i64> = (0..n).map(|_| rnd(50) as i64 * 1_000_000).collect();
        let compute_ratios: Vec<f64> = (0..n)
            .filter_map(|_| {
                let v = rnd(21);
                (v < 20).then(|| v as f64 / 19.0)
            })
            .collect();
        Partial {
            held_seconds: Decimal::from(n as i64 * 3600),
            known_seconds: Decimal::from(compute_ratios.len() as i64 * 3600),
            compute_active_seconds: Decimal::from(rnd(1000) as i64),
            first_hour: at(1, 0) + chrono::Duration::hours(i64::from(first)),
            last_hour: at(1, 0) + chrono::Duration::hours(i64::from(first + hours - 1)),
            slice_ids: (0..slices).collect(),
            memory_peaks,
            compute_ratios,
        }
    }

    #[test]
    fn a_window_of_the_largest_values_gives_the_percentiles_of_all_of_them() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut equal, mut left_out) = (0, 0);
        for _ in 0..400 {
            // A window of whole days, then the hours a range reads beside it.
            let slices = 1 + rnd(3) as i32;
            let days: Vec<Partial> = (0..1 + rnd(20) as u32)
                .map(|d| stretch(24 * d, 24, slices, &mut rnd))
                .collect();
            // A part day and today's hours, now and then of a replica more than the window saw.
            let extra: Vec<Partial> = (0..rnd(3) as u32)
                .map(|k| {
                    let replicas = slices + i32::from(rnd(4) == 0);
                    stretch(24 * 30 + k * 48, 1 + rnd(30) as u32, replicas, &mut rnd)
                })
                .collect();
            let added: usize = extra.iter().map(|p| p.memory_peaks.len()).sum();
            let mut all = Merged::default();
            let mut window = Merged::default();
            for p in &days {
                all.add(p.clone());
                window.add(p.clone());
            }
            let mut read = Merged::default();
            read.add_window(window.window(48).unwrap());
            for p in extra {
                all.add(p.clone());
                read.add(p);
            }
            let all = all.finish().unwrap().unwrap();
            match read.finish() {
                Ok(Some(figures)) => {
                    assert_eq!(figures, all);
                    equal += 1;
                }
                Ok(None) => panic!("nothing merged"),
                Err(LeftOut) => {
                    // Only where the range added more than the window kept room for.
                    assert!(added > 48 * slices as usize, "{added} values added");
                    left_out += 1;
                }
            }
        }
        assert!(
            equal > 350 && left_out > 0,
            "{equal} equal, {left_out} left out"
        );
    }
}
