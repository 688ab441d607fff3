//! The unit cost's counters read server-side (`units::hourly`: an hour a point, the hours that are
//! not a steady rise read raw) give the very increases every raw sample gives (`raw_increases`),
//! on Debian's real `prometheus`: resets (one exactly on the hour), a series starting mid-hour, a
//! gap over an hour, samples exactly on the hour, a series ending on the hour, one sample an hour
//! equal to the last, a NaN hiding a reset, and the look-back before the period; for a selector
//! and for an expression read through a subquery. Counted an hour at a time, each hour from where
//! the one before left each series (as `units::counts` keeps them a day at a time), both reads give
//! what one read of the whole period gives.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use slicemeter::collector::import::prometheus::{Auth, Prometheus};
use slicemeter::units::count::Labels;
use slicemeter::units::service::{self, UnitSource};

use crate::units::start_prometheus;

/// 2026-10-02T00:00:00Z in Unix seconds.
const T0: i64 = 1_790_899_200;

fn series(out: &mut String, pod: &str, samples: impl IntoIterator<Item = (i64, String)>) {
    for (t, v) in samples {
        out.push_str(&format!(
            "vllm:generation_tokens_total{{model_name=\"A\",namespace=\"ns\",pod=\"{pod}\"}} {v} {t}\n"
        ));
    }
}

/// Every minute `k` in `ks` (minutes since T0) with the value `v(k)`.
fn minutes(ks: std::ops::RangeInclusive<i64>, v: impl Fn(i64) -> i64) -> Vec<(i64, String)> {
    ks.map(|k| (T0 + k * 60, v(k).to_string())).collect()
}

fn counters() -> String {
    let mut text = String::new();
    series(&mut text, "steady", minutes(0..=420, |k| 10 * k));
    // Restarts at 02:31 and, exactly on the hour, at 04:00.
    series(
        &mut text,
        "reset",
        minutes(0..=420, |k| match k {
            ..=150 => 10 * k,
            151..=239 => 5 * (k - 150),
            _ => 3 * (k - 240) + 7,
        }),
    );
    series(
        &mut text,
        "late",
        minutes(145..=420, |k| 1000 + 20 * (k - 145)),
    );
    let mut gap = minutes(0..=100, |k| 10 * k);
    gap.extend(minutes(185..=420, |k| 10 * k));
    series(&mut text, "gap", gap);
    series(
        &mut text,
        "hourly",
        (0..=7).map(|h| (T0 + h * 3600, (100 * h * h).to_string())),
    );
    series(&mut text, "idle", minutes(0..=420, |_| 500));
    series(&mut text, "ends", minutes(0..=180, |k| 10 * k));
    series(
        &mut text,
        "single",
        (0..7).map(|h| (T0 + h * 3600 + 1800, "42".to_owned())),
    );
    series(
        &mut text,
        "lookback",
        [(45, 50), (55, 60), (90, 90), (150, 95)].map(|(m, v)| (T0 + m * 60, v.to_string())),
    );
    // A NaN at 02:10, then a value below the last before it: a reset `resets` cannot see.
    let mut nan = minutes(0..=129, |k| 10 * k);
    nan.push((T0 + 130 * 60, "NaN".to_owned()));
    nan.extend(minutes(131..=420, |k| k - 100));
    series(&mut text, "nan", nan);
    text.push_str("# EOF\n");
    text
}

fn at(h: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(T0 + h * 3600, 0).unwrap()
}

/// Per pod: each hour's (hours since T0) increase.
fn by_pod(
    hours: &BTreeMap<(DateTime<Utc>, slicemeter::units::count::UnitKey), f64>,
) -> BTreeMap<String, Vec<(i64, f64)>> {
    let mut out: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for ((h, k), v) in hours {
        out.entry(k.join.clone().unwrap_or_default())
            .or_default()
            .push(((h.timestamp() - T0) / 3600, *v));
    }
    out
}

#[tokio::test]
async fn the_server_side_read_gives_the_raw_reads_increases_hour_by_hour() {
    let dir = tempfile::tempdir().unwrap();
    let prometheus = start_prometheus(dir.path(), &counters()).await;
    let source = UnitSource {
        url: prometheus.url.clone(),
        auth: Auth::None,
        timeout: Duration::from_secs(20),
        max_answer_bytes: 1 << 30,
    };
    let client = Prometheus::new(&source.url, Auth::None, source.timeout, 1 << 30).unwrap();
    let labels = Labels {
        namespace: "namespace",
        join: "pod",
        model: Some("model_name"),
    };
    let mut def = slicemeter::units::presets().remove(0);
    let (from, to) = (at(1), at(7));
    for expression in [
        "vllm:generation_tokens_total",
        "sum by (namespace, pod, model_name) (vllm:generation_tokens_total)",
    ] {
        def.expression = expression.to_owned();
        let selector = slicemeter::units::promql::is_selector(expression);
        let server = slicemeter::units::hourly::increases(
            &client,
            expression,
            selector,
            service::SUBQUERY_STEP_MS,
            slicemeter::units::hourly::Start::LookBack(10 * 60_000),
            from.timestamp_millis(),
            to.timestamp_millis(),
            &labels,
        )
        .await
        .unwrap()
        .expect("read server-side");
        let raw = service::raw_increases(&source, &def, from, to, None)
            .await
            .unwrap();
        assert_eq!(by_pod(&server.hours), by_pod(&raw.hours), "{expression}");
        assert_eq!(server.hours, raw.hours, "{expression}");
        // The service reads server-side, to the same figures.
        let read = service::increases(&source, &def, from, to, None)
            .await
            .unwrap();
        assert_eq!(read.hours, raw.hours, "{expression}");
        // An hour at a time, each from where the last left the series: the gap's hours without a
        // sample, the reset on the hour, the NaN, the series that ends, all as one read.
        for raw_read in [false, true] {
            let mut hours = BTreeMap::new();
            let mut stood: Option<std::collections::HashMap<_, _>> = None;
            for h in 1..7 {
                let inc = if raw_read {
                    service::raw_increases(&source, &def, at(h), at(h + 1), stood.as_ref()).await
                } else {
                    service::increases(&source, &def, at(h), at(h + 1), stood.as_ref()).await
                }
                .unwrap();
                hours.extend(inc.hours);
                // Where the series seen stand now, the others where they stood before.
                stood.get_or_insert_default().extend(inc.last);
            }
            assert_eq!(hours, raw.hours, "{expression}, raw: {raw_read}");
        }
        if !selector {
            continue;
        }
        // Hand figures (hours since 00:00).
        let pods = by_pod(&server.hours);
        let steady: Vec<(i64, f64)> = (1..7).map(|h| (h, 600.0)).collect();
        assert_eq!(pods["steady"], steady);
        // 02:00-03:00: 30 minutes of +10, the restart's 5, 29 of +5; 03:00-04:00: 59 of +5 and
        // the restart at 04:00 (7).
        assert_eq!(
            pods["reset"],
            vec![
                (1, 600.0),
                (2, 450.0),
                (3, 302.0),
                (4, 180.0),
                (5, 180.0),
                (6, 180.0)
            ]
        );
        // From its first sample at 02:25: 35 minutes of +20 in its first hour.
        assert_eq!(pods["late"][0], (2, 700.0));
        // Nothing 02:00-03:00; 1,000 to 1,850 at 03:05, then 55 minutes of +10.
        assert_eq!(pods["gap"][..2], [(1, 400.0), (3, 850.0 + 550.0)]);
        assert_eq!(pods["hourly"][0], (1, 300.0));
        assert_eq!(pods["idle"], (1..7).map(|h| (h, 0.0)).collect::<Vec<_>>());
        // Ends on the hour at 03:00: nothing after.
        assert_eq!(pods["ends"], vec![(1, 600.0), (2, 600.0)]);
        // Its first sample (01:30) starts the count; each later hour's one sample adds nothing.
        assert_eq!(pods["single"], (2..7).map(|h| (h, 0.0)).collect::<Vec<_>>());
        // From 60 at 00:55 (the look-back), not 50 at 00:45.
        assert_eq!(pods["lookback"], vec![(1, 30.0), (2, 5.0)]);
        // 02:00-03:00: +10 to 02:09 (90), the NaN passed over, 31 (a reset) at 02:11, then +1.
        assert_eq!(pods["nan"][1], (2, 90.0 + 31.0 + 49.0));
    }
}
