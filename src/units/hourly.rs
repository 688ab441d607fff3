//! A counter's hourly increases read server-side, exact: instead of every raw sample, one point per
//! series and hour of three functions of the hour's window `R` (`expr[1h]` for a selector,
//! `(expr)[1h:30s]` otherwise), at a step of an hour: `last_over_time(R)`, `min_over_time(R)` where
//! `resets(R) == 0`, and `count_over_time(R)` made NaN by any value that is not finite. An hour
//! whose values rose steadily from what the series last stood at (`prev`) has the increase
//! `last - prev`, what `count` adds up sample by sample (exactly so for integer counts: tokens,
//! inferences). Every other hour (a reset, a value that is not a finite number at least 0, the one
//! case Prometheus 2's closed window leaves open: a single value equal to `prev`) is read raw, with
//! the hours next to it, and counted by `count`'s rule from `prev`.
//!
//! Prometheus 2 closes a window on both ends (`[t-1h, t]`), 3 opens it on the left. The only sample
//! the closed window adds is one exactly on the hour before, the previous hour's last: it is `prev`
//! itself (if valid), which changes neither the steady rise nor `last - prev`; so both read alike.
//! A series' first hour (no `prev`) rose steadily from its first sample, the window's minimum.
//!
//! Where each series stands at the start is read from the look-back before it, or given: where a
//! count of the hours before ended (`units::counts`, a day at a time). Where each series seen stands
//! at the end is returned with the increases (`Increases::last`), so that counting on from there
//! (and from where the others stood before) gives what one read of both spans gives.

use std::collections::HashMap;
use std::time::Instant;

use futures_util::{StreamExt, TryStreamExt, stream};

use super::count::{self, Increases, Labels, SeriesId, UnitKey};
use crate::collector::import::prometheus::{Prometheus, QueryError, RawSeries};

const HOUR_MS: i64 = 3_600_000;
/// Raw reads of irregular hours at once.
const PARALLEL_READS: usize = 8;
/// The longest span of hours whose irregular runs, of any series, one query reads.
const SHARED_READ_HOURS: i64 = 6;

/// The labels of a series, its name aside.
type Series = Vec<(String, String)>;

/// A series' three points at one hour.
#[derive(Debug, Default, Clone, Copy)]
struct Point {
    last: Option<f64>,
    /// The window's minimum, when it saw no reset.
    min: Option<f64>,
    /// Its samples; NaN when one is not finite.
    count: Option<f64>,
}

/// Where a series stands before an hour.
#[derive(Debug, Clone, Copy)]
enum Prev {
    /// Known: `None` before its first valid sample.
    Known(Option<f64>),
    /// Only a raw read can say (the last value was not valid).
    Unknown,
}

/// What a steady hour adds (`None`: a count of nothing) and where it leaves the series; `None`
/// when the hour must be read raw.
fn steady(p: Point, prev: Option<f64>) -> Option<(Option<f64>, f64)> {
    let (last, min, n) = (p.last?, p.min?, p.count?);
    if !(n.is_finite() && n >= 1.0 && last.is_finite() && min.is_finite()) {
        return None;
    }
    match prev {
        Some(prev) if min >= prev => {
            // One value equal to `prev`: the hour's own sample, or (a closed window) only the
            // previous hour's last: a raw read tells.
            if n < 2.0 && last == prev {
                return None;
            }
            Some((Some(last - prev), last))
        }
        Some(_) => None,
        // The first valid sample starts the count (none of the previous hour can be in the window:
        // it would have been `prev`, or invalid and the window's minimum or count would say so).
        None if min >= 0.0 => Some(((n >= 2.0).then_some(last - min), last)),
        None => None,
    }
}

/// Hours `[first, last]` (evaluation indexes) of one series to read raw, from `seed`.
#[derive(Debug, Clone)]
struct Raw {
    series: Series,
    first: i64,
    last: i64,
    seed: Option<f64>,
    /// The series' last hour with a point is the run's last: where the series stands at the end.
    ends: bool,
}

/// Where the series stand at the start of the hours counted.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// Each series' last valid sample in this many milliseconds before the start.
    LookBack(i64),
    /// Where a count of the hours before left them ([`Increases::last`]).
    Stood(&'a HashMap<SeriesId, f64>),
}

/// Reads `expr` (`selector`: a plain selector) in `[a, b)` as today's raw read does.
async fn read(
    client: &Prometheus,
    expr: &str,
    selector: bool,
    step_ms: i64,
    a: i64,
    b: i64,
) -> Result<Vec<RawSeries>, QueryError> {
    if selector {
        client.raw(expr, a, b).await
    } else {
        client.subquery(expr, step_ms, a, b).await
    }
}

/// `selector` narrowed to the series with `labels` (and any with more labels, told apart after).
fn narrowed(selector: &str, labels: &Series) -> String {
    let matchers: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
        .collect();
    let matchers = matchers.join(",");
    let e = selector.trim();
    match e.find('{') {
        None => format!("{e}{{{matchers}}}"),
        Some(i) => {
            let inner = e[i + 1..e.len() - 1].trim();
            if inner.is_empty() {
                format!("{}{{{matchers}}}", &e[..i])
            } else if inner.ends_with(',') {
                format!("{}{{{inner}{matchers}}}", &e[..i])
            } else {
                format!("{}{{{inner},{matchers}}}", &e[..i])
            }
        }
    }
}

/// Every hour's increase of `expr` over `[from_ms, to_ms)` (both on the hour), or `None` where the
/// server cannot answer the functions (a selector matching series of several names): read raw then.
// long: the three reads, the walk through each series' hours and the raw reads it asks for, kept
// together so that the rule each hour is counted by reads in one place
#[allow(clippy::too_many_arguments)]
pub async fn increases(
    client: &Prometheus,
    expr: &str,
    selector: bool,
    step_ms: i64,
    start: Start<'_>,
    from_ms: i64,
    to_ms: i64,
    labels: &Labels<'_>,
) -> Result<Option<Increases>, QueryError> {
    let started = Instant::now();
    // Where each series stands at `from`: where the hours before left it, or its last valid sample
    // in the look-back. A function's answer names no metric: series are told apart by their labels.
    let mut stands: HashMap<Series, Option<f64>> = HashMap::new();
    match start {
        Start::Stood(stood) => {
            for ((_, series), v) in stood {
                stands.insert(series.clone(), Some(*v));
            }
        }
        Start::LookBack(look_back_ms) => {
            let mut ignored = 0;
            for s in read(
                client,
                expr,
                selector,
                step_ms,
                from_ms - look_back_ms,
                from_ms + 1,
            )
            .await?
            {
                let at = count::count_samples(&s.samples, None, i64::MAX, &mut ignored, |_, _| {});
                stands.insert(s.labels, at);
            }
        }
    }
    // Where each series seen (in the look-back, or in the hours) stands at `to`.
    let mut ends: HashMap<Series, Option<f64>> = match start {
        Start::LookBack(_) => stands.clone(),
        Start::Stood(_) => HashMap::new(),
    };
    let window = if selector {
        format!("{expr}[1h]")
    } else {
        format!("({expr})[1h:{step_ms}ms]")
    };
    let queries = [
        format!("last_over_time({window})"),
        format!("min_over_time({window}) and resets({window}) == 0"),
        format!("count_over_time({window}) + 0 * sum_over_time({window})"),
    ];
    // Evaluation k (1..=hours) closes the hour starting at from + (k - 1) hours.
    let hours = (to_ms - from_ms) / HOUR_MS;
    let mut points: HashMap<Series, Vec<(i64, Point)>> = HashMap::new();
    // A day of points a query (Prometheus reads every sample of the range at once: a month in one
    // query takes it many times as long), each day's three at once; halved if still too large.
    let mut todo: Vec<(i64, i64)> = (0..)
        .map(|d| (1 + d * 24, ((d + 1) * 24).min(hours)))
        .take_while(|(k0, _)| *k0 <= hours)
        .collect();
    todo.reverse();
    while let Some((k0, k1)) = todo.pop() {
        if k0 > k1 {
            continue;
        }
        let (start, end) = (from_ms + k0 * HOUR_MS, from_ms + k1 * HOUR_MS);
        let answers = futures_util::future::join_all(
            queries
                .iter()
                .map(|q| client.query_range(q, start, end, HOUR_MS)),
        )
        .await;
        let mut got = Vec::with_capacity(3);
        let mut split = false;
        for a in answers {
            match a {
                Ok(series) => got.push(series),
                Err(e) if e.too_large() && k1 > k0 => split = true,
                Err(e) if e.transient || e.too_large() => return Err(e),
                // Prometheus refuses the functions (a range of series of several names).
                Err(_) => return Ok(None),
            }
        }
        if split {
            let mid = (k0 + k1) / 2;
            todo.push((mid + 1, k1));
            todo.push((k0, mid));
            continue;
        }
        for (which, series) in got.into_iter().enumerate() {
            for s in series {
                let at = points.entry(s.labels).or_default();
                for (t, v) in s.samples {
                    let k = (t - from_ms).div_euclid(HOUR_MS);
                    if at.last().is_none_or(|(kk, _)| *kk != k) {
                        at.push((k, Point::default()));
                    }
                    let p = &mut at.last_mut().expect("a point at k").1;
                    match which {
                        0 => p.last = Some(v),
                        1 => p.min = Some(v),
                        _ => p.count = Some(v),
                    }
                }
            }
        }
    }
    let functions = started.elapsed();
    let mut inc = Increases::default();
    let mut raw: Vec<Raw> = Vec::new();
    for (series, mut at) in points {
        // Each query's points in time order, merged.
        at.sort_by_key(|(k, _)| *k);
        let mut merged: Vec<(i64, Point)> = Vec::with_capacity(at.len());
        for (k, p) in at {
            match merged.last_mut() {
                Some((kk, m)) if *kk == k => {
                    m.last = m.last.or(p.last);
                    m.min = m.min.or(p.min);
                    m.count = m.count.or(p.count);
                }
                _ => merged.push((k, p)),
            }
        }
        let key = UnitKey::of(&series, labels);
        let mut prev = Prev::Known(stands.get(&series).copied().flatten());
        let mut open: Option<Raw> = None;
        for (k, p) in merged {
            let hour = count::hour_of(from_ms + k * HOUR_MS);
            let read = match prev {
                Prev::Known(before) => steady(p, before),
                Prev::Unknown => None,
            };
            match read {
                Some((added, last)) => {
                    raw.extend(open.take());
                    if let Some(v) = added {
                        *inc.hours.entry((hour, key.clone())).or_default() += v;
                    }
                    prev = Prev::Known(Some(last));
                }
                None => {
                    match &mut open {
                        Some(r) => r.last = k,
                        None => {
                            let Prev::Known(seed) = prev else {
                                unreachable!("an unknown start is inside a raw read")
                            };
                            open = Some(Raw {
                                series: series.clone(),
                                first: k,
                                last: k,
                                seed,
                                ends: false,
                            });
                        }
                    }
                    prev = match p.last {
                        Some(v) if v.is_finite() && v >= 0.0 => Prev::Known(Some(v)),
                        _ => Prev::Unknown,
                    };
                }
            }
        }
        match (&mut open, prev) {
            // Its raw read says where it ends (where the run started, if it reads nothing).
            (Some(r), _) => {
                r.ends = true;
                ends.insert(series, r.seed);
            }
            (None, Prev::Known(at)) => {
                ends.insert(series, at);
            }
            (None, Prev::Unknown) => unreachable!("an unknown value is inside a raw read"),
        }
        raw.extend(open);
    }
    // Each Prometheus query costs a fixed time (its index and blocks looked up) besides its samples:
    // runs within a few hours of each other are read by one query of the whole expression, its
    // series told apart by their labels (restarts across a fleet fall in the same hours), each run
    // counting only its own hours' samples; a run alone, or a long one, is read by itself, and so is
    // each run of a shared read whose answer is too large.
    let runs = raw.len();
    raw.sort_by_key(|r| (r.first, r.last));
    let mut groups: Vec<Vec<Raw>> = Vec::new();
    let mut span = (0, 0);
    for r in raw {
        match groups.last_mut() {
            Some(g) if r.last.max(span.1) - span.0 < SHARED_READ_HOURS => {
                span.1 = span.1.max(r.last);
                g.push(r);
            }
            _ => {
                span = (r.first, r.last);
                groups.push(vec![r]);
            }
        }
    }
    let reads = groups.len();
    // Samples in (start of the first hour, end of the last].
    let bounds =
        |first: i64, last: i64| (from_ms + (first - 1) * HOUR_MS, from_ms + last * HOUR_MS);
    let read_raw = |rs: Vec<Raw>| async move {
        let first = rs.iter().map(|r| r.first).min().unwrap_or_default();
        let last = rs.iter().map(|r| r.last).max().unwrap_or_default();
        let (a, b) = bounds(first, last);
        let got = match &rs[..] {
            [one] if selector => {
                read(
                    client,
                    &narrowed(expr, &one.series),
                    true,
                    step_ms,
                    a + 1,
                    b + 1,
                )
                .await?
            }
            _ => match read(client, expr, selector, step_ms, a + 1, b + 1).await {
                Err(e) if e.too_large() && selector => {
                    let mut got = Vec::new();
                    for r in &rs {
                        let (a, b) = bounds(r.first, r.last);
                        let e = narrowed(expr, &r.series);
                        got.extend(read(client, &e, true, step_ms, a + 1, b + 1).await?);
                    }
                    got
                }
                got => got?,
            },
        };
        Ok::<_, QueryError>((rs, got))
    };
    let mut answers =
        stream::iter(groups.into_iter().map(read_raw)).buffer_unordered(PARALLEL_READS);
    while let Some((rs, got)) = answers.try_next().await? {
        let mut wanted: HashMap<&Series, Vec<&Raw>> = HashMap::new();
        for r in &rs {
            wanted.entry(&r.series).or_default().push(r);
        }
        for s in got {
            let Some(runs) = wanted.get(&s.labels) else {
                continue;
            };
            for r in runs {
                let (a, b) = bounds(r.first, r.last);
                // The run's own samples only: those before it are counted by `prev` (its seed).
                let i = s.samples.partition_point(|(t, _)| *t <= a);
                let j = s.samples.partition_point(|(t, _)| *t <= b);
                let key = UnitKey::of(&r.series, labels);
                let hours = &mut inc.hours;
                let at_end =
                    count::count_samples(&s.samples[i..j], r.seed, a, &mut inc.resets, |at, d| {
                        *hours.entry((at, key.clone())).or_default() += d;
                    });
                if r.ends {
                    ends.insert(r.series.clone(), at_end);
                }
            }
        }
    }
    inc.last = ends
        .into_iter()
        .filter_map(|(series, at)| Some(((String::new(), series), at?)))
        .collect();
    tracing::debug!(
        functions_s = functions.as_secs_f64(),
        runs,
        reads,
        raw_s = started.elapsed().as_secs_f64() - functions.as_secs_f64(),
        "Read a counter's hours server-side, the irregular ones raw."
    );
    Ok(Some(inc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(last: f64, min: Option<f64>, count: f64) -> Point {
        Point {
            last: Some(last),
            min,
            count: Some(count),
        }
    }

    #[test]
    fn a_steady_hour_is_last_minus_prev_and_anything_else_is_read_raw() {
        // 100 → 130, 160: 60 from 100.
        assert_eq!(
            steady(point(160.0, Some(130.0), 2.0), Some(100.0)),
            Some((Some(60.0), 160.0))
        );
        // A reset (no minimum), a value below prev, a NaN (count NaN): raw.
        assert_eq!(steady(point(160.0, None, 2.0), Some(100.0)), None);
        assert_eq!(steady(point(160.0, Some(90.0), 2.0), Some(100.0)), None);
        assert_eq!(
            steady(point(160.0, Some(130.0), f64::NAN), Some(100.0)),
            None
        );
        // One value equal to prev: its own sample or a closed window's previous one: raw.
        assert_eq!(steady(point(100.0, Some(100.0), 1.0), Some(100.0)), None);
        // A first hour: from its first sample (the minimum); one sample counts nothing.
        assert_eq!(
            steady(point(50.0, Some(20.0), 3.0), None),
            Some((Some(30.0), 50.0))
        );
        assert_eq!(
            steady(point(20.0, Some(20.0), 1.0), None),
            Some((None, 20.0))
        );
        assert_eq!(steady(point(20.0, Some(-1.0), 3.0), None), None);
    }

    #[test]
    fn a_selector_is_narrowed_to_one_series() {
        let l = vec![("pod".to_owned(), "a\"b".to_owned())];
        assert_eq!(narrowed("m", &l), r#"m{pod="a\"b"}"#);
        assert_eq!(narrowed("m{}", &l), r#"m{pod="a\"b"}"#);
        assert_eq!(narrowed("m{x=\"1\"}", &l), r#"m{x="1",pod="a\"b"}"#);
        assert_eq!(
            narrowed("{__name__=\"m\",}", &l),
            r#"{__name__="m",pod="a\"b"}"#
        );
    }
}
