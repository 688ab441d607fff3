//! `GET /allocation` in OpenCost's shape. The shape is OpenCost's own: the envelope
//! `{"code":200,"status":"success","data":[...]}` of `WrapData` (opencost/opencost
//! `pkg/costmodel/router.go`), a list of sets, each a map of name to allocation, and the
//! allocation's fields as `AllocationJSON` writes them (`core/pkg/opencost/allocation_json.go`;
//! an example is opencost-website `static/allocation-example-output.json`).

use std::collections::BTreeMap;
use std::str::FromStr;

use axum::http::StatusCode;
use rust_decimal::Decimal;
use serde_json::Value;
use slicemeter::domain::access::Role;
use slicemeter::domain::time::Month;

use crate::support::*;

/// A number of an allocation, as an exact decimal (the JSON number's shortest form).
fn number(v: &Value) -> Decimal {
    assert!(v.is_number(), "a number, got {v}");
    Decimal::from_str(&v.to_string()).unwrap()
}

/// The one set of an accumulated answer, checked against OpenCost's shape field by field.
fn one_set(r: &Reply) -> &serde_json::Map<String, Value> {
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["code"], 200);
    assert_eq!(r.body["status"], "success");
    let data = r.body["data"].as_array().expect("data is a list of sets");
    assert_eq!(data.len(), 1, "{data:?}");
    let set = data[0]
        .as_object()
        .expect("a set maps names to allocations");
    for (name, a) in set {
        assert_eq!(a["name"], name.as_str());
        assert!(a["properties"].is_object(), "{a}");
        assert_eq!(a["properties"]["cluster"], "default-cluster");
        for k in ["start", "end"] {
            assert!(a[k].is_string() && a["window"][k] == a[k], "{a}");
        }
        for k in [
            "minutes",
            "cpuCores",
            "cpuCoreHours",
            "cpuCost",
            "cpuCostAdjustment",
            "gpuCount",
            "gpuHours",
            "gpuCost",
            "gpuCostAdjustment",
            "networkCost",
            "loadBalancerCost",
            "pvCost",
            "ramBytes",
            "ramByteHours",
            "ramCost",
            "ramCostAdjustment",
            "externalCost",
            "sharedCost",
            "totalCost",
        ] {
            assert!(a[k].is_number(), "{name}: {k} is {}", a[k]);
        }
        for k in ["gpuEfficiency", "totalEfficiency"] {
            assert!(a[k].is_number() || a[k].is_null(), "{name}: {k}");
        }
    }
    set
}

fn sum(set: &serde_json::Map<String, Value>, field: &str) -> Decimal {
    set.values().map(|a| number(&a[field])).sum()
}

#[tokio::test]
async fn last_months_allocation_by_namespace_adds_up_to_the_charges_and_with_idle_to_the_fleet_cost()
 {
    let app = TestApp::spawn().await;
    let last = Month::of(chrono::Utc::now()).minus(1);
    let card = crate::billing::rate_card(&app, &last.start().to_rfc3339(), "4.00").await;
    assert_eq!(card.status, StatusCode::CREATED, "{card:?}");
    let fleet = crate::reports::simulated(&app, 9, 8, &last.start().to_rfc3339(), 30).await;
    let report = app
        .get(Some(&app.admin), &format!("/v1/reports/monthly/{last}"))
        .await;
    let c = &report.body["conservation"];
    let dec = |v: &Value| Decimal::from_str(v.as_str().unwrap()).unwrap();

    // What every namespace's pods held: the teams' charges and what no team claims.
    let r = app
        .get(
            Some(&app.admin),
            "/allocation?window=lastmonth&aggregate=namespace",
        )
        .await;
    let set = one_set(&r);
    assert!(set.len() >= 3, "{set:?}");
    for (name, a) in set {
        assert_eq!(
            a["start"],
            last.start().format("%Y-%m-%dT%H:%M:%SZ").to_string()
        );
        assert_eq!(a["properties"]["namespace"], name.as_str());
        let hours = Decimal::from((last.end() - last.start()).num_hours());
        assert_eq!(number(&a["minutes"]), hours * Decimal::from(60));
        assert_eq!(number(&a["totalCost"]), number(&a["gpuCost"]));
    }
    assert_eq!(
        sum(set, "gpuCost"),
        dec(&c["team_charges"]) + dec(&c["unattributed"])
    );
    assert!(sum(set, "gpuHours") > Decimal::ZERO);
    // OpenCost's own path answers the same.
    let compute = app
        .get(
            Some(&app.admin),
            "/allocation/compute?window=lastmonth&aggregate=namespace",
        )
        .await;
    assert_eq!(compute.body, r.body);

    // With idle capacity, as its own allocation or spread by cost: the fleet's cost.
    let idle = app
        .get(
            Some(&app.admin),
            "/allocation?window=lastmonth&aggregate=namespace&idle=true",
        )
        .await;
    let with_idle = one_set(&idle);
    assert!(number(&with_idle["__idle__"]["gpuCost"]) > Decimal::ZERO);
    assert_eq!(sum(with_idle, "gpuCost"), dec(&c["fleet_cost"]));
    // Of it, what is placeable and what the cards' layouts strand: the conservation block's.
    let i = &with_idle["__idle__"];
    assert_eq!(number(&i["placeableCost"]), dec(&c["placeable"]));
    assert_eq!(number(&i["strandedCost"]), dec(&c["stranded"]));
    let shared = app
        .get(
            Some(&app.admin),
            "/allocation?window=lastmonth&aggregate=namespace&shareIdle=true",
        )
        .await;
    let shared = one_set(&shared);
    assert!(!shared.contains_key("__idle__"));
    assert_eq!(sum(shared, "totalCost"), dec(&c["fleet_cost"]));
    assert_eq!(sum(shared, "gpuCost"), sum(set, "gpuCost"));

    // A team lead: their team's namespaces, their team's cost, and no idle capacity.
    let (team, cost) = report.body["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["team"].as_str().unwrap(), dec(&t["cost"])))
        .find(|(_, cost)| *cost > Decimal::ZERO)
        .expect("a team with usage");
    let team = fleet.teams.iter().find(|t| t.id == team).unwrap();
    let lead = app.token(Role::TeamLead, Some(&team.id), None).await;
    let own = app
        .get(
            Some(&lead),
            "/allocation?window=lastmonth&aggregate=namespace",
        )
        .await;
    let own = one_set(&own);
    assert!(!own.is_empty());
    // Exactly the team's pods, namespace by namespace (a shared namespace holds only its pods):
    // what finance sees of the team, aggregated by team and namespace.
    let by_team = app
        .get(
            Some(&app.admin),
            "/allocation?window=lastmonth&aggregate=team,namespace",
        )
        .await;
    let theirs: BTreeMap<String, Decimal> = one_set(&by_team)
        .iter()
        .filter_map(|(name, a)| {
            let ns = name.strip_prefix(&format!("{}/", team.id))?;
            Some((ns.to_owned(), number(&a["gpuCost"])))
        })
        .collect();
    let mine: BTreeMap<String, Decimal> = own
        .iter()
        .map(|(name, a)| (name.clone(), number(&a["gpuCost"])))
        .collect();
    assert_eq!(mine, theirs);
    assert_eq!(sum(own, "gpuCost"), cost);
    let forbidden = app
        .get(Some(&lead), "/allocation?window=lastmonth&idle=true")
        .await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN, "{forbidden:?}");
    let collector = app.token(Role::Collector, None, Some("gpu-node-01")).await;
    let r = app
        .get(Some(&collector), "/allocation?window=lastmonth")
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        app.get(None, "/allocation?window=lastmonth").await.status,
        StatusCode::UNAUTHORIZED
    );

    // kubectl cost's aggregations: names joined with `/`, one set per day when not accumulated.
    let by_day = app
        .get(
            Some(&app.admin),
            "/allocation?window=lastmonth&aggregate=cluster,namespace&step=1d&accumulate=false",
        )
        .await;
    let sets = by_day.body["data"].as_array().unwrap();
    assert_eq!(sets.len(), 2, "30 hours of data span two days");
    let mut by_name: BTreeMap<String, Decimal> = BTreeMap::new();
    for s in sets {
        for (name, a) in s.as_object().unwrap() {
            assert!(name.starts_with("default-cluster/"), "{name}");
            assert_eq!(number(&a["minutes"]), Decimal::from(24 * 60));
            *by_name.entry(name.clone()).or_default() += number(&a["gpuHours"]);
        }
    }
    assert_eq!(by_name.len(), set.len());
}

#[tokio::test]
async fn bad_allocation_parameters_are_each_named() {
    let app = TestApp::spawn().await;
    let r = app
        .get(
            Some(&app.admin),
            "/allocation?window=fortnight&aggregate=namespace,service&step=1w&shareIdle=maybe",
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let fields: Vec<&str> = r.body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, vec!["window", "aggregate", "step", "shareIdle"]);
    // Idle capacity is known for whole months only.
    let r = app
        .get(Some(&app.admin), "/allocation?window=7d&idle=true")
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(r.body["error"]["fields"][0]["field"], "idle");
    let r = app.get(Some(&app.admin), "/allocation").await;
    assert_eq!(r.body["error"]["fields"][0]["field"], "window");
}
