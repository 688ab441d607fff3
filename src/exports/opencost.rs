//! OpenCost's allocation API (`GET /allocation`, `/allocation/compute`), answered from the usage
//! report: its query parameters and its response shape, as OpenCost's own source gives them
//! (`core/pkg/opencost/window.go` for windows, `core/pkg/opencost/allocation_json.go` for the
//! allocation object, `pkg/costmodel/router.go` for the envelope), with the GPU figures
//! slicemeter's: `gpuHours` GPU-equivalent hours (held hours x physical share), `gpuCost` their cost
//! under the rate cards, the invoices' figures. Pure: parameters and a usage report in, JSON out.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::billing::pricing::CarryRounder;
use crate::billing::rate_card::Currency;
use crate::domain::exact::Exact;
use crate::domain::time::{Month, floor_hour, start_of};
use crate::reports::usage::{Dimension, GroupBy, Step, UsageFigures, UsageReport};

/// The cluster every allocation is in: OpenCost's default `CLUSTER_ID`.
pub const CLUSTER: &str = "default-cluster";

/// OpenCost's name for an allocation without a value for an aggregated property.
pub const UNALLOCATED: &str = "__unallocated__";
/// OpenCost's name for the capacity nobody held.
pub const IDLE: &str = "__idle__";

/// One of `aggregate`'s properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Property {
    Cluster,
    /// A usage report dimension.
    Usage(Dimension),
}

impl Property {
    /// OpenCost's property name for it, as in `properties`.
    fn name(&self) -> &'static str {
        match self {
            Property::Cluster => "cluster",
            Property::Usage(Dimension::Namespace) => "namespace",
            Property::Usage(Dimension::Pod) => "pod",
            Property::Usage(Dimension::Container) => "container",
            Property::Usage(Dimension::Workload) => "controller",
            Property::Usage(Dimension::Node) => "node",
            Property::Usage(Dimension::Team) => "team",
            Property::Usage(_) => "labels",
        }
    }
}

/// `aggregate`: OpenCost's `namespace`, `pod`, `container`, `controller` (the pod's owner),
/// `node`, `cluster`, `team` and `label:<key>`, comma-separated; every unknown one named.
pub fn parse_aggregate(s: &str) -> Result<Vec<Property>, String> {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for part in s.split(',') {
        let p = match part {
            "cluster" => Property::Cluster,
            "namespace" => Property::Usage(Dimension::Namespace),
            "pod" => Property::Usage(Dimension::Pod),
            "container" => Property::Usage(Dimension::Container),
            "controller" => Property::Usage(Dimension::Workload),
            "node" => Property::Usage(Dimension::Node),
            "team" => Property::Usage(Dimension::Team),
            other => match other.parse::<Dimension>() {
                Ok(d @ Dimension::Label(_)) => Property::Usage(d),
                _ => {
                    bad.push(format!("{other:?}"));
                    continue;
                }
            },
        };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if !bad.is_empty() {
        return Err(format!(
            "{} not one of cluster, namespace, pod, container, controller, node, team, label:<key>",
            bad.join(", ")
        ));
    }
    Ok(out)
}

/// The usage report's dimensions behind `aggregate`.
pub fn group_by(aggregate: &[Property]) -> GroupBy {
    GroupBy::of(
        aggregate
            .iter()
            .filter_map(|p| match p {
                Property::Usage(d) => Some(d.clone()),
                Property::Cluster => None,
            })
            .collect(),
    )
}

fn midnight(t: DateTime<Utc>) -> DateTime<Utc> {
    start_of(t.date_naive())
}

/// The next hour boundary at or after `t`.
fn ceil_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    let f = floor_hour(t);
    if f == t { f } else { f + Duration::hours(1) }
}

/// `window` as OpenCost reads it (UTC): `today`, `yesterday`, `week` (from Sunday), `lastweek`,
/// `month`, `lastmonth`, a duration `N(m|h|d|w)` (days and weeks end at the next midnight), an
/// RFC 3339 pair `start,end` or a Unix pair `start,end`; widened to whole hours, the rollups' unit.
pub fn parse_window(s: &str, now: DateTime<Utc>) -> Result<(DateTime<Utc>, DateTime<Utc>), String> {
    let today = midnight(now);
    let sunday = today - Duration::days(i64::from(now.weekday().num_days_from_sunday()));
    let this_month = Month::of(now);
    let (start, end) = match s {
        "today" => (today, today + Duration::days(1)),
        "yesterday" => (today - Duration::days(1), today),
        "week" => (sunday, now),
        "lastweek" => (sunday - Duration::days(7), sunday),
        "month" => (this_month.start(), now),
        "lastmonth" => (this_month.minus(1).start(), this_month.start()),
        other => {
            if let Some((n, unit)) = other
                .find(|c: char| !c.is_ascii_digit())
                .filter(|i| *i > 0 && other.len() == i + 1)
                .map(|i| (&other[..i], &other[i..]))
            {
                let n: i64 = n.parse().map_err(|_| format!("{other:?} is too long"))?;
                if n > 5 * 366 * 24 * 60 {
                    return Err(format!("{other:?} is too long"));
                }
                match unit {
                    "m" => (now - Duration::minutes(n), now),
                    "h" => (now - Duration::hours(n), now),
                    "d" => (today + Duration::days(1 - n), today + Duration::days(1)),
                    "w" => (today + Duration::days(1 - 7 * n), today + Duration::days(1)),
                    _ => {
                        return Err(format!(
                            "{other:?}: a duration is minutes (m), hours (h), days (d) or weeks (w)"
                        ));
                    }
                }
            } else {
                pair(other)?
            }
        }
    };
    let (start, end) = (floor_hour(start), ceil_hour(end));
    if end <= start {
        return Err(format!("the window {s:?} is empty"));
    }
    Ok((start, end))
}

/// `start,end` as RFC 3339 instants or Unix seconds.
fn pair(s: &str) -> Result<(DateTime<Utc>, DateTime<Utc>), String> {
    let wrong = || {
        format!(
            "{s:?} is not a window: today, yesterday, week, lastweek, month, lastmonth, 7d, 24h, \
             an RFC 3339 pair (2026-10-01T00:00:00Z,2026-11-01T00:00:00Z) or a Unix pair"
        )
    };
    if let Some((a, b)) = s.split_once(',')
        && let (Ok(a), Ok(b)) = (
            DateTime::parse_from_rfc3339(a),
            DateTime::parse_from_rfc3339(b),
        )
    {
        return Ok((a.with_timezone(&Utc), b.with_timezone(&Utc)));
    }
    let (a, b) = s.split_once([',', '-', '|']).ok_or_else(wrong)?;
    let unix = |v: &str| {
        v.parse::<i64>()
            .ok()
            .and_then(|v| Utc.timestamp_opt(v, 0).single())
            .filter(|t| t.year() >= 2000 && t.year() < 10_000)
    };
    match (unix(a), unix(b)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(wrong()),
    }
}

/// `step`: none (one set for the window), or an hour, a day or a month.
pub fn parse_step(s: Option<&str>) -> Result<Option<Step>, String> {
    match s {
        None => Ok(None),
        Some("1h" | "60m" | "hour") => Ok(Some(Step::Hour)),
        Some("1d" | "24h" | "day") => Ok(Some(Step::Day)),
        Some("month") => Ok(Some(Step::Month)),
        Some(other) => Err(format!(
            "step {other:?} is not one of 1h (hour), 1d (day), month: the rollups are hourly"
        )),
    }
}

/// OpenCost's booleans: `true`, `1`, `false`, `0`; `accumulate` also takes `all`.
pub fn parse_bool(name: &str, s: Option<&str>) -> Result<bool, String> {
    match s {
        None | Some("false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some("all") if name == "accumulate" => Ok(true),
        Some(other) => Err(format!("{name} {other:?} is not true or false")),
    }
}

/// OpenCost's `{start, end}`.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// One allocation, with the fields OpenCost's `AllocationJSON` writes. Only the GPU ones carry
/// figures: slicemeter meters GPUs, so CPU, memory, storage and network are 0.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    pub name: String,
    pub properties: Map<String, Value>,
    pub window: Window,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub minutes: f64,
    pub cpu_cores: f64,
    pub cpu_core_request_average: f64,
    pub cpu_core_usage_average: f64,
    pub cpu_core_hours: f64,
    pub cpu_cost: f64,
    pub cpu_cost_adjustment: f64,
    pub cpu_efficiency: f64,
    /// Whole GPUs blocked on average over the window: `gpuHours` / the window's hours.
    pub gpu_count: f64,
    /// GPU-equivalent hours: held hours x physical share.
    pub gpu_hours: f64,
    /// Their cost under the rate cards in force (the invoices' figures).
    pub gpu_cost: f64,
    pub gpu_cost_adjustment: f64,
    /// Used over held GPU-equivalent hours; null where compute was not measured.
    pub gpu_efficiency: Option<f64>,
    pub network_transfer_bytes: f64,
    pub network_receive_bytes: f64,
    pub network_cost: f64,
    pub network_cost_adjustment: f64,
    pub load_balancer_cost: f64,
    pub load_balancer_cost_adjustment: f64,
    pub pv_bytes: f64,
    pub pv_byte_hours: f64,
    pub pv_cost: f64,
    pub pvs: Option<Value>,
    pub pv_cost_adjustment: f64,
    pub ram_bytes: f64,
    pub ram_byte_request_average: f64,
    pub ram_byte_usage_average: f64,
    pub ram_byte_hours: f64,
    pub ram_cost: f64,
    pub ram_cost_adjustment: f64,
    pub ram_efficiency: f64,
    pub external_cost: f64,
    /// The share of idle capacity given to this allocation (`shareIdle`).
    pub shared_cost: f64,
    pub total_cost: f64,
    pub total_efficiency: Option<f64>,
    /// slicemeter's own, on `__idle__` only: the part of its cost a valid instance or share could
    /// still take (the conservation block's `placeable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeable_cost: Option<f64>,
    /// slicemeter's own, on `__idle__` only: the part of its cost the GPUs' layouts strand (the
    /// conservation block's `stranded`). The rest of `__idle__` is the sharing discount and rounding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stranded_cost: Option<f64>,
}

fn f(d: Decimal) -> f64 {
    d.to_f64().unwrap_or_default()
}

impl Allocation {
    fn new(name: String, properties: Map<String, Value>, window: &Window) -> Allocation {
        let minutes = (window.end - window.start).num_minutes() as f64;
        Allocation {
            name,
            properties,
            window: window.clone(),
            start: window.start,
            end: window.end,
            minutes,
            cpu_cores: 0.0,
            cpu_core_request_average: 0.0,
            cpu_core_usage_average: 0.0,
            cpu_core_hours: 0.0,
            cpu_cost: 0.0,
            cpu_cost_adjustment: 0.0,
            cpu_efficiency: 0.0,
            gpu_count: 0.0,
            gpu_hours: 0.0,
            gpu_cost: 0.0,
            gpu_cost_adjustment: 0.0,
            gpu_efficiency: None,
            network_transfer_bytes: 0.0,
            network_receive_bytes: 0.0,
            network_cost: 0.0,
            network_cost_adjustment: 0.0,
            load_balancer_cost: 0.0,
            load_balancer_cost_adjustment: 0.0,
            pv_bytes: 0.0,
            pv_byte_hours: 0.0,
            pv_cost: 0.0,
            pvs: None,
            pv_cost_adjustment: 0.0,
            ram_bytes: 0.0,
            ram_byte_request_average: 0.0,
            ram_byte_usage_average: 0.0,
            ram_byte_hours: 0.0,
            ram_cost: 0.0,
            ram_cost_adjustment: 0.0,
            ram_efficiency: 0.0,
            external_cost: 0.0,
            shared_cost: 0.0,
            total_cost: 0.0,
            total_efficiency: None,
            placeable_cost: None,
            stranded_cost: None,
        }
    }

    fn set_gpu(&mut self, figures: &UsageFigures, cost: Decimal, shared: Decimal) {
        let hours = figures.gpu_equivalent_hours;
        self.gpu_hours = f(hours);
        self.gpu_count = if self.minutes > 0.0 {
            f(hours) / (self.minutes / 60.0)
        } else {
            0.0
        };
        self.gpu_cost = f(cost);
        self.gpu_efficiency = figures.efficiency.map(f);
        self.total_efficiency = self.gpu_efficiency;
        self.shared_cost = f(shared);
        self.total_cost = f(cost + shared);
    }
}

/// One set: the allocations of one step, by name.
pub type Set = BTreeMap<String, Allocation>;

/// A usage row's key and figures.
type Row<'r> = (&'r BTreeMap<String, Option<String>>, &'r UsageFigures);

/// Idle capacity of a window: the fleet's cost less its allocations', and of the unallocated part
/// of it, what is placeable and what is stranded (the monthly conservation blocks' figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleCost {
    pub total: Decimal,
    pub placeable: Decimal,
    pub stranded: Decimal,
}

/// What idle capacity came to in each set's window, where it is known (whole months).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Not asked for.
    Off,
    /// As an allocation of its own, `__idle__`.
    Separate,
    /// Spread over the allocations in proportion to their cost (`sharedCost`).
    Shared,
}

/// The sets of `report` (one per bucket, or one for the whole window when `accumulate`), named as
/// OpenCost names them: the aggregated properties' values joined with `/`, `__unallocated__` where
/// a value is missing. `idle_cost`: the idle capacity of each set's window (the fleet's cost less
/// its allocations'), required unless `idle` is off.
pub fn sets(
    report: &UsageReport,
    aggregate: &[Property],
    accumulate: bool,
    idle: Idle,
    idle_cost: &dyn Fn(DateTime<Utc>, DateTime<Utc>, Decimal) -> Option<IdleCost>,
    currency: Option<&Currency>,
) -> Vec<Set> {
    let mut windows: Vec<(Window, Vec<Row>)> = Vec::new();
    if accumulate || report.rows.is_empty() {
        windows.push((
            Window {
                start: report.from,
                end: report.to,
            },
            report.totals.iter().map(|t| (&t.key, &t.figures)).collect(),
        ));
    } else {
        let mut by_bucket: BTreeMap<DateTime<Utc>, Vec<_>> = BTreeMap::new();
        for r in &report.rows {
            by_bucket
                .entry(r.bucket)
                .or_default()
                .push((&r.key, &r.figures));
        }
        for (bucket, rows) in by_bucket {
            let end = match report.step {
                Step::Hour => bucket + Duration::hours(1),
                Step::Day => bucket + Duration::days(1),
                Step::Month => Month::of(bucket).end(),
            };
            windows.push((
                Window {
                    start: bucket.max(report.from),
                    end: end.min(report.to),
                },
                rows,
            ));
        }
    }
    windows
        .into_iter()
        .map(|(window, rows)| set(window, rows, aggregate, idle, idle_cost, currency))
        .collect()
}

fn set(
    window: Window,
    rows: Vec<Row>,
    aggregate: &[Property],
    idle: Idle,
    idle_cost: &dyn Fn(DateTime<Utc>, DateTime<Utc>, Decimal) -> Option<IdleCost>,
    currency: Option<&Currency>,
) -> Set {
    let cost = |fig: &UsageFigures| fig.cost.unwrap_or_default();
    let allocated: Decimal = rows.iter().map(|(_, fig)| cost(fig)).sum();
    let idle_total = match idle {
        Idle::Off => None,
        _ => idle_cost(window.start, window.end, allocated),
    };
    // Each allocation's share of idle capacity, carried to the minor unit so the shares sum to it.
    let mut shares = vec![Decimal::ZERO; rows.len()];
    if let (Idle::Shared, Some(IdleCost { total, .. }), Some(cur)) = (idle, idle_total, currency)
        && allocated > Decimal::ZERO
    {
        let mut r = CarryRounder::new();
        let n = rows.len();
        for (i, (_, fig)) in rows.iter().enumerate() {
            let exact = Exact::from(total) * cost(fig) / allocated;
            shares[i] = if i + 1 == n {
                r.last(exact, total)
            } else {
                r.next(exact, cur)
            };
        }
    }
    let mut out = Set::new();
    for ((key, fig), shared) in rows.into_iter().zip(shares) {
        let mut names = Vec::new();
        let mut properties = Map::new();
        let mut labels = Map::new();
        for p in aggregate {
            let value = match p {
                Property::Cluster => Some(CLUSTER.to_owned()),
                Property::Usage(d) => key.get(&d.name()).cloned().flatten(),
            };
            names.push(value.clone().unwrap_or_else(|| UNALLOCATED.to_owned()));
            match (p, value) {
                (Property::Usage(Dimension::Label(k)), Some(v)) => {
                    labels.insert(k.clone(), Value::String(v));
                }
                (Property::Usage(Dimension::Label(_)), None) => {}
                (p, Some(v)) => {
                    properties.insert(p.name().to_owned(), Value::String(v));
                }
                (_, None) => {}
            }
        }
        if !labels.is_empty() {
            properties.insert("labels".into(), Value::Object(labels));
        }
        properties
            .entry("cluster")
            .or_insert_with(|| Value::String(CLUSTER.to_owned()));
        let name = names.join("/");
        let mut a = Allocation::new(name.clone(), properties, &window);
        a.set_gpu(fig, cost(fig), shared);
        // Two keys OpenCost would tell apart cannot meet here: the usage report's keys are unique.
        out.insert(name, a);
    }
    if let (Idle::Separate, Some(cost)) = (idle, idle_total) {
        let mut properties = Map::new();
        properties.insert("cluster".into(), Value::String(CLUSTER.to_owned()));
        let mut a = Allocation::new(IDLE.to_owned(), properties, &window);
        a.gpu_cost = f(cost.total);
        a.total_cost = f(cost.total);
        a.placeable_cost = Some(f(cost.placeable));
        a.stranded_cost = Some(f(cost.stranded));
        out.insert(IDLE.to_owned(), a);
    }
    out
}

/// Whether `[from, to)` is whole months, and which.
pub fn whole_months(from: DateTime<Utc>, to: DateTime<Utc>) -> Option<Vec<Month>> {
    let first = Month::of(from);
    if first.start() != from {
        return None;
    }
    let mut months = vec![first];
    while months.last().expect("one month").end() < to {
        months.push(months.last().expect("one month").next());
    }
    (months.last().expect("one month").end() == to).then_some(months)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn windows_are_read_as_opencost_reads_them_in_whole_hours() {
        // A Tuesday afternoon.
        let now = at("2026-12-01T15:20:00Z");
        let w = |s: &str| parse_window(s, now).unwrap();
        assert_eq!(
            w("today"),
            (at("2026-12-01T00:00:00Z"), at("2026-12-02T00:00:00Z"))
        );
        assert_eq!(
            w("yesterday"),
            (at("2026-11-30T00:00:00Z"), at("2026-12-01T00:00:00Z"))
        );
        assert_eq!(
            w("week"),
            (at("2026-11-29T00:00:00Z"), at("2026-12-01T16:00:00Z"))
        );
        assert_eq!(
            w("lastweek"),
            (at("2026-11-22T00:00:00Z"), at("2026-11-29T00:00:00Z"))
        );
        assert_eq!(
            w("month"),
            (at("2026-12-01T00:00:00Z"), at("2026-12-01T16:00:00Z"))
        );
        assert_eq!(
            w("lastmonth"),
            (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"))
        );
        // Days end at the next midnight: today and the six days before it.
        assert_eq!(
            w("7d"),
            (at("2026-11-25T00:00:00Z"), at("2026-12-02T00:00:00Z"))
        );
        assert_eq!(
            w("24h"),
            (at("2026-11-30T15:00:00Z"), at("2026-12-01T16:00:00Z"))
        );
        assert_eq!(
            w("2026-10-01T00:00:00Z,2026-11-01T00:00:00Z"),
            (at("2026-10-01T00:00:00Z"), at("2026-11-01T00:00:00Z"))
        );
        assert_eq!(
            w("1790812800,1793491200"),
            (at("2026-10-01T00:00:00Z"), at("2026-11-01T00:00:00Z"))
        );
        for bad in ["", "fortnight", "7y", "2026-10-01,2026-09-01", "1,2"] {
            assert!(parse_window(bad, now).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn aggregate_names_every_property_it_does_not_know() {
        assert_eq!(
            parse_aggregate("namespace,label:app").unwrap(),
            vec![
                Property::Usage(Dimension::Namespace),
                Property::Usage(Dimension::Label("app".into()))
            ]
        );
        let e = parse_aggregate("namespace,service,deployment").unwrap_err();
        assert!(e.contains("\"service\", \"deployment\" not one of"), "{e}");
        assert!(whole_months(at("2026-10-01T00:00:00Z"), at("2026-12-01T00:00:00Z")).is_some());
        assert!(whole_months(at("2026-10-01T00:00:00Z"), at("2026-11-15T00:00:00Z")).is_none());
    }
}
