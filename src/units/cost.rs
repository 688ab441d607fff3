//! The unit cost report, pure: each hour's cost of a workload's slices (the usage report's rows,
//! priced as invoices are) joined with the units its series counted in the same hour, by namespace
//! and pod (or workload). A pod serving several models in an hour splits the hour's cost by their
//! units. Hours with cost and no units, and units no cost joins (a workload slicemeter never saw),
//! are kept apart, never dropped. Figures stay exact until they are shown: each cost and unit cost
//! is rounded once, half to even, to the currency's minor unit.
//! The file stays whole: the join, the report it groups and the CSV written of it read the same
//! places, groups and rows.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
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
use crate::reports::parallel;
use crate::reports::pod_hours::Place;
use crate::reports::usage::PodHourCost;

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
        team: Option<&TeamId>,
        ns: &Option<String>,
        workload: &Option<String>,
        model: Option<&Option<String>>,
    ) -> Key {
        let mut key = BTreeMap::new();
        for d in &self.0 {
            match d {
                UnitDimension::Team => {
                    key.insert("team".to_owned(), team.map(|t| t.as_str().to_owned()));
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

/// A group's figures, its contributions coming hour by hour.
#[derive(Default)]
struct Acc {
    cost: Decimal,
    units: Decimal,
    hours: Hours,
}

/// Distinct hours, counted as they come in order.
#[derive(Default)]
struct Hours {
    count: i64,
    last: Option<DateTime<Utc>>,
}

impl Hours {
    fn add(&mut self, hour: DateTime<Utc>) {
        if self.last != Some(hour) {
            debug_assert!(self.last < Some(hour), "hours come in order");
            self.count += 1;
            self.last = Some(hour);
        }
    }
}

/// A group by indices: team, workload (`Joined::workloads`), model (`Joined::models`); [`NONE`]
/// where the grouping leaves a dimension out.
type GroupKey = (u32, u32, u32);
const NONE: u32 = u32::MAX;
/// The names of a dimension the grouping leaves out.
static NO_NAME: Option<String> = None;

/// A consumer's cost at a place and hour: its team, its place (naming its namespace and workload)
/// and its workload's index.
struct Consumer {
    team: u32,
    workload: u32,
    cost: Decimal,
}

/// Each hour's costs and units at each place (hour, namespace, pod or workload), joined once for
/// every grouping asked for; teams, places, workloads and models named once, by index.
pub struct Joined<'a> {
    by_pod: bool,
    teams: &'a [TeamId],
    /// (namespace, workload), in their order.
    workloads: Vec<(&'a Option<String>, &'a Option<String>)>,
    models: Vec<&'a Option<String>>,
    /// The (hour, namespace, join) places with cost, in that order, each with its consumers (a
    /// range of `consumers`, in (team, workload) order) and its units (a range of `units`).
    cost_at: Vec<CostPlace>,
    consumers: Vec<Consumer>,
    /// (model, units) at each place, in the model's order.
    units: Vec<(u32, Decimal)>,
    /// Units at places no cost joins, by key and hour.
    orphans: Vec<(&'a UnitKey, DateTime<Utc>, Decimal)>,
}

struct CostPlace {
    hour: DateTime<Utc>,
    join: u32,
    consumers: Range<usize>,
    units: Range<usize>,
}

/// Places costs and units hour by hour (`by_pod`: series join pods, else workloads): `costs` by the
/// hour, team and place (`PodHourCost`, indices into `teams` and `places`).
pub fn join<'a>(
    by_pod: bool,
    teams: &'a [TeamId],
    places: &'a [Place],
    costs: &[PodHourCost],
    units: &'a BTreeMap<(DateTime<Utc>, UnitKey), f64>,
) -> Joined<'a> {
    // Each place's join (namespace, pod or workload) and workload (namespace, workload), ranked in
    // their order.
    let join_name = |p: &'a Place| (&p.namespace, if by_pod { &p.pod } else { &p.workload });
    let (joins, join_of) = ranked(places.iter().map(join_name));
    let (workloads, workload_of) = ranked(places.iter().map(|p| (&p.namespace, &p.workload)));
    // Each place's consumers in (team, workload) order (a consumer's costs, in the minor unit,
    // add up exactly in any order), sorted on every core.
    let mut entries: Vec<(DateTime<Utc>, u32, u32, u32, Decimal)> = costs
        .iter()
        .map(|c| {
            let p = c.place as usize;
            let cost = c.cost.unwrap_or_default();
            (c.hour, join_of[p], c.team, workload_of[p], cost)
        })
        .collect();
    parallel::sort(&mut entries, parallel::threads());
    let mut cost_at: Vec<CostPlace> = Vec::new();
    let mut consumers: Vec<Consumer> = Vec::new();
    for (hour, join, team, workload, cost) in entries {
        match cost_at.last_mut() {
            Some(p) if (p.hour, p.join) == (hour, join) => {
                match consumers.last_mut() {
                    Some(c) if (c.team, c.workload) == (team, workload) => c.cost += cost,
                    _ => consumers.push(Consumer {
                        team,
                        workload,
                        cost,
                    }),
                }
                p.consumers.end = consumers.len();
            }
            _ => {
                consumers.push(Consumer {
                    team,
                    workload,
                    cost,
                });
                let n = consumers.len();
                cost_at.push(CostPlace {
                    hour,
                    join,
                    consumers: n - 1..n,
                    units: 0..0,
                });
            }
        }
    }
    // The units, in (hour, namespace, join, model) order: the places' order, each place's models
    // in theirs.
    let join_index: HashMap<(Option<&str>, Option<&str>), u32> = joins
        .iter()
        .enumerate()
        .map(|(i, (ns, j))| ((ns.as_deref(), j.as_deref()), i as u32))
        .collect();
    let mut models: Vec<&'a Option<String>> = Vec::new();
    let mut model_index: HashMap<&'a Option<String>, u32> = HashMap::new();
    let mut at_units: Vec<(u32, Decimal)> = Vec::new();
    let mut orphans = Vec::new();
    let mut at = 0;
    for ((hour, k), u) in units {
        let u = Decimal::from_f64(*u).unwrap_or_default();
        let place = join_index
            .get(&(k.namespace.as_deref(), k.join.as_deref()))
            .and_then(|&join| {
                while cost_at
                    .get(at)
                    .is_some_and(|p| (p.hour, p.join) < (*hour, join))
                {
                    at += 1;
                }
                cost_at
                    .get(at)
                    .is_some_and(|p| (p.hour, p.join) == (*hour, join))
                    .then_some(at)
            });
        let Some(place) = place else {
            if !u.is_zero() {
                orphans.push((k, *hour, u));
            }
            continue;
        };
        let model = *model_index.entry(&k.model).or_insert_with(|| {
            models.push(&k.model);
            (models.len() - 1) as u32
        });
        at_units.push((model, u));
        let p = &mut cost_at[place];
        if p.units.is_empty() {
            p.units = at_units.len() - 1..at_units.len();
        } else {
            p.units.end = at_units.len();
        }
    }
    Joined {
        by_pod,
        teams,
        workloads,
        models,
        cost_at,
        consumers,
        units: at_units,
        orphans,
    }
}

/// The distinct values in their order, and each value's rank among them.
fn ranked<T: Ord + Copy>(values: impl Iterator<Item = T> + Clone) -> (Vec<T>, Vec<u32>) {
    let mut distinct: Vec<T> = values.clone().collect();
    distinct.sort_unstable();
    distinct.dedup();
    let ranks = values
        .map(|v| {
            distinct
                .binary_search(&v)
                .expect("every value is among the distinct ones") as u32
        })
        .collect();
    (distinct, ranks)
}

impl Joined<'_> {
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
        let has = |d| group_by.0.contains(&d);
        let (team_in, workload_in, model_in) = (
            has(UnitDimension::Team),
            has(UnitDimension::Workload),
            has(UnitDimension::Model),
        );
        let group = |c: &Consumer, model: u32| -> GroupKey {
            (
                if team_in { c.team } else { NONE },
                if workload_in { c.workload } else { NONE },
                if model_in { model } else { NONE },
            )
        };
        let mut rows: HashMap<GroupKey, Acc> = HashMap::new();
        let mut idle: HashMap<GroupKey, Acc> = HashMap::new();
        let mut row_hours = Hours::default();
        for place in &self.cost_at {
            let models = &self.units[place.units.clone()];
            let counted = models.iter().any(|(_, u)| *u > Decimal::ZERO);
            let consumers = &self.consumers[place.consumers.clone()];
            let place_cost: Decimal = consumers.iter().map(|c| c.cost).sum();
            for c in consumers {
                if counted {
                    let total_units: Decimal = models.iter().map(|(_, u)| *u).sum();
                    // A consumer's part of the place's units (one consumer a pod, nearly always).
                    let part = if place_cost.is_zero() {
                        Decimal::ONE / Decimal::from(consumers.len())
                    } else {
                        c.cost / place_cost
                    };
                    for &(model, u) in models {
                        let acc = rows.entry(group(c, model)).or_default();
                        acc.cost += c.cost * u / total_units;
                        acc.units += u * part;
                        acc.hours.add(place.hour);
                    }
                    row_hours.add(place.hour);
                } else {
                    let acc = idle.entry(group(c, NONE)).or_default();
                    acc.cost += c.cost;
                    acc.hours.add(place.hour);
                }
            }
        }
        // The groups by name, in their order.
        let named = |groups: HashMap<GroupKey, Acc>| -> BTreeMap<Key, Acc> {
            groups
                .into_iter()
                .map(|((team, workload, model), acc)| {
                    let team = self.teams.get(team as usize);
                    let (ns, workload) = self
                        .workloads
                        .get(workload as usize)
                        .copied()
                        .unwrap_or((&NO_NAME, &NO_NAME));
                    let model = self.models.get(model as usize).copied();
                    let key = group_by.key(team, ns, workload, model);
                    (key, acc)
                })
                .collect()
        };
        let (rows, idle) = (named(rows), named(idle));
        let mut orphans: BTreeMap<&UnitKey, Acc> = BTreeMap::new();
        for &(k, hour, u) in &self.orphans {
            if !keep_units(k) {
                continue;
            }
            let acc = orphans.entry(k).or_default();
            acc.units += u;
            acc.hours.add(hour);
        }
        let money = |d: Decimal| currency.map_or(d, |c| c.round(d)).normalize();
        let row = |key: Key, acc: &Acc| UnitCostRow {
            key,
            cost: money(acc.cost),
            units: acc.units.normalize(),
            unit_cost: (acc.units > Decimal::ZERO)
                .then(|| money(acc.cost * Decimal::from(def.per_units) / acc.units)),
            hours: acc.hours.count,
        };
        let mut total = Acc::default();
        for acc in rows.values() {
            total.cost += acc.cost;
            total.units += acc.units;
        }
        total.hours = row_hours;
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
                    hours: a.hours.count,
                })
                .collect(),
            cost_without_units_total: money(idle_total),
            units_without_cost: orphans
                .into_iter()
                .map(|(k, a)| UnitsWithoutCost {
                    namespace: k.namespace.clone(),
                    join: k.join.clone(),
                    model: k.model.clone(),
                    units: a.units.normalize(),
                    hours: a.hours.count,
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

    /// Pod `p`'s cost in an hour (team nlp, namespace ns, workload chat).
    fn cost(h: u32, c: &str) -> PodHourCost {
        PodHourCost {
            hour: at(h),
            team: 0,
            place: 0,
            cost: Some(c.parse().unwrap()),
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
        let costs = [cost(0, "3.00"), cost(1, "3.00")];
        let teams = [TeamId::parse("nlp").unwrap()];
        let places = [Place {
            namespace: Some("ns".into()),
            workload: Some("chat".into()),
            pod: Some("p".into()),
        }];
        let units = BTreeMap::from([
            ((at(0), key("p", "a")), 1_000_000.0),
            ((at(0), key("p", "b")), 2_000_000.0),
            // Hour 1 counted nothing; hour 2 counted where no slice was held.
            ((at(2), key("p", "a")), 500.0),
        ]);
        let usd = Currency::parse("USD").unwrap();
        let r = join(true, &teams, &places, &costs, &units).report(
            &def,
            at(0),
            at(3),
            &"model".parse().unwrap(),
            Some(&usd),
            None,
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

    #[test]
    fn series_joined_by_workload_take_every_pod_of_it_and_each_group_is_named_once() {
        let def = super::super::presets().remove(0);
        let team = |t: &str| TeamId::parse(t).unwrap();
        let teams = [team("nlp"), team("vision")];
        let place = |workload: &str, pod: &str| Place {
            namespace: Some("ns".into()),
            workload: Some(workload.into()),
            pod: Some(pod.into()),
        };
        let places = [
            place("chat", "p1"),
            place("chat", "p2"),
            place("embed", "e1"),
        ];
        let cost = |h: u32, team: u32, place: u32, c: &str| PodHourCost {
            hour: at(h),
            team,
            place,
            cost: Some(c.parse().unwrap()),
        };
        // Hour 0: chat's two pods (nlp) and embed's (vision); hour 1: chat's first pod only.
        let costs = [
            cost(0, 0, 0, "2.00"),
            cost(0, 0, 1, "1.00"),
            cost(0, 1, 2, "4.00"),
            cost(1, 0, 0, "0.50"),
        ];
        let by_workload = |h: u32, workload: &str, model: &str| {
            let key = UnitKey {
                namespace: Some("ns".into()),
                join: Some(workload.into()),
                model: Some(model.into()),
            };
            (at(h), key)
        };
        let units = BTreeMap::from([
            (by_workload(0, "chat", "a"), 2_000_000.0),
            (by_workload(0, "chat", "b"), 1_000_000.0),
            (by_workload(1, "chat", "a"), 500_000.0),
            // Counted where nothing was held.
            (by_workload(2, "chat", "a"), 700.0),
        ]);
        let usd = Currency::parse("USD").unwrap();
        let joined = join(false, &teams, &places, &costs, &units);
        let report = |group_by: &str| {
            joined.report(
                &def,
                at(0),
                at(3),
                &group_by.parse().unwrap(),
                Some(&usd),
                None,
                |_| true,
            )
        };
        let figures = |r: &UnitCostReport| -> Vec<(Vec<Option<String>>, String, String, i64)> {
            r.rows
                .iter()
                .map(|row| {
                    (
                        row.key.values().cloned().collect(),
                        row.cost.to_string(),
                        row.units.to_string(),
                        row.hours,
                    )
                })
                .collect()
        };
        let s = |v: &str| Some(v.to_owned());
        let r = report("workload");
        // chat: 3.00 for 3M units in hour 0, 0.50 for 0.5M in hour 1.
        assert_eq!(
            figures(&r),
            vec![(vec![s("ns"), s("chat")], "3.5".into(), "3500000".into(), 2)]
        );
        assert_eq!(r.rows[0].unit_cost.unwrap().to_string(), "1");
        assert_eq!(r.cost_without_units.len(), 1);
        assert_eq!(r.cost_without_units[0].key["workload"], s("embed"));
        assert_eq!(r.cost_without_units[0].cost.to_string(), "4");
        assert_eq!(r.units_without_cost_total.to_string(), "700");
        assert_eq!(r.total.hours, 2);
        // By team and model: hour 0's 3.00 split 2:1 by the models' units.
        let r = report("team,model");
        assert_eq!(
            figures(&r),
            vec![
                (vec![s("a"), s("nlp")], "2.5".into(), "2500000".into(), 2),
                (vec![s("b"), s("nlp")], "1".into(), "1000000".into(), 1),
            ]
        );
        assert_eq!(r.cost_without_units[0].key["team"], s("vision"));
    }
}
