//! Sums of occupancy and the share formula applied to them. DESIGN.md's share is linear in a slice's
//! compute and memory shares, so sums of `held_seconds x share` over any set of rollup rows are all
//! reports and pricing need; the weights are applied last, here and nowhere else.

use rust_decimal::Decimal;

use super::slice::ShareWeights;

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
    pub active_seconds: Decimal,
    pub active_compute: Decimal,
    pub memory_gib_seconds: Decimal,
    /// Memory byte-seconds over each slice's reserved bytes, times its memory share.
    pub memory_used: Decimal,
    pub windows: i64,
}

impl OccupancySums {
    pub fn add(&mut self, o: &OccupancySums) {
        self.held_seconds += o.held_seconds;
        self.held_compute += o.held_compute;
        self.held_memory += o.held_memory;
        self.known_seconds += o.known_seconds;
        self.known_compute += o.known_compute;
        self.active_seconds += o.active_seconds;
        self.active_compute += o.active_compute;
        self.memory_gib_seconds += o.memory_gib_seconds;
        self.memory_used += o.memory_used;
        self.windows += o.windows;
    }

    /// GPU-equivalent seconds blocked: reserved kinds block `share x held` whether busy or not; a
    /// time-sliced replica reserves nothing and blocks what it measurably used.
    pub fn held_equivalent(&self, reserved: bool, w: &ShareWeights) -> Decimal {
        if reserved {
            w.compute * self.held_compute + w.memory * self.held_memory
        } else {
            w.compute * self.active_compute + w.memory * self.memory_used
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
        Some(w.compute * compute + w.memory * self.memory_used)
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
