//! The fleet's figures as Prometheus gauges (text exposition format), for the server's `/metrics`:
//! each team's month-to-date cost and GPU-equivalent hours, the fleet's allocation and busy ratios
//! and unallocated cost, and each node's ingest lag. Labels are bounded: teams and nodes only,
//! never pods. Pure: figures in, text out; `service::fleet_gauges` reads the figures.

use std::fmt::Write;

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

/// What the gauges show, for the month to date.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetGauges {
    /// ISO 4217 code of the costs; none when nothing is priced yet.
    pub currency: Option<String>,
    /// (team, cost so far, GPU-equivalent hours so far), teams that pay only.
    pub teams: Vec<(String, Decimal, Decimal)>,
    pub unallocated_cost: Option<Decimal>,
    /// The part of it the GPUs' layouts strand (no valid profile or share fits it).
    pub stranded_cost: Option<Decimal>,
    /// GPU-equivalent hours held by every slice (teams and consumers no team claims).
    pub held_hours: Decimal,
    /// Of the slices whose compute activity was measured: (busy, held) GPU-equivalent hours.
    pub measured_hours: (Decimal, Decimal),
    /// GPU-hours present.
    pub capacity_hours: Decimal,
    /// (node, seconds since its last batch was received).
    pub node_lags: Vec<(String, f64)>,
}

/// Every gauge this module writes, with its labels: docs/operations.md's metrics table lists the same.
pub const GAUGES: [(&str, &str); 7] = [
    ("slicemeter_team_month_to_date_cost", "team, currency"),
    ("slicemeter_team_month_to_date_gpu_equivalent_hours", "team"),
    ("slicemeter_fleet_month_to_date_allocation_ratio", ""),
    ("slicemeter_fleet_month_to_date_busy_ratio", ""),
    (
        "slicemeter_fleet_month_to_date_unallocated_cost",
        "currency",
    ),
    ("slicemeter_fleet_month_to_date_stranded_cost", "currency"),
    ("slicemeter_node_ingest_lag_seconds", "node"),
];

/// A label value as the exposition format quotes it.
pub fn quoted(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(d: Decimal) -> f64 {
    d.to_f64().unwrap_or(f64::NAN)
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} gauge");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", quoted(v)))
            .collect();
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{}}} {value}", labels.join(","));
        }
    }
}

/// The gauges in the text exposition format.
pub fn render(g: &FleetGauges) -> String {
    let mut out = Out(String::new());
    if let Some(currency) = &g.currency {
        out.family(
            "slicemeter_team_month_to_date_cost",
            "What the team's invoice lines of the current month come to so far.",
        );
        for (team, cost, _) in &g.teams {
            out.sample(
                "slicemeter_team_month_to_date_cost",
                &[("team", team), ("currency", currency)],
                number(*cost),
            );
        }
        if let Some(unallocated) = g.unallocated_cost {
            out.family(
                "slicemeter_fleet_month_to_date_unallocated_cost",
                "The cost of the share of the fleet's GPUs no slice held this month so far.",
            );
            out.sample(
                "slicemeter_fleet_month_to_date_unallocated_cost",
                &[("currency", currency)],
                number(unallocated),
            );
        }
        if let Some(stranded) = g.stranded_cost {
            out.family(
                "slicemeter_fleet_month_to_date_stranded_cost",
                "The part of the unallocated cost that the GPUs' layouts leave to no valid profile or share, this month so far.",
            );
            out.sample(
                "slicemeter_fleet_month_to_date_stranded_cost",
                &[("currency", currency)],
                number(stranded),
            );
        }
    }
    out.family(
        "slicemeter_team_month_to_date_gpu_equivalent_hours",
        "Whole GPUs the team's slices blocked this month so far, in hours.",
    );
    for (team, _, hours) in &g.teams {
        out.sample(
            "slicemeter_team_month_to_date_gpu_equivalent_hours",
            &[("team", team)],
            number(*hours),
        );
    }
    if g.capacity_hours > Decimal::ZERO {
        out.family(
            "slicemeter_fleet_month_to_date_allocation_ratio",
            "GPU-equivalent hours held over GPU-hours present, this month so far.",
        );
        out.sample(
            "slicemeter_fleet_month_to_date_allocation_ratio",
            &[],
            number(g.held_hours / g.capacity_hours),
        );
    }
    let (busy, measured) = g.measured_hours;
    if measured > Decimal::ZERO {
        out.family(
            "slicemeter_fleet_month_to_date_busy_ratio",
            "The busy part of the GPU-equivalent hours held by slices whose compute is measured, this month so far.",
        );
        out.sample(
            "slicemeter_fleet_month_to_date_busy_ratio",
            &[],
            number(busy / measured),
        );
    }
    out.family(
        "slicemeter_node_ingest_lag_seconds",
        "Seconds since the server received the node's last batch.",
    );
    for (node, lag) in &g.node_lags {
        out.sample(
            "slicemeter_node_ingest_lag_seconds",
            &[("node", node)],
            *lag,
        );
    }
    out.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    #[test]
    fn gauges_are_written_in_the_exposition_format_with_quoted_labels() {
        let g = FleetGauges {
            currency: Some("USD".into()),
            teams: vec![("nlp".into(), dec!(1337.14), dec!(334.285714))],
            unallocated_cost: Some(dec!(771.43)),
            stranded_cost: Some(dec!(0.29)),
            held_hours: dec!(360),
            measured_hours: (dec!(80), dec!(320)),
            capacity_hours: dec!(720),
            node_lags: vec![("gpu-node-\"01\"".into(), 42.5)],
        };
        let text = render(&g);
        for line in [
            "# TYPE slicemeter_team_month_to_date_cost gauge",
            "slicemeter_team_month_to_date_cost{team=\"nlp\",currency=\"USD\"} 1337.14",
            "slicemeter_team_month_to_date_gpu_equivalent_hours{team=\"nlp\"} 334.285714",
            "slicemeter_fleet_month_to_date_allocation_ratio 0.5",
            "slicemeter_fleet_month_to_date_busy_ratio 0.25",
            "slicemeter_fleet_month_to_date_unallocated_cost{currency=\"USD\"} 771.43",
            "slicemeter_fleet_month_to_date_stranded_cost{currency=\"USD\"} 0.29",
            "slicemeter_node_ingest_lag_seconds{node=\"gpu-node-\\\"01\\\"\"} 42.5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        // Every family written is one docs/operations.md lists.
        for l in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = l.split_whitespace().nth(2).unwrap();
            assert!(GAUGES.iter().any(|(g, _)| *g == name), "{name}");
        }
    }

    #[test]
    fn unknown_figures_are_left_out_not_written_as_zero() {
        let text = render(&FleetGauges {
            held_hours: dec!(10),
            ..Default::default()
        });
        assert!(!text.contains("busy_ratio "), "{text}");
        assert!(!text.contains("allocation_ratio "), "{text}");
        assert!(!text.contains("_cost"), "{text}");
    }
}
