//! The unit cost report, pure: each hour's cost of a workload's slices (the usage report's rows,
//! priced as invoices are) joined with the units its series counted in the same hour, by namespace
//! and pod (or workload). A pod serving several models in an hour splits the hour's cost by their
//! units. Hours with cost and no units, and units no cost joins (a workload slicemeter never saw),
//! are kept apart, never dropped. Figures stay exact until they are shown: each cost and unit cost
//! is rounded once, half to even, to the currency's minor unit.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use rust_decimal::prelude::FromPrimitive;
use serde::Serialize;
use utoipa::ToSchema;

use super::UnitDefinition;
use super::count::UnitKey;
use crate::billing::rate_card::Currency;
use crate::domain::team::TeamId;

/// What a unit cost is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnitDimension {
    Team,
    Model,
    /// The workload, named with its namespace.
    Workload,
}

/// The dimensions, in the order asked for, each once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnitGroupBy(Vec<UnitDimension>);

impl FromStr for UnitGroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut dims = Vec::new();
        for part in s.split(',') {
            let d = match part.trim() {
                "team" => UnitDimension::Team,
                "model" => UnitDimension::Model,
                "workload" => UnitDimension::Workload,
                other => {
                    return Err(format!(
                        "{other:?} is not a dimension: team, model or workload, comma-separated"
                    ));
                }
            };
            if dims.contains(&d) {
                return Err(format!("{} is named twice", part.trim()));
            }
            dims.push(d);
        }
        Ok(UnitGroupBy(dims))
    }
}

impl UnitGroupBy {
    pub fn names(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|d| match d {
                UnitDimension::Team => "team",
                UnitDimension::Model => "model",
                UnitDimension::Workload => "workload",
            })
            .map(str::to_owned)
            .collect()
    }

    fn key(
        &self,
        team: &Option<TeamId>,
        ns: &Option<String>,
        workload: &Option<String>,
        model: Option<&Option<String>>,
    ) -> Key {
        let mut key = BTreeMap::new();
        for d in &self.0 {
            match d {
                UnitDimension::Team => {
                    key.insert(
                        "team".to_owned(),
                        team.as_ref().map(|t| t.as_str().to_owned()),
                    );
                }
                UnitDimension::Model => {
                    key.insert("model".to_owned(), model.cloned().flatten());
                }
                UnitDimension::Workload => {
                    key.insert("namespace".to_owned(), ns.clone());
                    key.insert("workload".to_owned(), workload.clone());
                }
            }
        }
        key
    }
}

type Key = BTreeMap<String, Option<String>>;

/// One hour's cost of one pod's slices, as the usage report prices it.
#[derive(Debug, Clone, PartialEq)]
pub struct CostRow {
    pub hour: DateTime<Utc>,
    pub team: Option<TeamId>,
    pub namespace: Option<String>,
    pub workload: Option<String>,
    pub pod: Option<String>,
    pub cost: Decimal,
}

/// A group's cost, units and cost per `per_units` units.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UnitCostRow {
    /// The row's value for each dimension (`workload` adds its `namespace`); null where unknown
    /// (a server that labels no model).
    pub key: Key,
    /// What the slices that served these units cost in their hours, in `currency`.
    #[schema(value_type = String, example = "12.40")]
    pub cost: Decimal,
    /// The units counted in the same hours.
    #[schema(value_type = String, example = "30240000")]
    pub units: Decimal,
    /// cost / units x per_units, rounded once, half to even, to the minor unit; null with no units.
    #[schema(value_type = Option<String>, example = "0.41")]
    pub unit_cost: Option<Decimal>,
    /// Hours with both cost and units.
    pub hours: i64,
}

/// Cost in hours whose workload counted no unit: a group's slices held, nothing served.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CostWithoutUnits {
    pub key: Key,
    #[schema(value_type = String, example = "3.20")]
    pub cost: Decimal,
    pub hours: i64,
}

/// Units counted where no slice was held that hour (a workload slicemeter never saw, or hours
/// outside its slices'): by namespace, pod (or workload) and model.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UnitsWithoutCost {
    pub namespace: Option<String>,
    /// The pod's name, or the workload's, as the definition joins.
    pub join: Option<String>,
    pub model: Option<String>,
    #[schema(value_type = String, example = "120000")]
    pub units: Decimal,
    pub hours: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct UnitCostReport {
    /// The unit's name.
    #[schema(example = "generated_tokens")]
    pub unit: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    #[schema(example = json!(["team", "model"]))]
    pub group_by: Vec<String>,
    /// Unit costs are per this many units.
    #[schema(example = 1000000)]
    pub per_units: i64,
    /// `pod` or `workload`: how series join the slices' holders.
    #[schema(example = "pod")]
    pub joined_by: String,
    /// The currency of every cost; null when the hours' rate cards use several.
    #[schema(example = "USD")]
    pub currency: Option<String>,
    /// Why some hours have no cost, if some have none.
    pub cost_note: Option<String>,
    /// Groups whose hours had both cost and units.
    pub rows: Vec<UnitCostRow>,
    /// Every row together.
    pub total: UnitCostRow,
    /// Cost in hours without units, per group (model null), never dropped.
    pub cost_without_units: Vec<CostWithoutUnits>,
    #[schema(value_type = String, example = "3.20")]
    pub cost_without_units_total: Decimal,
    /// Units without cost, never dropped.
    pub units_without_cost: Vec<UnitsWithoutCost>,
    #[schema(value_type = String, example = "120000")]
    pub units_without_cost_total: Decimal,
}

#[derive(Default)]
struct Acc {
    cost: Decimal,
    units: Decimal,
    hours: BTreeSet<DateTime<Utc>>,
}

/// Each hour's costs and units at each place (hour, namespace, pod or workload), joined once for
/// every grouping asked for.
pub struct Joined {
    by_pod: bool,
    /// (hour, namespace, join) → (team, workload) → cost.
    cost_at: BTreeMap<Place, ConsumerCosts>,
    /// (hour, namespace, join) → model → units.
    units_at: BTreeMap<Place, BTreeMap<Option<String>, Decimal>>,
    /// Units at places no cost joins, by key and hour.
    orphans: Vec<(UnitKey, DateTime<Utc>, Decimal)>,
}

type Place = (DateTime<Utc>, Option<String>, Option<String>);
type ConsumerCosts = BTreeMap<(Option<TeamId>, Option<String>), Decimal>;

/// Places costs and units hour by hour (`by_pod`: series join pods, else workloads).
pub fn join(
    by_pod: bool,
    costs: Vec<CostRow>,
    units: &BTreeMap<(DateTime<Utc>, UnitKey), f64>,
) -> Joined {
    let mut cost_at: BTreeMap<Place, ConsumerCosts> = BTreeMap::new();
    for c in costs {
        let join = if by_pod { c.pod } else { c.workload.clone() };
        *cost_at
            .entry((c.hour, c.namespace, join))
            .or_default()
            .entry((c.team, c.workload))
            .or_default() += c.cost;
    }
    let mut units_at: BTreeMap<Place, BTreeMap<Option<String>, Decimal>> = BTreeMap::new();
    let mut orphans = Vec::new();
    for ((hour, k), u) in units {
        let u = Decimal::from_f64(*u).unwrap_or_default();
        let place = (*hour, k.namespace.clone(), k.join.clone());
        if !cost_at.contains_key(&place) {
            if !u.is_zero() {
                orphans.push((k.clone(), *hour, u));
            }
            continue;
        }
        *units_at
            .entry(place)
            .or_default()
            .entry(k.model.clone())
            .or_default() += u;
    }
    Joined {
        by_pod,
        cost_at,
        units_at,
        orphans,
    }
}

/// Joins costs and units hour by hour. `keep_units`: which units without cost the caller may see
/// (a team lead: those of their team's namespaces).
#[allow(clippy::too_many_arguments)]
pub fn build(
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: &UnitGroupBy,
    currency: Option<&Currency>,
    cost_note: Option<String>,
    costs: &[CostRow],
    units: &BTreeMap<(DateTime<Utc>, UnitKey), f64>,
    keep_units: impl Fn(&UnitKey) -> bool,
) -> UnitCostReport {
    join(def.pod_label.is_some(), costs.to_vec(), units)
        .report(def, from, to, group_by, currency, cost_note, keep_units)
}

impl Joined {
    /// The report grouped by `group_by`.
    // long: the rows, the cost without units and the units without cost, each from the one join
    #[allow(clippy::too_many_arguments)]
    pub fn report(
        &self,
        def: &UnitDefinition,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        group_by: &UnitGroupBy,
        currency: Option<&Currency>,
        cost_note: Option<String>,
        keep_units: impl Fn(&UnitKey) -> bool,
    ) -> UnitCostReport {
        let by_pod = self.by_pod;
        let (cost_at, units_at) = (&self.cost_at, &self.units_at);
        let mut rows: BTreeMap<Key, Acc> = BTreeMap::new();
        let mut idle: BTreeMap<Key, Acc> = BTreeMap::new();
        for (place, consumers) in cost_at {
            let counted = units_at
                .get(place)
                .filter(|m| m.values().any(|u| *u > Decimal::ZERO));
            let place_cost: Decimal = consumers.values().sum();
            for ((team, workload), cost) in consumers {
                match counted {
                    Some(models) => {
                        let total_units: Decimal = models.values().sum();
                        // A consumer's part of the place's units (one consumer a pod, nearly always).
                        let part = if place_cost.is_zero() {
                            Decimal::ONE / Decimal::from(consumers.len())
                        } else {
                            *cost / place_cost
                        };
                        for (model, u) in models {
                            let acc = rows
                                .entry(group_by.key(team, &place.1, workload, Some(model)))
                                .or_default();
                            acc.cost += *cost * *u / total_units;
                            acc.units += *u * part;
                            acc.hours.insert(place.0);
                        }
                    }
                    None => {
                        let acc = idle
                            .entry(group_by.key(team, &place.1, workload, None))
                            .or_default();
                        acc.cost += *cost;
                        acc.hours.insert(place.0);
                    }
                }
            }
        }
        let mut orphans: BTreeMap<UnitKey, Acc> = BTreeMap::new();
        for (k, hour, u) in &self.orphans {
            if !keep_units(k) {
                continue;
            }
            let acc = orphans.entry(k.clone()).or_default();
            acc.units += *u;
            acc.hours.insert(*hour);
        }
        let money = |d: Decimal| currency.map_or(d, |c| c.round(d)).normalize();
        let row = |key: Key, acc: &Acc| UnitCostRow {
            key,
            cost: money(acc.cost),
            units: acc.units.normalize(),
            unit_cost: (acc.units > Decimal::ZERO)
                .then(|| money(acc.cost * Decimal::from(def.per_units) / acc.units)),
            hours: acc.hours.len() as i64,
        };
        let mut total = Acc::default();
        for acc in rows.values() {
            total.cost += acc.cost;
            total.units += acc.units;
            total.hours.extend(acc.hours.iter().copied());
        }
        let idle_total: Decimal = idle.values().map(|a| a.cost).sum();
        let orphan_total: Decimal = orphans.values().map(|a| a.units).sum();
        UnitCostReport {
            unit: def.name.clone(),
            from,
            to,
            group_by: group_by.names(),
            per_units: def.per_units,
            joined_by: if by_pod { "pod" } else { "workload" }.into(),
            currency: currency.map(|c| c.code.clone()),
            cost_note,
            rows: rows.iter().map(|(k, a)| row(k.clone(), a)).collect(),
            total: row(BTreeMap::new(), &total),
            cost_without_units: idle
                .iter()
                .map(|(k, a)| CostWithoutUnits {
                    key: k.clone(),
                    cost: money(a.cost),
                    hours: a.hours.len() as i64,
                })
                .collect(),
            cost_without_units_total: money(idle_total),
            units_without_cost: orphans
                .into_iter()
                .map(|(k, a)| UnitsWithoutCost {
                    namespace: k.namespace,
                    join: k.join,
                    model: k.model,
                    units: a.units.normalize(),
                    hours: a.hours.len() as i64,
                })
                .collect(),
            units_without_cost_total: orphan_total.normalize(),
        }
    }
}

/// The report as CSV: one line per row, then the cost without units and the units without cost,
/// each line saying which it is; text cells made safe to open in a spreadsheet.
pub fn to_csv(r: &UnitCostReport) -> Result<Vec<u8>, csv::Error> {
    use crate::domain::text::spreadsheet_safe;
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "section",
        "unit",
        "team",
        "namespace",
        "workload",
        "pod_or_workload",
        "model",
        "currency",
        "cost",
        "units",
        "per_units",
        "unit_cost",
        "hours",
    ])?;
    let t = |v: Option<&Option<String>>| {
        spreadsheet_safe(v.and_then(|v| v.as_deref()).unwrap_or_default()).into_owned()
    };
    let cur = r.currency.clone().unwrap_or_default();
    let per = r.per_units.to_string();
    let unit = spreadsheet_safe(&r.unit).into_owned();
    for row in &r.rows {
        w.write_record([
            "unit_cost".to_owned(),
            unit.clone(),
            t(row.key.get("team")),
            t(row.key.get("namespace")),
            t(row.key.get("workload")),
            String::new(),
            t(row.key.get("model")),
            cur.clone(),
            row.cost.to_string(),
            row.units.to_string(),
            per.clone(),
            row.unit_cost.map(|u| u.to_string()).unwrap_or_default(),
            row.hours.to_string(),
        ])?;
    }
    for row in &r.cost_without_units {
        w.write_record([
            "cost_without_units".to_owned(),
            unit.clone(),
            t(row.key.get("team")),
            t(row.key.get("namespace")),
            t(row.key.get("workload")),
            String::new(),
            String::new(),
            cur.clone(),
            row.cost.to_string(),
            "0".into(),
            per.clone(),
            String::new(),
            row.hours.to_string(),
        ])?;
    }
    for row in &r.units_without_cost {
        w.write_record([
            "units_without_cost".to_owned(),
            unit.clone(),
            String::new(),
            t(Some(&row.namespace)),
            String::new(),
            t(Some(&row.join)),
            t(Some(&row.model)),
            cur.clone(),
            String::new(),
            row.units.to_string(),
            per.clone(),
            String::new(),
            row.hours.to_string(),
        ])?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: u32) -> DateTime<Utc> {
        format!("2026-10-02T{h:02}:00:00Z").parse().unwrap()
    }

    fn cost(h: u32, pod: &str, c: &str) -> CostRow {
        CostRow {
            hour: at(h),
            team: Some(TeamId::parse("nlp").unwrap()),
            namespace: Some("ns".into()),
            workload: Some("chat".into()),
            pod: Some(pod.into()),
            cost: c.parse().unwrap(),
        }
    }

    fn key(pod: &str, model: &str) -> UnitKey {
        UnitKey {
            namespace: Some("ns".into()),
            join: Some(pod.into()),
            model: Some(model.into()),
        }
    }

    #[test]
    fn a_pod_serving_two_models_splits_its_hour_by_their_units_and_the_rest_is_kept_apart() {
        let def = super::super::presets().remove(0);
        let costs = [cost(0, "p", "3.00"), cost(1, "p", "3.00")];
        let units = BTreeMap::from([
            ((at(0), key("p", "a")), 1_000_000.0),
            ((at(0), key("p", "b")), 2_000_000.0),
            // Hour 1 counted nothing; hour 2 counted where no slice was held.
            ((at(2), key("p", "a")), 500.0),
        ]);
        let usd = Currency::parse("USD").unwrap();
        let r = build(
            &def,
            at(0),
            at(3),
            &"model".parse().unwrap(),
            Some(&usd),
            None,
            &costs,
            &units,
            |_| true,
        );
        let figures: Vec<(Option<String>, String, String, Option<String>)> = r
            .rows
            .iter()
            .map(|r| {
                (
                    r.key["model"].clone(),
                    r.cost.to_string(),
                    r.units.to_string(),
                    r.unit_cost.map(|u| u.to_string()),
                )
            })
            .collect();
        // a: 1.00 for 1M tokens; b: 2.00 for 2M tokens: both 1.00 per million.
        assert_eq!(
            figures,
            vec![
                (
                    Some("a".into()),
                    "1".into(),
                    "1000000".into(),
                    Some("1".into())
                ),
                (
                    Some("b".into()),
                    "2".into(),
                    "2000000".into(),
                    Some("1".into())
                ),
            ]
        );
        assert_eq!(r.cost_without_units_total.to_string(), "3");
        assert_eq!(r.units_without_cost_total.to_string(), "500");
        assert_eq!(r.units_without_cost[0].join.as_deref(), Some("p"));
    }
}
