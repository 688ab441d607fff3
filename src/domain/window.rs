//! The occupancy window: what one consumer held of one slice over `[start, end)`. It has this one
//! name from the ingest contract to the rollup: the contract's wire record (`batch::WindowReport`) is
//! converted into it once, by `ingest::validate`, and a stored window read back becomes one too.
//!
//! A window that crosses an hour boundary is split in proportion to its time in each hour (to the
//! microsecond, the contract's finest time), the last piece taking the remainder, so that the
//! rollup's sums equal the windows' sums exactly and a month boundary never moves a second into the
//! wrong month. Every product is checked: figures come from collectors, and an overflow is a refused
//! batch (`None` here), never a panic.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;

use super::time::floor_hour;

/// One occupancy window. `slice` and `consumer` index the tables of whoever holds it: a batch's
/// slices and consumers, or the slices and consumers of stored windows read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub slice: usize,
    pub consumer: usize,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub held_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub memory_peak_bytes: i64,
    /// `None` when the collector could not measure compute activity.
    pub compute_active_seconds: Option<Decimal>,
    /// Its figures split by hour, as the rollup adds them: filled by [`Window::hourly`].
    pub hours: Vec<(DateTime<Utc>, HourlyUsage)>,
}

impl Window {
    /// The window with its [`Window::hours`] filled; `None` when it is empty or reversed, or when a
    /// product of its figures overflows.
    pub fn hourly(mut self) -> Option<Window> {
        let whole = HourlyUsage::of_window(
            self.held_seconds,
            self.memory_byte_seconds,
            self.memory_peak_bytes,
            self.compute_active_seconds,
        );
        self.hours = split_by_hour(self.start, self.end, whole)?;
        Some(self)
    }

    /// Its part of `hour`, one of [`Window::hours`] (`piece`), split further at `cuts` (instants
    /// strictly inside the window's time in that hour, ascending): the instant each part starts and
    /// its figures, in proportion to its time, as an hour boundary splits a window, the last part
    /// taking the remainder so that the parts sum to the piece exactly. The window's count stays
    /// with the part it starts in. The piece itself when there is no cut; `None` on overflow.
    pub fn split_hour_at(
        &self,
        hour: DateTime<Utc>,
        piece: &HourlyUsage,
        cuts: &[DateTime<Utc>],
    ) -> Option<Vec<(DateTime<Utc>, HourlyUsage)>> {
        let from = self.start.max(hour);
        let to = self.end.min(hour + Duration::hours(1));
        if cuts.is_empty() {
            return Some(vec![(from, *piece)]);
        }
        let total = Decimal::from(micros(from, to)?);
        let mut parts = Vec::with_capacity(cuts.len() + 1);
        let mut given = HourlyUsage::default();
        let mut at = from;
        for &cut in cuts {
            if cut <= at || cut >= to {
                return None;
            }
            let mut part = piece.checked_share(Decimal::from(micros(at, cut)?), total)?;
            if at == from {
                part.window_count = piece.window_count;
            }
            given = given.checked_add(&part)?;
            parts.push((at, part));
            at = cut;
        }
        parts.push((at, piece.checked_minus(&given)?));
        Some(parts)
    }

    /// Whether `other` is the same record: same interval and figures (the hours follow from them).
    pub fn same_figures(&self, other: &Window) -> bool {
        (
            self.end,
            self.held_seconds,
            self.memory_byte_seconds,
            self.memory_peak_bytes,
            self.compute_active_seconds,
        ) == (
            other.end,
            other.held_seconds,
            other.memory_byte_seconds,
            other.memory_peak_bytes,
            other.compute_active_seconds,
        )
    }
}

/// The usage of one hourly rollup row: what the windows of one (slice, consumer) hold in one hour,
/// or the part of one window that falls in it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HourlyUsage {
    pub held_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub memory_peak_bytes: i64,
    /// Sum of compute-active seconds over the windows whose compute was measured.
    pub compute_active_seconds: Decimal,
    /// Held seconds of the windows whose compute was measured.
    pub compute_known_seconds: Decimal,
    /// Windows that start in this hour (a window is counted once, in the hour it starts).
    pub window_count: i32,
}

impl HourlyUsage {
    fn of_window(
        held_seconds: Decimal,
        memory_byte_seconds: Decimal,
        memory_peak_bytes: i64,
        compute_active_seconds: Option<Decimal>,
    ) -> HourlyUsage {
        HourlyUsage {
            held_seconds,
            memory_byte_seconds,
            memory_peak_bytes,
            compute_active_seconds: compute_active_seconds.unwrap_or(Decimal::ZERO),
            compute_known_seconds: if compute_active_seconds.is_some() {
                held_seconds
            } else {
                Decimal::ZERO
            },
            window_count: 1,
        }
    }

    /// `self + o`, or `None` on overflow.
    pub fn checked_add(&self, o: &HourlyUsage) -> Option<HourlyUsage> {
        Some(HourlyUsage {
            held_seconds: self.held_seconds.checked_add(o.held_seconds)?,
            memory_byte_seconds: self
                .memory_byte_seconds
                .checked_add(o.memory_byte_seconds)?,
            memory_peak_bytes: self.memory_peak_bytes.max(o.memory_peak_bytes),
            compute_active_seconds: self
                .compute_active_seconds
                .checked_add(o.compute_active_seconds)?,
            compute_known_seconds: self
                .compute_known_seconds
                .checked_add(o.compute_known_seconds)?,
            window_count: self.window_count.checked_add(o.window_count)?,
        })
    }

    /// The part `span / total` of these figures. Seconds are multiplied before they are divided:
    /// a window held throughout gives each hour exactly the seconds it spans (dividing first
    /// rounds the ratio, and 3,720 s x (3,600 / 3,720) came to a hair over 3,600, which the
    /// rollup's bound refused). Seconds are at most a week, so the product cannot overflow; the
    /// memory figure, which can be large, is scaled by the ratio.
    fn checked_share(&self, span: Decimal, total: Decimal) -> Option<HourlyUsage> {
        let seconds = |x: Decimal| x.checked_mul(span)?.checked_div(total);
        Some(HourlyUsage {
            held_seconds: seconds(self.held_seconds)?,
            memory_byte_seconds: self
                .memory_byte_seconds
                .checked_mul(span.checked_div(total)?)?,
            memory_peak_bytes: self.memory_peak_bytes,
            compute_active_seconds: seconds(self.compute_active_seconds)?,
            compute_known_seconds: seconds(self.compute_known_seconds)?,
            window_count: 0,
        })
    }

    fn checked_minus(&self, o: &HourlyUsage) -> Option<HourlyUsage> {
        Some(HourlyUsage {
            held_seconds: self.held_seconds.checked_sub(o.held_seconds)?,
            memory_byte_seconds: self
                .memory_byte_seconds
                .checked_sub(o.memory_byte_seconds)?,
            memory_peak_bytes: self.memory_peak_bytes,
            compute_active_seconds: self
                .compute_active_seconds
                .checked_sub(o.compute_active_seconds)?,
            compute_known_seconds: self
                .compute_known_seconds
                .checked_sub(o.compute_known_seconds)?,
            window_count: self.window_count.checked_sub(o.window_count)?,
        })
    }
}

/// Microseconds from `a` to `b` (the contract's timestamps are whole microseconds).
fn micros(a: DateTime<Utc>, b: DateTime<Utc>) -> Option<i64> {
    (b - a).num_microseconds()
}

/// Splits `[start, end)` at hour boundaries: `(hour, figures of that part)`, summing to `f`
/// exactly. `None` when `end <= start` or a product overflows.
fn split_by_hour(
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    f: HourlyUsage,
) -> Option<Vec<(DateTime<Utc>, HourlyUsage)>> {
    if end <= start {
        return None;
    }
    let first = floor_hour(start);
    if floor_hour(end - Duration::microseconds(1)) == first {
        return Some(vec![(first, f)]);
    }
    let total = Decimal::from(micros(start, end)?);
    let mut pieces = Vec::new();
    let mut given = HourlyUsage::default();
    let mut hour = first;
    let mut from = start;
    loop {
        let next = hour + Duration::hours(1);
        if next >= end {
            pieces.push((hour, f.checked_minus(&given)?));
            break;
        }
        let mut piece = f.checked_share(Decimal::from(micros(from, next)?), total)?;
        if hour == first {
            piece.window_count = f.window_count;
        }
        given = given.checked_add(&piece)?;
        pieces.push((hour, piece));
        from = next;
        hour = next;
    }
    Some(pieces)
}

/// Accumulates hourly figures per key, e.g. `(slice_id, consumer_id)`.
#[derive(Debug, Default)]
pub struct Rollup<K: Ord> {
    pub rows: BTreeMap<(DateTime<Utc>, K), HourlyUsage>,
}

impl<K: Ord + Copy> Rollup<K> {
    pub fn new() -> Self {
        Rollup {
            rows: BTreeMap::new(),
        }
    }

    /// Adds a window's [`Window::hours`]; `None` on overflow.
    pub fn add(&mut self, key: K, pieces: &[(DateTime<Utc>, HourlyUsage)]) -> Option<()> {
        for (hour, piece) in pieces {
            let row = self.rows.entry((*hour, key)).or_default();
            *row = row.checked_add(piece)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_window_inside_one_hour_is_one_row() {
        let f = HourlyUsage::of_window(dec!(60), dec!(1.2e12), 7, Some(dec!(12.5)));
        let pieces =
            split_by_hour(t("2026-10-01T10:00:00Z"), t("2026-10-01T10:01:00Z"), f).unwrap();
        assert_eq!(pieces, vec![(t("2026-10-01T10:00:00Z"), f)]);
    }

    #[test]
    fn a_window_held_throughout_gives_each_hour_exactly_its_seconds() {
        // 62 minutes from 11:59: the ratio 3,600 / 3,720 does not terminate; the hour's share of
        // the held seconds must still be 3,600, not a hair over (which the rollup refuses).
        let f = HourlyUsage::of_window(dec!(3720), dec!(3720e9), 9, Some(dec!(930)));
        let pieces =
            split_by_hour(t("2026-09-09T11:59:00Z"), t("2026-09-09T13:01:00Z"), f).unwrap();
        let held: Vec<Decimal> = pieces.iter().map(|p| p.1.held_seconds).collect();
        assert_eq!(held, vec![dec!(60), dec!(3600), dec!(60)]);
        let known: Vec<Decimal> = pieces.iter().map(|p| p.1.compute_known_seconds).collect();
        assert_eq!(known, held);
        assert_eq!(pieces[1].1.compute_active_seconds, dec!(900));
    }

    #[test]
    fn a_window_across_midnight_at_month_end_is_split_in_proportion_and_sums_exactly() {
        // 20 s in October, 40 s in November; held 59 s, a third of a figure that does not divide evenly.
        let f = HourlyUsage::of_window(dec!(59), dec!(1000), 9, Some(dec!(10)));
        let pieces =
            split_by_hour(t("2026-10-31T23:59:40Z"), t("2026-11-01T00:00:40Z"), f).unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].0, t("2026-10-31T23:00:00Z"));
        assert_eq!(pieces[1].0, t("2026-11-01T00:00:00Z"));
        let held: Decimal = pieces.iter().map(|p| p.1.held_seconds).sum();
        let mem: Decimal = pieces.iter().map(|p| p.1.memory_byte_seconds).sum();
        let known: Decimal = pieces.iter().map(|p| p.1.compute_known_seconds).sum();
        assert_eq!((held, mem, known), (dec!(59), dec!(1000), dec!(59)));
        assert_eq!(pieces[0].1.held_seconds.round_dp(6), dec!(19.666667));
        // Counted once, in the hour it starts; the peak holds in both.
        assert_eq!((pieces[0].1.window_count, pieces[1].1.window_count), (1, 0));
        assert_eq!(pieces[1].1.memory_peak_bytes, 9);
    }

    #[test]
    fn unknown_compute_adds_nothing_to_the_known_seconds() {
        let f = HourlyUsage::of_window(dec!(60), dec!(0), 0, None);
        assert_eq!(f.compute_known_seconds, Decimal::ZERO);
        assert_eq!(f.compute_active_seconds, Decimal::ZERO);
    }

    #[test]
    fn a_two_microsecond_window_across_an_hour_splits_in_halves_without_dividing_by_zero() {
        let f = HourlyUsage::of_window(dec!(0.000002), dec!(100), 1, Some(dec!(0.000001)));
        let pieces = split_by_hour(
            t("2026-10-01T09:59:59.999999Z"),
            t("2026-10-01T10:00:00.000001Z"),
            f,
        )
        .unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].1.held_seconds, dec!(0.000001));
        assert_eq!(pieces[1].1.memory_byte_seconds, dec!(50));
        // An empty or reversed window has no pieces, and sums that overflow are refused.
        let at = t("2026-10-01T10:00:00Z");
        assert_eq!(split_by_hour(at, at, f), None);
        let huge = HourlyUsage::of_window(Decimal::MAX, Decimal::MAX, 1, None);
        let mut rollup = Rollup::new();
        assert_eq!(rollup.add(1, &[(at, huge)]), Some(()));
        assert_eq!(rollup.add(1, &[(at, huge)]), None);
    }
}
