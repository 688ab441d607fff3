//! Sums of occupancy and the share formula applied to them. DESIGN.md's share is linear in a slice's
//! compute and memory shares, so sums of `held_seconds x share` over any set of rollup rows are all
//! reports and pricing need; the weights are applied last (`ShareWeights::weigh`). A query's row
//! becomes sums through [`occupancy_sums!`] and one slice's figures through
//! [`OccupancySums::of_slice`], each the only way to.

use rust_decimal::Decimal;

use super::exact::Exact;
use super::slice::{PhysicalShare, ShareWeights};

/// Below this fraction of its known seconds busy (1 %), a slice did no real work: right-sizing
/// gives it back, and a budget watching for idle slices alerts on it.
pub const IDLE_FRACTION: Decimal = Decimal::from_parts(1, 0, 0, false, 2);

/// Rollup sums over a set of (hour, slice, consumer) rows. Seconds throughout; `*_compute` and
/// `*_memory` terms are multiplied by each slice's compute or memory share (for a time-sliced replica
/// both shares are 1, its figures being relative to the whole GPU).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OccupancySums {
    pub held_seconds: Decimal,
    pub held_compute: Decimal,
    pub held_memory: Decimal,
    /// Held seconds whose compute activity was measured.
    pub known_seconds: Decimal,
    pub known_compute: Decimal,
    pub compute_active_seconds: Decimal,
    pub active_compute: Decimal,
    pub memory_gib_seconds: Decimal,
    /// Memory byte-seconds over each slice's reserved bytes, times its memory share.
    pub memory_used: Decimal,
    pub windows: i64,
}

/// The [`OccupancySums`] of a query row whose columns carry the sums' names: `held_seconds`,
/// `held_compute`, `held_memory`, `known_seconds`, `known_compute`, `compute_active_seconds`,
/// `active_compute`, `memory_gib_seconds`, `memory_used` and `windows`.
#[macro_export]
macro_rules! occupancy_sums {
    ($row:expr) => {
        $crate::domain::usage::OccupancySums {
            held_seconds: $row.held_seconds,
            held_compute: $row.held_compute,
            held_memory: $row.held_memory,
            known_seconds: $row.known_seconds,
            known_compute: $row.known_compute,
            compute_active_seconds: $row.compute_active_seconds,
            active_compute: $row.active_compute,
            memory_gib_seconds: $row.memory_gib_seconds,
            memory_used: $row.memory_used,
            windows: $row.windows,
        }
    };
}

/// What one slice held and used over some time, before its shares are applied.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SliceSeconds {
    pub held_seconds: Decimal,
    /// Held seconds whose compute activity was measured.
    pub known_seconds: Decimal,
    pub compute_active_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub windows: i64,
}

const GIB: Decimal = Decimal::from_parts(1 << 30, 0, 0, false, 0);

impl OccupancySums {
    /// One slice's figures with its shares applied: seconds times its compute or memory share, and
    /// memory over what it reserves.
    pub fn of_slice(s: &SliceSeconds, share: &PhysicalShare) -> OccupancySums {
        let reserved = Decimal::from(share.memory_reserved_bytes);
        OccupancySums {
            held_seconds: s.held_seconds,
            held_compute: s.held_seconds * share.compute,
            held_memory: s.held_seconds * share.memory,
            known_seconds: s.known_seconds,
            known_compute: s.known_seconds * share.compute,
            compute_active_seconds: s.compute_active_seconds,
            active_compute: s.compute_active_seconds * share.compute,
            memory_gib_seconds: s.memory_byte_seconds / GIB,
            memory_used: if reserved > Decimal::ZERO {
                s.memory_byte_seconds * share.memory / reserved
            } else {
                Decimal::ZERO
            },
            windows: s.windows,
        }
    }

    pub fn add(&mut self, o: &OccupancySums) {
        self.held_seconds += o.held_seconds;
        self.held_compute += o.held_compute;
        self.held_memory += o.held_memory;
        self.known_seconds += o.known_seconds;
        self.known_compute += o.known_compute;
        self.compute_active_seconds += o.compute_active_seconds;
        self.active_compute += o.active_compute;
        self.memory_gib_seconds += o.memory_gib_seconds;
        self.memory_used += o.memory_used;
        self.windows += o.windows;
    }

    /// GPU-equivalent seconds blocked: reserved kinds block `share x held` whether busy or not; a
    /// time-sliced replica reserves nothing and blocks what it measurably used.
    pub fn held_equivalent(&self, reserved: bool, w: &ShareWeights) -> Decimal {
        if reserved {
            w.weigh(self.held_compute, self.held_memory)
        } else {
            w.weigh(self.active_compute, self.memory_used)
        }
    }

    /// The busy part of [`Self::held_equivalent`]: compute utilisation (measured on the known part,
    /// standing for the whole) and memory utilisation, weighted alike. `None` when compute counts
    /// and was never measured.
    pub fn used_equivalent(&self, reserved: bool, w: &ShareWeights) -> Option<Decimal> {
        if !reserved {
            return Some(self.held_equivalent(false, w));
        }
        let compute = if self.known_compute > Decimal::ZERO {
            self.held_compute * (self.active_compute / self.known_compute)
        } else if w.compute > Decimal::ZERO && self.held_compute > Decimal::ZERO {
            return None;
        } else {
            Decimal::ZERO
        };
        Some(w.weigh(compute, self.memory_used))
    }
}

/// The share-weighted sums that price a line, exact: [`OccupancySums`]'s `held_compute`,
/// `held_memory`, `active_compute` and `memory_used` with each share taken as its fraction
/// ([`Exact::share`]), so that a share of 1/7 prices to the fraction and not to its 28-digit decimal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExactSums {
    pub held_compute: Exact,
    pub held_memory: Exact,
    pub active_compute: Exact,
    pub memory_used: Exact,
}

/// [`ShareWeights`] as exact figures, converted once for rows priced by the million.
#[derive(Debug, Clone)]
pub struct ExactWeights {
    pub compute: Exact,
    pub memory: Exact,
}

impl From<&ShareWeights> for ExactWeights {
    fn from(w: &ShareWeights) -> Self {
        ExactWeights {
            compute: w.compute.into(),
            memory: w.memory.into(),
        }
    }
}

impl ExactSums {
    /// Figures of slices that share one physical share: held and active seconds and memory
    /// byte-seconds, summed.
    pub fn of_share(
        held: &Exact,
        active: &Exact,
        memory_byte_seconds: &Exact,
        share: &PhysicalShare,
    ) -> ExactSums {
        let compute = Exact::share(share.compute);
        let memory = Exact::share(share.memory);
        let reserved = Exact::from(i64::try_from(share.memory_reserved_bytes).unwrap_or(i64::MAX));
        ExactSums {
            held_compute: held * &compute,
            held_memory: held * &memory,
            active_compute: active * &compute,
            memory_used: if reserved.is_zero() {
                Exact::zero()
            } else {
                memory_byte_seconds * &memory / &reserved
            },
        }
    }

    /// One slice's figures with its shares applied, exactly.
    pub fn of_slice(s: &SliceSeconds, share: &PhysicalShare) -> ExactSums {
        Self::of_share(
            &s.held_seconds.into(),
            &s.compute_active_seconds.into(),
            &s.memory_byte_seconds.into(),
            share,
        )
    }

    /// Sums whose shares were applied before they got here (in SQL, at a fixed number of places):
    /// exact as their decimals say.
    pub fn as_written(s: &OccupancySums) -> ExactSums {
        ExactSums {
            held_compute: s.held_compute.into(),
            held_memory: s.held_memory.into(),
            active_compute: s.active_compute.into(),
            memory_used: s.memory_used.into(),
        }
    }

    pub fn add(&mut self, o: &ExactSums) {
        self.held_compute += &o.held_compute;
        self.held_memory += &o.held_memory;
        self.active_compute += &o.active_compute;
        self.memory_used += &o.memory_used;
    }

    /// [`Self::held_equivalent`] of [`Self::as_written`]'s sums, converting only the two it reads,
    /// the weights already exact: what pricing rows by the million calls.
    pub fn held_equivalent_as_written(
        s: &OccupancySums,
        reserved: bool,
        w: &ExactWeights,
    ) -> Exact {
        let (compute, memory) = if reserved {
            (s.held_compute, s.held_memory)
        } else {
            (s.active_compute, s.memory_used)
        };
        Self::held_equivalent_of(compute, memory, w)
    }

    /// The GPU-equivalent seconds of the two sums a price reads (a reserved slice's held compute
    /// and memory, a time-sliced one's active compute and memory used), the weights exact.
    pub fn held_equivalent_of(compute: Decimal, memory: Decimal, w: &ExactWeights) -> Exact {
        Exact::from(compute) * &w.compute + Exact::from(memory) * &w.memory
    }

    /// [`OccupancySums::held_equivalent`], exact.
    pub fn held_equivalent(&self, reserved: bool, w: &ShareWeights) -> Exact {
        let (compute, memory) = if reserved {
            (&self.held_compute, &self.held_memory)
        } else {
            (&self.active_compute, &self.memory_used)
        };
        compute * w.compute + memory * w.memory
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    #[test]
    fn a_reserved_slice_blocks_its_share_whether_busy_or_not() {
        let s = OccupancySums {
            held_seconds: dec!(3600),
            held_compute: dec!(3600) * dec!(3) / dec!(7),
            held_memory: dec!(1800),
            known_seconds: dec!(3600),
            known_compute: dec!(3600) * dec!(3) / dec!(7),
            ..Default::default()
        };
        let w = ShareWeights::default();
        assert_eq!(s.held_equivalent(true, &w).round_dp(4), dec!(1671.4286));
        assert_eq!(s.used_equivalent(true, &w), Some(dec!(0)));
    }

    #[test]
    fn without_a_compute_figure_the_used_part_is_unknown_unless_compute_weighs_nothing() {
        let s = OccupancySums {
            held_seconds: dec!(60),
            held_compute: dec!(60),
            held_memory: dec!(60),
            memory_used: dec!(30),
            ..Default::default()
        };
        assert_eq!(s.used_equivalent(true, &ShareWeights::default()), None);
        let memory_only = ShareWeights::new(dec!(0), dec!(1)).unwrap();
        assert_eq!(s.used_equivalent(true, &memory_only), Some(dec!(30)));
    }
}
