//! The unit cost's counters read server-side (`units::hourly`: an hour a point, the hours that are
//! not a steady rise read raw) give the very increases every raw sample gives (`raw_increases`),
//! on Debian's real `prometheus`: resets (one exactly on the hour), a series starting mid-hour, a
//! gap over an hour, samples exactly on the hour, a series ending on the hour, one sample an hour
//! equal to the last, a NaN hiding a reset, and the look-back before the period; for a selector
//! and for an expression read through a subquery. Counted an hour at a time, each hour from where
//! the one before left each series (as `units::counts` keeps them a day at a time), both reads give
//! what one read of the whole period gives. Read through remote read's chunks (a Prometheus with
//! an external label), every sample is the query API's, and so is every increase; so too for
//! counters Prometheus scraped live (its head block, with the staleness markers of a pod that left
//! a page and came back).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use slicemeter::collector::import::prometheus::{Auth, Prometheus};
use slicemeter::units::count::Labels;
use slicemeter::units::service::{self, UnitSource};

use crate::units::{start_labelled_prometheus, start_prometheus};

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
        remote_read: false,
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

/// How long a read of the test's Prometheus may take.
const TIMEOUT: Duration = Duration::from_secs(20);

/// A Prometheus read through its query API only, and through remote read.
fn both_ways(url: &str) -> (UnitSource, UnitSource) {
    let query_api = UnitSource {
        url: url.to_owned(),
        auth: Auth::None,
        timeout: TIMEOUT,
        max_answer_bytes: 1 << 30,
        remote_read: false,
    };
    let remote = UnitSource {
        remote_read: true,
        ..query_api.clone()
    };
    (query_api, remote)
}

/// A series as compared: its name, labels and samples (values by their bits).
type Compared = (String, Vec<(String, String)>, Vec<(i64, u64)>);

/// Both reads' series, the same names and labels, each with the same samples (values by their
/// bits, any NaN as one); a difference is named by its series and first sample.
fn assert_same(
    chunks: Vec<slicemeter::collector::import::prometheus::RawSeries>,
    json: Vec<slicemeter::collector::import::prometheus::RawSeries>,
    what: &str,
) {
    let (chunks, json) = (sorted(chunks), sorted(json));
    let names =
        |s: &[Compared]| -> Vec<_> { s.iter().map(|(n, l, _)| (n.clone(), l.clone())).collect() };
    assert_eq!(names(&chunks), names(&json), "{what}");
    for ((_, labels, a), (_, _, b)) in chunks.iter().zip(&json) {
        let first = a.iter().zip(b).position(|(x, y)| x != y);
        assert!(
            a.len() == b.len() && first.is_none(),
            "{what}, {labels:?}: {} samples read by remote read, {} by the query API; first apart: {:?}",
            a.len(),
            b.len(),
            first.map(|i| (a[i], b[i])).or_else(|| {
                let n = a.len().min(b.len());
                Some((*a.get(n).or(a.last())?, *b.get(n).or(b.last())?))
            })
        );
    }
}

/// `series` with samples by their labels, each sample's value by its bits (any NaN as one). The
/// query API names a series whose samples all fell outside the range (cut here); remote read does
/// not.
fn sorted(mut series: Vec<slicemeter::collector::import::prometheus::RawSeries>) -> Vec<Compared> {
    series.retain(|s| !s.samples.is_empty());
    series.sort_by(|a, b| a.labels.cmp(&b.labels));
    series
        .into_iter()
        .map(|s| {
            // Any NaN as one (Prometheus stores its own NaN's bits; its JSON says "NaN").
            let bits = |v: f64| if v.is_nan() { f64::NAN } else { v }.to_bits();
            let samples = s.samples.iter().map(|(t, v)| (*t, bits(*v))).collect();
            (s.name, s.labels, samples)
        })
        .collect()
}

#[tokio::test]
async fn remote_read_gives_the_query_apis_samples_and_increases() {
    let dir = tempfile::tempdir().unwrap();
    let prometheus = start_labelled_prometheus(dir.path(), &counters(), &[("replica", "a")]).await;
    let client = Prometheus::new(&prometheus.url, Auth::None, TIMEOUT, 1 << 30).unwrap();
    let external = client.external_labels().await.expect("its config");
    assert_eq!(external, [("replica".to_owned(), "a".to_owned())]);
    let (a, b) = (
        at(0).timestamp_millis() - 600_000,
        at(7).timestamp_millis() + 1,
    );
    for selector in [
        "vllm:generation_tokens_total",
        r#"vllm:generation_tokens_total{pod=~"re.*|nan", namespace!="other"}"#,
    ] {
        let matchers = slicemeter::units::promql::matchers(selector).unwrap();
        let chunks = client
            .read_chunks(&matchers, &external, a, b)
            .await
            .unwrap()
            .expect("Prometheus answers remote read");
        let json = client.raw(selector, a, b).await.unwrap();
        assert!(!json.is_empty() && json.iter().all(|s| !s.samples.is_empty()));
        assert_same(chunks, json, selector);
    }
    // The samples cut to the range as the query API cuts them: the ends inside a chunk.
    let matchers = slicemeter::units::promql::matchers("vllm:generation_tokens_total").unwrap();
    let (a, b) = (
        at(2).timestamp_millis() + 1,
        at(2).timestamp_millis() + 3_600_000,
    );
    let chunks = client
        .read_chunks(&matchers, &external, a, b)
        .await
        .unwrap()
        .unwrap();
    let json = client
        .raw("vllm:generation_tokens_total", a, b)
        .await
        .unwrap();
    assert_same(chunks, json, "02:00:00.001 to 03:00");

    // The unit cost's increases through remote read are the query API's raw read's, in one read
    // and an hour at a time.
    let (query_api, remote) = both_ways(&prometheus.url);
    let def = slicemeter::units::presets().remove(0);
    assert_eq!(def.expression, "vllm:generation_tokens_total");
    let (from, to) = (at(1), at(7));
    let raw = service::raw_increases(&query_api, &def, from, to, None)
        .await
        .unwrap();
    let read = service::increases(&remote, &def, from, to, None)
        .await
        .unwrap();
    assert_eq!(read.hours, raw.hours);
    assert_eq!(read.resets, raw.resets);
    assert_eq!(read.last, raw.last);
    let mut hours = BTreeMap::new();
    let mut stood: Option<std::collections::HashMap<_, _>> = None;
    for h in 1..7 {
        let inc = service::increases(&remote, &def, at(h), at(h + 1), stood.as_ref())
            .await
            .unwrap();
        hours.extend(inc.hours);
        stood.get_or_insert_default().extend(inc.last);
    }
    assert_eq!(hours, raw.hours);
    assert_eq!(by_pod(&raw.hours)["reset"][1], (2, 450.0));

    // A server that does not answer remote read (nor says its labels) is read through the query
    // API: the same increases.
    let elsewhere = Prometheus::new(
        &format!("{}/nothing", prometheus.url),
        Auth::None,
        Duration::from_secs(20),
        1 << 30,
    )
    .unwrap();
    assert_eq!(elsewhere.external_labels().await, None);
    assert!(
        elsewhere
            .read_chunks(&matchers, &[], a, b)
            .await
            .unwrap()
            .is_none()
    );
}

/// The page a live vLLM serves at its `n`th scrape (from 0): pod `stays` restarts at the 8th; pod
/// `goes` is on the first 6 pages only, then back from the 11th, from 0 (a new pod of that name).
fn live_page(n: u64) -> String {
    let mut page = String::from("# TYPE vllm:generation_tokens_total counter\n");
    let stays = if n < 8 { 100 * n } else { 7 * (n - 7) };
    let mut line = |pod: &str, v: u64| {
        page.push_str(&format!(
            "vllm:generation_tokens_total{{model_name=\"A\",namespace=\"ns\",pod=\"{pod}\"}} {v}\n"
        ))
    };
    line("stays", stays);
    if n < 6 {
        line("goes", 50 * n);
    } else if n >= 11 {
        line("goes", 3 * (n - 11));
    }
    page
}

/// Live-scraped counters, as a fleet's Prometheus holds them: in its head block (the chunk still
/// being written among them), with the staleness markers it writes when a series leaves a page.
/// Remote read gives the query API's samples (the markers left out, as the query API hides them),
/// and the same increases, a reset and a series that left and came back counted as the query API's
/// raw read counts them.
#[tokio::test(flavor = "multi_thread")]
async fn remote_read_of_live_scrapes_leaves_out_the_staleness_markers_as_the_query_api_does() {
    let scrapes = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let page =
        axum::Router::new().route(
            "/metrics",
            axum::routing::get({
                let scrapes = scrapes.clone();
                move || async move {
                    live_page(scrapes.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, page).await });
    let started = Utc::now();
    let dir = tempfile::tempdir().unwrap();
    let prometheus = tokio::task::spawn_blocking({
        let dir = dir.path().to_owned();
        let target = slicemeter::sim::prometheus::ScrapeTarget {
            job: "vllm".into(),
            address,
            path: "/metrics".into(),
        };
        move || {
            slicemeter::sim::prometheus::LocalPrometheus::start(
                &dir,
                &[target],
                Duration::from_secs(1),
            )
        }
    })
    .await
    .unwrap()
    .expect("Debian's prometheus package (the tests need it; .ci/run installs it)");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while scrapes.load(std::sync::atomic::Ordering::SeqCst) < 16 {
        assert!(
            std::time::Instant::now() < deadline,
            "Prometheus scraped the page {} times in a minute",
            scrapes.load(std::sync::atomic::Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Written to the head once the next scrape is appended.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let client = Prometheus::new(&prometheus.url, Auth::None, TIMEOUT, 1 << 30).unwrap();
    let external = client.external_labels().await.expect("its config");
    let (a, b) = (
        started.timestamp_millis() - 600_000,
        Utc::now().timestamp_millis() + 1,
    );
    let selector = "vllm:generation_tokens_total";
    let matchers = slicemeter::units::promql::matchers(selector).unwrap();
    let chunks = client
        .read_chunks(&matchers, &external, a, b)
        .await
        .unwrap()
        .expect("Prometheus answers remote read of its head");
    assert!(
        chunks
            .iter()
            .flat_map(|s| &s.samples)
            .all(|(_, v)| v.is_finite()),
        "remote read gave a staleness marker as a sample"
    );
    let json = client.raw(selector, a, b).await.unwrap();
    // Pod `goes` left the page and came back: a gap of over a scrape between its 6th and its
    // 11th page, over which Prometheus wrote a staleness marker (an instant query inside the gap,
    // whose 5-minute look-back would otherwise find its last sample, finds nothing).
    let goes = json
        .iter()
        .find(|s| s.labels.iter().any(|(k, v)| k == "pod" && v == "goes"))
        .expect("pod goes");
    let gap = goes
        .samples
        .windows(2)
        .find(|w| w[1].0 - w[0].0 > 2_500)
        .expect("pod goes' gap");
    let inside = gap[0].0 + 1_500;
    let instant = client
        .query_range(
            r#"vllm:generation_tokens_total{pod="goes"}"#,
            inside,
            inside,
            1_000,
        )
        .await
        .unwrap();
    assert!(instant.is_empty(), "no staleness marker: {instant:?}");
    assert_same(chunks, json, "live scrapes");

    let (query_api, remote) = both_ways(&prometheus.url);
    let def = slicemeter::units::presets().remove(0);
    let to = DateTime::from_timestamp_millis(b - 1).unwrap();
    let raw = service::raw_increases(&query_api, &def, started, to, None)
        .await
        .unwrap();
    let read = service::increases(&remote, &def, started, to, None)
        .await
        .unwrap();
    assert_eq!(read.hours, raw.hours);
    assert_eq!(read.last, raw.last);
    // The restart (pod stays) and pod goes' return from 0, each a reset counted once.
    assert_eq!(raw.resets, 2);
    assert_eq!(read.resets, 2);
    // What the pages add up to: stays 0 → 700, restart, 7 a page after; goes 0 → 250, back from
    // 0, 3 a page after.
    let total = |pod: &str| -> f64 {
        raw.hours
            .iter()
            .filter(|((_, k), _)| k.join.as_deref() == Some(pod))
            .map(|(_, v)| v)
            .sum()
    };
    let n = scrapes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(total("stays") >= 700.0 + 7.0 * 8.0 && total("stays") <= 700.0 + 7.0 * (n - 7) as f64);
    assert!(total("goes") >= 250.0 + 3.0 * 4.0 && total("goes") <= 250.0 + 3.0 * (n - 11) as f64);
}
