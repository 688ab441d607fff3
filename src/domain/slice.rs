//! Slices of a GPU and the physical share of the card each one blocks (DESIGN.md, Pricing).

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How a slice shares its GPU, from the strongest isolation to none.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SliceKind {
    /// A MIG GPU instance: its own SMs, memory, bandwidth and L2.
    Mig,
    /// An MPS client with an active-thread percentage and a pinned-memory limit.
    Mps,
    /// A time-sliced replica: no reservation, it pays for what it measurably used.
    Timeslice,
    /// A fixed fraction of a GPU handed out by a vGPU profile.
    Vgpu,
    /// The whole GPU.
    Whole,
}

impl SliceKind {
    pub const ALL: [SliceKind; 5] = [
        SliceKind::Mig,
        SliceKind::Mps,
        SliceKind::Timeslice,
        SliceKind::Vgpu,
        SliceKind::Whole,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SliceKind::Mig => "mig",
            SliceKind::Mps => "mps",
            SliceKind::Timeslice => "timeslice",
            SliceKind::Vgpu => "vgpu",
            SliceKind::Whole => "whole",
        }
    }

    /// Reserved kinds block their share for every held second, busy or idle.
    pub fn is_reserved(self) -> bool {
        !matches!(self, SliceKind::Timeslice)
    }
}

impl fmt::Display for SliceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown slice kind {0:?}: expected one of mig, mps, timeslice, vgpu, whole")]
pub struct UnknownSliceKind(pub String);

impl FromStr for SliceKind {
    type Err = UnknownSliceKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SliceKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownSliceKind(s.to_owned()))
    }
}

/// The physical geometry of a GPU that slices are measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuGeometry {
    pub memory_bytes: u64,
    pub compute_slices: u8,
    pub memory_slices: u8,
}

/// What a slice reserves of its GPU, by kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Reservation {
    Mig {
        profile: String,
        profile_id: Option<u32>,
        compute_slices: u8,
        memory_slices: u8,
        memory_bytes: u64,
    },
    Mps {
        active_thread_percentage: u8,
        pinned_memory_bytes: u64,
    },
    Timeslice {
        replicas: u16,
        replica: u16,
    },
    Vgpu {
        fraction: Decimal,
    },
    Whole,
}

impl Reservation {
    pub fn kind(&self) -> SliceKind {
        match self {
            Reservation::Mig { .. } => SliceKind::Mig,
            Reservation::Mps { .. } => SliceKind::Mps,
            Reservation::Timeslice { .. } => SliceKind::Timeslice,
            Reservation::Vgpu { .. } => SliceKind::Vgpu,
            Reservation::Whole => SliceKind::Whole,
        }
    }

    /// The slice's fractions of its GPU. For reserved kinds they are what the slice blocks; for a
    /// time-sliced replica they are 1, because its measurements are already relative to the whole GPU.
    pub fn physical_share(&self, gpu: &GpuGeometry) -> PhysicalShare {
        let gpu_memory = Decimal::from(gpu.memory_bytes);
        match self {
            Reservation::Mig {
                compute_slices,
                memory_slices,
                memory_bytes,
                ..
            } => PhysicalShare {
                kind: SliceKind::Mig,
                compute: Decimal::from(*compute_slices) / Decimal::from(gpu.compute_slices),
                memory: Decimal::from(*memory_slices) / Decimal::from(gpu.memory_slices),
                memory_reserved_bytes: *memory_bytes,
            },
            Reservation::Mps {
                active_thread_percentage,
                pinned_memory_bytes,
            } => PhysicalShare {
                kind: SliceKind::Mps,
                compute: Decimal::from(*active_thread_percentage) / Decimal::ONE_HUNDRED,
                memory: Decimal::from(*pinned_memory_bytes) / gpu_memory,
                memory_reserved_bytes: *pinned_memory_bytes,
            },
            Reservation::Vgpu { fraction } => PhysicalShare {
                kind: SliceKind::Vgpu,
                compute: *fraction,
                memory: *fraction,
                memory_reserved_bytes: (gpu_memory * fraction)
                    .floor()
                    .try_into()
                    .unwrap_or(gpu.memory_bytes),
            },
            Reservation::Timeslice { .. } => PhysicalShare {
                kind: SliceKind::Timeslice,
                compute: Decimal::ONE,
                memory: Decimal::ONE,
                memory_reserved_bytes: gpu.memory_bytes,
            },
            Reservation::Whole => PhysicalShare {
                kind: SliceKind::Whole,
                compute: Decimal::ONE,
                memory: Decimal::ONE,
                memory_reserved_bytes: gpu.memory_bytes,
            },
        }
    }
}

/// A slice's compute and memory fractions of its GPU (DESIGN.md: `compute_share`, `memory_share`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhysicalShare {
    pub kind: SliceKind,
    pub compute: Decimal,
    pub memory: Decimal,
    /// The memory the slice's memory measurements are relative to.
    pub memory_reserved_bytes: u64,
}

/// How much compute and memory count in a share; they sum to one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ShareWeights {
    #[schema(value_type = String, example = "0.5")]
    pub compute: Decimal,
    #[schema(value_type = String, example = "0.5")]
    pub memory: Decimal,
}

impl Default for ShareWeights {
    fn default() -> Self {
        let half = Decimal::new(5, 1);
        ShareWeights {
            compute: half,
            memory: half,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WeightsError {
    #[error("share weights must not be negative")]
    Negative,
    #[error("share weights must sum to 1, they sum to {0}")]
    NotUnitSum(Decimal),
}

impl ShareWeights {
    pub fn new(compute: Decimal, memory: Decimal) -> Result<Self, WeightsError> {
        if compute.is_sign_negative() || memory.is_sign_negative() {
            return Err(WeightsError::Negative);
        }
        if compute + memory != Decimal::ONE {
            return Err(WeightsError::NotUnitSum(compute + memory));
        }
        Ok(ShareWeights { compute, memory })
    }

    /// `w_compute * compute + w_memory * memory`: the one place the weights are applied, whether to a
    /// slice's shares (its physical share) or to share-weighted sums of seconds (GPU-equivalent
    /// seconds, `usage::OccupancySums`). Pricing, reports, FOCUS and the dashboard all come here.
    pub fn weigh(&self, compute: Decimal, memory: Decimal) -> Decimal {
        self.compute * compute + self.memory * memory
    }

    /// `share(s) = w_compute * compute_share + w_memory * memory_share` for a reserved slice.
    pub fn reserved_share(&self, share: &PhysicalShare) -> Decimal {
        self.weigh(share.compute, share.memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    const H100: GpuGeometry = GpuGeometry {
        memory_bytes: 85_520_809_984,
        compute_slices: 7,
        memory_slices: 8,
    };

    fn mig(compute: u8, memory: u8) -> Reservation {
        Reservation::Mig {
            profile: format!("{compute}g"),
            profile_id: None,
            compute_slices: compute,
            memory_slices: memory,
            memory_bytes: 1,
        }
    }

    #[test]
    fn a_3g_40gb_instance_blocks_three_sevenths_of_compute_and_half_of_memory() {
        let share = mig(3, 4).physical_share(&H100);
        assert_eq!(share.compute, dec!(3) / dec!(7));
        assert_eq!(share.memory, dec!(0.5));
        let s = ShareWeights::default().reserved_share(&share);
        assert_eq!(s.round_dp(7), dec!(0.4642857));
    }

    #[test]
    fn a_1g_10gb_instance_share_matches_the_worked_example() {
        let s = ShareWeights::default().reserved_share(&mig(1, 1).physical_share(&H100));
        assert_eq!(s.round_dp(7), dec!(0.1339286));
    }

    #[test]
    fn mps_share_is_thread_percentage_and_pinned_memory() {
        let r = Reservation::Mps {
            active_thread_percentage: 25,
            pinned_memory_bytes: 20 * (1 << 30),
        };
        let share = r.physical_share(&H100);
        assert_eq!(share.compute, dec!(0.25));
        assert_eq!(
            share.memory,
            Decimal::from(20u64 << 30) / Decimal::from(H100.memory_bytes)
        );
        assert_eq!(share.memory_reserved_bytes, 20 << 30);
    }

    #[test]
    fn a_whole_gpu_and_a_timeslice_replica_are_measured_against_the_whole_card() {
        for r in [
            Reservation::Whole,
            Reservation::Timeslice {
                replicas: 4,
                replica: 0,
            },
        ] {
            let share = r.physical_share(&H100);
            assert_eq!((share.compute, share.memory), (Decimal::ONE, Decimal::ONE));
            assert_eq!(share.memory_reserved_bytes, H100.memory_bytes);
        }
        assert!(!SliceKind::Timeslice.is_reserved());
        assert!(SliceKind::Whole.is_reserved());
    }

    #[test]
    fn a_vgpu_fraction_blocks_that_fraction_of_both() {
        let share = Reservation::Vgpu {
            fraction: dec!(0.25),
        }
        .physical_share(&H100);
        assert_eq!((share.compute, share.memory), (dec!(0.25), dec!(0.25)));
        assert_eq!(share.memory_reserved_bytes, H100.memory_bytes / 4);
    }

    #[test]
    fn weights_that_do_not_sum_to_one_are_refused() {
        assert_eq!(
            ShareWeights::new(dec!(0.6), dec!(0.6)),
            Err(WeightsError::NotUnitSum(dec!(1.2)))
        );
        assert_eq!(
            ShareWeights::new(dec!(-0.5), dec!(1.5)),
            Err(WeightsError::Negative)
        );
        assert!(ShareWeights::new(dec!(0.7), dec!(0.3)).is_ok());
    }

    #[test]
    fn slice_kinds_parse_and_unknown_ones_are_named() {
        assert_eq!("mig".parse::<SliceKind>().unwrap(), SliceKind::Mig);
        let err = "sriov".parse::<SliceKind>().unwrap_err();
        assert!(err.to_string().contains("\"sriov\""), "{err}");
    }
}
