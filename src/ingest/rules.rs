//! The physical rules of occupancy (DESIGN.md, Ingest contract: "one holder at a time"): a slice is
//! held by one consumer at a time, and a card is never reserved past itself. `validate` checks them
//! on a batch alone; `resent` checks them again, with the windows already stored, when a batch
//! re-sends a period. Pure: windows and shares in, clashes out; each window comes with its origin
//! (a batch index, a stored row), which the clashes name.
//!
//! Windows of one slice either share their interval exactly (the collector's grid window, when the
//! slice changed hands inside it: the held seconds of all of them together fit the interval) or do
//! not intersect at all. Reserved slices of one GPU add up to at most the whole card, compared in
//! exact integers; time-sliced replicas pay what they measurably used, so, hour by hour, their
//! activity and memory plus what reserved slices block fit the card's time.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use rust_decimal::Decimal;

use crate::domain::slice::{GpuGeometry, Reservation};
use crate::domain::time::{floor_hour, seconds_between};
use crate::domain::window::Window;

/// A rule two or more windows of one slice break together.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsumerClash<O> {
    /// Windows over the same interval hold the slice longer than the interval lasts.
    OverHeld {
        windows: Vec<O>,
        held: Decimal,
        length: Decimal,
    },
    /// Two windows intersect without sharing their interval.
    Overlap { earlier: O, later: O },
}

/// Every clash of the one-consumer rule among `windows`.
pub fn consumer_clashes<O: Copy>(windows: &[(O, &Window)]) -> Vec<ConsumerClash<O>> {
    let mut order: Vec<(O, &Window)> = windows.to_vec();
    order.sort_by_key(|(_, w)| (w.slice, w.start, w.end));
    let mut clashes = Vec::new();
    let mut i = 0;
    // The latest end among earlier groups of the same slice, and the window that has it.
    let mut reach: Option<(usize, DateTime<Utc>, O)> = None;
    while i < order.len() {
        let (origin, first) = order[i];
        let mut j = i + 1;
        while j < order.len()
            && (order[j].1.slice, order[j].1.start, order[j].1.end)
                == (first.slice, first.start, first.end)
        {
            j += 1;
        }
        let group = &order[i..j];
        if let Some((slice, end, earlier)) = reach
            && slice == first.slice
            && first.start < end
        {
            clashes.push(ConsumerClash::Overlap {
                earlier,
                later: origin,
            });
        }
        if group.len() > 1 {
            let held = group
                .iter()
                .try_fold(Decimal::ZERO, |a, (_, w)| a.checked_add(w.held_seconds))
                .unwrap_or(Decimal::MAX);
            let length = seconds_between(first.start, first.end);
            if held > length {
                clashes.push(ConsumerClash::OverHeld {
                    windows: group.iter().map(|(o, _)| *o).collect(),
                    held,
                    length,
                });
            }
        }
        reach = match reach {
            Some((slice, end, o)) if slice == first.slice && end >= first.end => {
                Some((slice, end, o))
            }
            _ => Some((first.slice, first.end, origin)),
        };
        i = j;
    }
    clashes
}

/// How much of its card a set of reserved slices takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reserved {
    /// Fractions of the whole card, for people (rounded at the 28th digit).
    pub compute: Decimal,
    pub memory: Decimal,
    /// The exact comparisons with the whole card.
    pub compute_over: bool,
    pub memory_over: bool,
}

impl Reserved {
    pub fn exceeds_the_card(&self) -> bool {
        self.compute_over || self.memory_over
    }
}

/// What the reserved slices among `reservations` take of `gpu`, computed in exact integers (over
/// `100 x compute slices x 10^9` for compute and `memory slices x memory bytes x 10^9` for memory:
/// thread percentages, slice counts, byte counts and fractions of at most nine decimals are all
/// whole numbers there), so that seven 1/7 instances make exactly one card. `None` if a figure is
/// out of the contract's range.
pub fn reserved<'r>(
    gpu: &GpuGeometry,
    reservations: impl IntoIterator<Item = &'r Reservation>,
) -> Option<Reserved> {
    const SCALE: i128 = 1_000_000_000;
    let c = i128::from(gpu.compute_slices);
    let m = i128::from(gpu.memory_slices);
    let b = i128::from(gpu.memory_bytes);
    let compute_whole = 100 * c * SCALE;
    let memory_whole = m.checked_mul(b)?.checked_mul(SCALE)?;
    let (mut compute, mut memory) = (0i128, 0i128);
    for r in reservations {
        let (dc, dm) = match r {
            Reservation::Mig {
                compute_slices,
                memory_slices,
                ..
            } => (
                i128::from(*compute_slices) * 100 * SCALE,
                i128::from(*memory_slices)
                    .checked_mul(b)?
                    .checked_mul(SCALE)?,
            ),
            Reservation::Mps {
                active_thread_percentage,
                pinned_memory_bytes,
            } => (
                i128::from(*active_thread_percentage) * c * SCALE,
                i128::from(*pinned_memory_bytes)
                    .checked_mul(m)?
                    .checked_mul(SCALE)?,
            ),
            Reservation::Vgpu { fraction } => {
                let f = nanos(*fraction)?;
                (f.checked_mul(100 * c)?, f.checked_mul(m)?.checked_mul(b)?)
            }
            Reservation::Whole => (compute_whole, memory_whole),
            Reservation::Timeslice { .. } => (0, 0),
        };
        compute = compute.checked_add(dc)?;
        memory = memory.checked_add(dm)?;
    }
    let fraction = |n: i128, d: i128| {
        let n = Decimal::try_from_i128_with_scale(n, 0).ok()?;
        let d = Decimal::try_from_i128_with_scale(d, 0).ok()?;
        n.checked_div(d)
    };
    Some(Reserved {
        compute: fraction(compute, compute_whole)?,
        memory: fraction(memory, memory_whole)?,
        compute_over: compute > compute_whole,
        memory_over: memory > memory_whole,
    })
}

/// A fraction of at most nine decimals as billionths.
fn nanos(f: Decimal) -> Option<i128> {
    let f = f.normalize();
    let scale = f.scale();
    if scale > 9 {
        return None;
    }
    f.mantissa().checked_mul(10i128.pow(9 - scale))
}

/// What the rules know of a slice for the hourly check.
#[derive(Debug, Clone, Copy)]
pub struct SliceUse {
    /// Reserved kinds block their share for every held second; a time-sliced replica blocks what
    /// it measurably used (its figures relative to the whole GPU).
    pub reserved: bool,
    pub compute_share: Decimal,
    pub memory_share: Decimal,
    pub gpu_memory_bytes: u64,
}

/// An hour in which the windows of one GPU use more of it than the batch's period gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Overrun<O> {
    pub hour: DateTime<Utc>,
    /// `compute` or `memory`.
    pub what: &'static str,
    pub used_seconds: Decimal,
    pub available_seconds: Decimal,
    /// Every window that used the GPU in that hour.
    pub windows: Vec<O>,
}

/// Rounding slack of the hourly sums (shares like 1/7 are rounded at the 28th digit): a trillionth
/// of a second.
const SLACK: Decimal = Decimal::from_parts(1, 0, 0, false, 12);

/// Hours of `[period_start, period_end)` in which the windows of one GPU that has time-sliced
/// replicas use more compute or memory than the GPU had: `slices[window.slice]` describes each
/// window's slice. GPUs without time-sliced windows need no hourly check: their reserved shares and
/// the one-consumer rule bound them already.
pub fn hourly_overruns<O: Copy + PartialEq>(
    period_start: DateTime<Utc>,
    period_end: DateTime<Utc>,
    slices: &[SliceUse],
    windows: &[(O, &Window)],
) -> Vec<Overrun<O>> {
    if !windows.iter().any(|(_, w)| !slices[w.slice].reserved) {
        return Vec::new();
    }
    struct Hour<O> {
        compute: Decimal,
        memory: Decimal,
        windows: Vec<O>,
    }
    let mut hours: BTreeMap<DateTime<Utc>, Hour<O>> = BTreeMap::new();
    let mut overflow = Vec::new();
    for (origin, w) in windows {
        let u = &slices[w.slice];
        let gpu_memory = Decimal::from(u.gpu_memory_bytes);
        for (hour, f) in &w.hours {
            let h = hours.entry(*hour).or_insert_with(|| Hour {
                compute: Decimal::ZERO,
                memory: Decimal::ZERO,
                windows: Vec::new(),
            });
            h.windows.push(*origin);
            let (c, m) = if u.reserved {
                (
                    f.held_seconds.checked_mul(u.compute_share),
                    f.held_seconds.checked_mul(u.memory_share),
                )
            } else {
                (
                    Some(f.compute_active_seconds),
                    f.memory_byte_seconds.checked_div(gpu_memory),
                )
            };
            match (
                c.and_then(|c| h.compute.checked_add(c)),
                m.and_then(|m| h.memory.checked_add(m)),
            ) {
                (Some(c), Some(m)) => (h.compute, h.memory) = (c, m),
                _ => overflow.push(*hour),
            }
        }
    }
    let mut out = Vec::new();
    for (hour, h) in hours {
        let from = hour.max(period_start);
        let to = (hour + Duration::hours(1)).min(period_end);
        let available = seconds_between(from, to);
        for (what, used) in [("compute", h.compute), ("memory", h.memory)] {
            if used > available + SLACK || overflow.contains(&hour) {
                let mut windows = h.windows.clone();
                windows.dedup();
                out.push(Overrun {
                    hour: floor_hour(hour),
                    what,
                    used_seconds: used,
                    available_seconds: available,
                    windows,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn span(origin: usize, slice: usize, start: &str, end: &str, held: Decimal) -> (usize, Window) {
        (
            origin,
            Window {
                slice,
                consumer: origin,
                start: t(start),
                end: t(end),
                held_seconds: held,
                memory_byte_seconds: Decimal::ZERO,
                memory_peak_bytes: 0,
                compute_active_seconds: None,
                hours: Vec::new(),
            },
        )
    }

    fn refs(windows: &[(usize, Window)]) -> Vec<(usize, &Window)> {
        windows.iter().map(|(o, w)| (*o, w)).collect()
    }

    #[test]
    fn a_slice_changing_hands_inside_a_window_is_fine_and_two_consumers_at_once_are_not() {
        let handover = [
            span(
                0,
                0,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                dec!(20),
            ),
            span(
                1,
                0,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                dec!(40),
            ),
            span(
                2,
                0,
                "2026-10-01T00:01:00Z",
                "2026-10-01T00:02:00Z",
                dec!(60),
            ),
        ];
        assert_eq!(consumer_clashes(&refs(&handover)), vec![]);
        let both = [
            span(
                0,
                0,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                dec!(60),
            ),
            span(
                1,
                0,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                dec!(60),
            ),
            span(
                2,
                1,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                dec!(60),
            ),
        ];
        assert_eq!(
            consumer_clashes(&refs(&both)),
            vec![ConsumerClash::OverHeld {
                windows: vec![0, 1],
                held: dec!(120),
                length: dec!(60)
            }]
        );
    }

    #[test]
    fn windows_of_one_slice_that_intersect_without_sharing_their_interval_clash() {
        let shifted = [
            span(
                0,
                0,
                "2026-10-01T00:00:00Z",
                "2026-10-01T00:01:00Z",
                dec!(60),
            ),
            span(
                1,
                0,
                "2026-10-01T00:00:30Z",
                "2026-10-01T00:01:30Z",
                dec!(60),
            ),
            // A long window, then one inside it after a gap of groups.
            span(
                2,
                1,
                "2026-10-01T00:00:00Z",
                "2026-10-01T01:00:00Z",
                dec!(10),
            ),
            span(
                3,
                1,
                "2026-10-01T00:10:00Z",
                "2026-10-01T00:11:00Z",
                dec!(10),
            ),
            span(
                4,
                1,
                "2026-10-01T00:20:00Z",
                "2026-10-01T00:21:00Z",
                dec!(10),
            ),
        ];
        assert_eq!(
            consumer_clashes(&refs(&shifted)),
            vec![
                ConsumerClash::Overlap {
                    earlier: 0,
                    later: 1
                },
                ConsumerClash::Overlap {
                    earlier: 2,
                    later: 3
                },
                ConsumerClash::Overlap {
                    earlier: 2,
                    later: 4
                },
            ]
        );
    }

    const H100: GpuGeometry = GpuGeometry {
        memory_bytes: 85_520_809_984,
        compute_slices: 7,
        memory_slices: 8,
    };

    fn mig(c: u8, m: u8) -> Reservation {
        Reservation::Mig {
            profile: "x".into(),
            profile_id: None,
            compute_slices: c,
            memory_slices: m,
            memory_bytes: 1,
        }
    }

    #[test]
    fn seven_sevenths_make_exactly_one_card_and_more_is_refused() {
        let seven = vec![mig(1, 1); 7];
        let r = reserved(&H100, &seven).unwrap();
        assert!(!r.exceeds_the_card(), "{r:?}");
        assert_eq!(r.compute, Decimal::ONE);
        let whole_twice = [Reservation::Whole, Reservation::Whole];
        assert!(reserved(&H100, &whole_twice).unwrap().exceeds_the_card());
        let vgpu = |f| Reservation::Vgpu { fraction: f };
        assert!(
            reserved(&H100, &[vgpu(dec!(0.8)), vgpu(dec!(0.8))])
                .unwrap()
                .exceeds_the_card()
        );
        assert!(
            !reserved(&H100, &vec![vgpu(dec!(0.125)); 8])
                .unwrap()
                .exceeds_the_card()
        );
        let mps = |t, p| Reservation::Mps {
            active_thread_percentage: t,
            pinned_memory_bytes: p,
        };
        assert!(
            reserved(&H100, &[mps(100, 1 << 30), mps(100, 1 << 30)])
                .unwrap()
                .exceeds_the_card()
        );
        // Pinned memory counts too: 3 x 30 GB of an 85.5 GB card.
        let r = reserved(&H100, &vec![mps(30, 30_000_000_000); 3]).unwrap();
        assert!(r.exceeds_the_card() && r.compute < Decimal::ONE, "{r:?}");
        // Time-sliced replicas reserve nothing.
        let ts = Reservation::Timeslice {
            replicas: 4,
            replica: 0,
        };
        assert!(
            !reserved(&H100, &[ts.clone(), ts, Reservation::Whole])
                .unwrap()
                .exceeds_the_card()
        );
        // A fraction finer than nine decimals is outside the contract.
        assert_eq!(reserved(&H100, &[vgpu(dec!(0.1234567891))]), None);
    }

    #[test]
    fn time_sliced_replicas_may_not_use_more_of_an_hour_than_the_card_had() {
        let gpu = 85_520_809_984u64;
        let ts = SliceUse {
            reserved: false,
            compute_share: Decimal::ONE,
            memory_share: Decimal::ONE,
            gpu_memory_bytes: gpu,
        };
        let hour = t("2026-10-01T00:00:00Z");
        let busy = Window {
            slice: 0,
            consumer: 0,
            start: hour,
            end: hour + Duration::hours(1),
            held_seconds: dec!(3600),
            memory_byte_seconds: dec!(1000),
            memory_peak_bytes: 10,
            compute_active_seconds: Some(dec!(2000)),
            hours: Vec::new(),
        }
        .hourly()
        .unwrap();
        let other = Window {
            slice: 1,
            ..busy.clone()
        };
        let span = |o: usize, s: usize| (o, if s == 0 { &busy } else { &other });
        let slices = [ts, ts];
        let end = hour + Duration::hours(1);
        // 2000 + 2000 active seconds in a 3600-second hour.
        let over = hourly_overruns(hour, end, &slices, &[span(0, 0), span(1, 1)]);
        assert_eq!(over.len(), 1, "{over:?}");
        assert_eq!(over[0].what, "compute");
        assert_eq!(over[0].used_seconds, dec!(4000));
        assert_eq!(over[0].windows, vec![0, 1]);
        assert!(hourly_overruns(hour, end, &slices, &[span(0, 0)]).is_empty());
        // A batch that covers half the hour has half of it to give.
        let half = hour + Duration::minutes(30);
        assert_eq!(
            hourly_overruns(half, end, &slices, &[span(0, 0)])[0].available_seconds,
            dec!(1800)
        );
    }
}
