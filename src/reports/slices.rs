//! Per-slice usage, the one read model of what a slice held on a day: the FOCUS export writes a row
//! per slice-day from it, and the dashboard's team page sums a team's slice-days per slice. Both
//! price it with `billing::pricing::price` under the rate card in force, so neither has a pricing
//! path of its own.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

use crate::billing::period::BillingError;
use crate::billing::pricing::{Charge, UsageAggregate, price};
use crate::billing::rate_card::RateCard;
use crate::domain::dcgm::Device;
use crate::domain::slice::{PhysicalShare, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::usage::{ExactSums, OccupancySums, SliceSeconds};

/// One slice's occupancy on one day, for one team, under one rate card version (`None`: no version
/// was in force).
#[derive(Debug, Clone)]
pub struct SliceDay {
    pub team: TeamId,
    pub team_name: String,
    pub cost_center: Option<String>,
    pub model: String,
    pub kind: SliceKind,
    pub profile: Option<String>,
    pub rate_card: Option<i64>,
    pub slice_uuid: String,
    pub node: String,
    pub day: DateTime<Utc>,
    pub windows: i64,
    pub held_seconds: Decimal,
    pub known_seconds: Decimal,
    pub compute_active_seconds: Decimal,
    pub memory_byte_seconds: Decimal,
    pub compute_share: Decimal,
    pub memory_share: Decimal,
    pub memory_reserved_bytes: i64,
    /// The slice's GPU and MIG GPU instance id, as dcgm-exporter labels them (`UUID`, `GPU_I_ID`).
    pub gpu_uuid: Option<String>,
    pub gpu_instance_id: Option<i16>,
}

/// Why a slice-day cannot be priced.
#[derive(Debug, thiserror::Error)]
pub enum Unpriced {
    #[error(transparent)]
    Billing(#[from] BillingError),
    #[error("rate card version {0} is not published")]
    UnknownRateCard(i64),
}

impl SliceDay {
    /// The slice as dcgm-exporter labels it.
    pub fn device(&self) -> Device<'_> {
        Device {
            gpu_uuid: self.gpu_uuid.as_deref(),
            node: Some(&self.node),
            model: &self.model,
            kind: self.kind,
            profile: self.profile.as_deref(),
            gpu_instance_id: self.gpu_instance_id,
        }
    }

    pub fn share(&self) -> PhysicalShare {
        PhysicalShare {
            kind: self.kind,
            compute: self.compute_share,
            memory: self.memory_share,
            memory_reserved_bytes: u64::try_from(self.memory_reserved_bytes).unwrap_or(0),
        }
    }

    fn seconds(&self) -> SliceSeconds {
        SliceSeconds {
            held_seconds: self.held_seconds,
            known_seconds: self.known_seconds,
            compute_active_seconds: self.compute_active_seconds,
            memory_byte_seconds: self.memory_byte_seconds,
            windows: self.windows,
        }
    }

    /// Its sums, its shares applied.
    pub fn sums(&self) -> OccupancySums {
        OccupancySums::of_slice(&self.seconds(), &self.share())
    }

    /// Whether `other` is more of the same slice's day, for the same team under the same rate card
    /// version (another consumer of the team, as the books keep it).
    pub fn same_day(&self, other: &SliceDay) -> bool {
        self.slice_uuid == other.slice_uuid
            && self.day == other.day
            && self.team == other.team
            && self.rate_card == other.rate_card
    }

    /// Adds `other`'s figures, more of the same day ([`SliceDay::same_day`]), to its own.
    pub fn add(&mut self, other: &SliceDay) {
        self.windows += other.windows;
        self.held_seconds += other.held_seconds;
        self.known_seconds += other.known_seconds;
        self.compute_active_seconds += other.compute_active_seconds;
        self.memory_byte_seconds += other.memory_byte_seconds;
    }

    /// The rate card it is priced under: an error, as for the whole period, where none was in force.
    pub fn card<'c>(&self, cards: &'c BTreeMap<i64, RateCard>) -> Result<&'c RateCard, Unpriced> {
        let id = self
            .rate_card
            .ok_or_else(|| BillingError::NoRateCard(self.day.to_rfc3339()))?;
        cards.get(&id).ok_or(Unpriced::UnknownRateCard(id))
    }

    /// What it costs under the rate card in force.
    pub fn charge(&self, cards: &BTreeMap<i64, RateCard>) -> Result<Charge, Unpriced> {
        let card = self.card(cards)?;
        Ok(price(
            &UsageAggregate {
                team: self.team.clone(),
                model: self.model.clone(),
                kind: self.kind,
                profile: self.profile.clone(),
                rate_card: card.id,
                slices: 1,
                sums: self.sums(),
                exact: ExactSums::of_slice(&self.seconds(), &self.share()),
            },
            card,
        ))
    }
}
