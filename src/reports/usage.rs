//! The usage report: slice-hours held, GPU-equivalent hours (held hours x physical share), memory and
//! compute used, and efficiency, grouped by team, GPU model, kind, profile or node, per hour, day or
//! month.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::slice::ShareWeights;
use crate::domain::usage::OccupancySums;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    Team,
    GpuModel,
    Kind,
    Profile,
    Node,
}

impl GroupBy {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Team => "team",
            GroupBy::GpuModel => "gpu_model",
            GroupBy::Kind => "kind",
            GroupBy::Profile => "profile",
            GroupBy::Node => "node",
        }
    }
}

impl FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            GroupBy::Team,
            GroupBy::GpuModel,
            GroupBy::Kind,
            GroupBy::Profile,
            GroupBy::Node,
        ]
        .into_iter()
        .find(|g| g.as_str() == s)
        .ok_or_else(|| format!("group_by {s:?} is not one of team, gpu_model, kind, profile, node"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Hour,
    Day,
    Month,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Hour => "hour",
            Step::Day => "day",
            Step::Month => "month",
        }
    }
}

impl FromStr for Step {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hour" => Ok(Step::Hour),
            "day" => Ok(Step::Day),
            "month" => Ok(Step::Month),
            _ => Err(format!("step {s:?} is not one of hour, day, month")),
        }
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Rollup sums of one (bucket, key, reserved) group.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageSums {
    pub bucket: DateTime<Utc>,
    pub key: String,
    /// Reserved kinds pay their share for every held second; time-sliced replicas their measured one.
    pub reserved: bool,
    pub sums: OccupancySums,
}

/// What a group held and used, in hours.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct UsageFigures {
    /// Hours someone held a slice, whatever its size.
    #[schema(value_type = String, example = "720")]
    pub slice_hours: Decimal,
    /// Held hours times the slice's physical share: what was blocked, in whole GPUs.
    #[schema(value_type = String, example = "334.285714")]
    pub gpu_equivalent_hours: Decimal,
    /// The part of `gpu_equivalent_hours` that was busy; null when compute activity is unknown.
    #[schema(value_type = Option<String>, example = "120.5")]
    pub used_gpu_equivalent_hours: Option<Decimal>,
    /// Memory used, integrated over time.
    #[schema(value_type = String, example = "14220.5")]
    pub memory_gib_hours: Decimal,
    /// Hours of SM activity, relative to each slice.
    #[schema(value_type = String, example = "88.25")]
    pub compute_active_hours: Decimal,
    /// Held hours whose compute activity the GPU could not measure.
    #[schema(value_type = String, example = "0")]
    pub compute_unknown_hours: Decimal,
    /// Used over held GPU-equivalent hours, 0 to 1; null when compute activity is unknown.
    #[schema(value_type = Option<String>, example = "0.3605")]
    pub efficiency: Option<Decimal>,
    /// Occupancy windows behind these figures.
    pub windows: i64,
}

/// Exact accumulator behind [`UsageFigures`]: rounding happens once, when it is presented.
#[derive(Debug, Clone, Default)]
struct Acc {
    held: Decimal,
    held_eq: Decimal,
    used_eq: Decimal,
    used_unknown: bool,
    memory_gib_seconds: Decimal,
    active: Decimal,
    unknown: Decimal,
    windows: i64,
}

impl Acc {
    fn add_sums(&mut self, s: &UsageSums, w: &ShareWeights) {
        let o = &s.sums;
        self.held += o.held_seconds;
        self.memory_gib_seconds += o.memory_gib_seconds;
        self.active += o.active_seconds;
        self.unknown += o.held_seconds - o.known_seconds;
        self.windows += o.windows;
        self.held_eq += o.held_equivalent(s.reserved, w);
        match o.used_equivalent(s.reserved, w) {
            Some(used) => self.used_eq += used,
            None => self.used_unknown = true,
        }
    }

    fn add(&mut self, o: &Acc) {
        self.held += o.held;
        self.held_eq += o.held_eq;
        self.used_eq += o.used_eq;
        self.used_unknown |= o.used_unknown;
        self.memory_gib_seconds += o.memory_gib_seconds;
        self.active += o.active;
        self.unknown += o.unknown;
        self.windows += o.windows;
    }

    fn figures(&self) -> UsageFigures {
        let hours = |s: Decimal| (s / Decimal::from(3600)).round_dp(6).normalize();
        let used = (!self.used_unknown).then_some(self.used_eq);
        UsageFigures {
            slice_hours: hours(self.held),
            gpu_equivalent_hours: hours(self.held_eq),
            used_gpu_equivalent_hours: used.map(hours),
            memory_gib_hours: hours(self.memory_gib_seconds),
            compute_active_hours: hours(self.active),
            compute_unknown_hours: hours(self.unknown),
            efficiency: used.and_then(|u| {
                (self.held_eq > Decimal::ZERO).then(|| (u / self.held_eq).round_dp(4).normalize())
            }),
            windows: self.windows,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UsageRow {
    /// Start of the hour, day or month (UTC).
    pub bucket: DateTime<Utc>,
    /// The team, GPU model, kind, profile or node.
    pub key: String,
    #[serde(flatten)]
    pub figures: UsageFigures,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UsageTotal {
    pub key: String,
    #[serde(flatten)]
    pub figures: UsageFigures,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UsageReport {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub group_by: GroupBy,
    pub step: Step,
    /// The weights of DESIGN.md's share formula used for GPU-equivalent hours.
    pub weights: ShareWeights,
    /// One row per bucket and key, ordered by bucket then key.
    pub rows: Vec<UsageRow>,
    /// One row per key over the whole range.
    pub totals: Vec<UsageTotal>,
    /// Everything in the range.
    pub total: UsageFigures,
}

/// Builds the report from the rollup sums (ordered by bucket, key).
pub fn build(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: GroupBy,
    step: Step,
    weights: ShareWeights,
    sums: &[UsageSums],
) -> UsageReport {
    let mut rows: BTreeMap<(DateTime<Utc>, &str), Acc> = BTreeMap::new();
    for s in sums {
        rows.entry((s.bucket, s.key.as_str()))
            .or_default()
            .add_sums(s, &weights);
    }
    let mut totals: BTreeMap<&str, Acc> = BTreeMap::new();
    let mut total = Acc::default();
    for ((_, key), acc) in &rows {
        totals.entry(key).or_default().add(acc);
        total.add(acc);
    }
    UsageReport {
        from,
        to,
        group_by,
        step,
        weights,
        rows: rows
            .iter()
            .map(|((bucket, key), acc)| UsageRow {
                bucket: *bucket,
                key: (*key).to_owned(),
                figures: acc.figures(),
            })
            .collect(),
        totals: totals
            .iter()
            .map(|(key, acc)| UsageTotal {
                key: (*key).to_owned(),
                figures: acc.figures(),
            })
            .collect(),
        total: total.figures(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    fn sums(
        reserved: bool,
        held: Decimal,
        compute_share: Decimal,
        memory_share: Decimal,
    ) -> UsageSums {
        UsageSums {
            bucket: "2026-10-01T00:00:00Z".parse().unwrap(),
            key: "nlp".into(),
            reserved,
            sums: OccupancySums {
                held_seconds: held,
                held_compute: held * compute_share,
                held_memory: held * memory_share,
                known_seconds: held,
                known_compute: held * compute_share,
                active_seconds: held / dec!(4),
                active_compute: held / dec!(4) * compute_share,
                memory_gib_seconds: dec!(0),
                memory_used: held / dec!(2) * memory_share,
                windows: 1,
            },
        }
    }

    #[test]
    fn a_3g_40gb_held_for_an_hour_is_0_46_gpu_hours_and_its_efficiency_weighs_compute_and_memory() {
        let s = sums(true, dec!(3600), dec!(3) / dec!(7), dec!(0.5));
        let r = build(
            s.bucket,
            s.bucket,
            GroupBy::Team,
            Step::Hour,
            ShareWeights::default(),
            &[s],
        );
        let f = &r.total;
        assert_eq!(f.slice_hours, dec!(1));
        assert_eq!(f.gpu_equivalent_hours, dec!(0.464286));
        // 25 % busy on 3/7 of compute, half of its memory used: (0.5*3/7*0.25 + 0.5*0.5*0.5) / 0.4642857
        assert_eq!(f.efficiency, Some(dec!(0.3846)));
    }

    #[test]
    fn unknown_compute_makes_efficiency_unknown_not_zero() {
        let mut s = sums(true, dec!(3600), dec!(1), dec!(1));
        s.sums.known_seconds = dec!(0);
        s.sums.known_compute = dec!(0);
        s.sums.active_seconds = dec!(0);
        s.sums.active_compute = dec!(0);
        let r = build(
            s.bucket,
            s.bucket,
            GroupBy::Team,
            Step::Hour,
            ShareWeights::default(),
            &[s],
        );
        assert_eq!(r.total.efficiency, None);
        assert_eq!(r.total.used_gpu_equivalent_hours, None);
        assert_eq!(r.total.compute_unknown_hours, dec!(1));
        assert_eq!(r.total.gpu_equivalent_hours, dec!(1));
    }

    #[test]
    fn a_timeslice_replica_blocks_what_it_measurably_used() {
        // A quarter busy and half the GPU's memory: 0.5*0.25 + 0.5*0.5 = 0.375 GPU-hours.
        let s = sums(false, dec!(3600), dec!(1), dec!(1));
        let r = build(
            s.bucket,
            s.bucket,
            GroupBy::Team,
            Step::Hour,
            ShareWeights::default(),
            &[s],
        );
        assert_eq!(r.total.gpu_equivalent_hours, dec!(0.375));
        assert_eq!(r.total.efficiency, Some(dec!(1)));
    }

    #[test]
    fn group_by_and_step_name_their_choices_when_wrong() {
        assert!("team".parse::<GroupBy>().is_ok());
        assert!(
            "cluster"
                .parse::<GroupBy>()
                .unwrap_err()
                .contains("team, gpu_model, kind, profile, node")
        );
        assert!(
            "week"
                .parse::<Step>()
                .unwrap_err()
                .contains("hour, day, month")
        );
    }
}
