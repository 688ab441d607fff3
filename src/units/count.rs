//! Each hour's increase of a counter, from its raw samples: per series, the difference of each sample
//! from the one before it, added to the hour the later sample falls in (a sample on the hour closes
//! the hour before); a value lower than the one before is a reset (the server restarted), whose
//! increase is the value itself, counted once and never negative. A series' first sample is where
//! its counting starts, as Prometheus' `increase` reads it; a sample before the period only sets
//! where the period's counting starts. Samples are read in chunks: what a series stood at carries
//! from one chunk to the next.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use crate::collector::import::prometheus::RawSeries;

const HOUR_MS: i64 = 3_600_000;

/// Where a series joins a workload: its namespace, its pod's or workload's name, and its model.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitKey {
    pub namespace: Option<String>,
    /// The pod's name, or the workload's, as the definition joins.
    pub join: Option<String>,
    pub model: Option<String>,
}

/// The labels a definition reads.
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    pub namespace: &'a str,
    pub join: &'a str,
    pub model: Option<&'a str>,
}

/// A series: its metric name (empty where the answer names none, as a function's does) and its
/// other labels.
pub type SeriesId = (String, Vec<(String, String)>);

/// Every hour's increase per key, built chunk by chunk.
#[derive(Debug, Default)]
pub struct Increases {
    /// Where each series seen in the hours counted last stood (its last valid value): where
    /// counting the hours after them starts (`units::counts` keeps it with the hours it keeps).
    pub last: HashMap<SeriesId, f64>,
    /// Where the series stood before the hours counted ([`Increases::starting_from`]), those not
    /// seen yet.
    before: HashMap<SeriesId, f64>,
    /// Per (hour start, key): the increase.
    pub hours: BTreeMap<(DateTime<Utc>, UnitKey), f64>,
    /// Resets seen (for the log).
    pub resets: u64,
}

impl UnitKey {
    /// The key of a series with these labels (its name aside).
    pub fn of(series: &[(String, String)], labels: &Labels<'_>) -> UnitKey {
        let get = |l: &str| series.iter().find(|(k, _)| k == l).map(|(_, v)| v.clone());
        UnitKey {
            namespace: get(labels.namespace),
            join: get(labels.join),
            model: labels.model.and_then(get),
        }
    }
}

/// The hour (its start) a sample at `t_ms` counts in: a sample on the hour closes the hour before.
pub fn hour_of(t_ms: i64) -> DateTime<Utc> {
    let hour = (t_ms - 1).div_euclid(HOUR_MS) * HOUR_MS;
    DateTime::from_timestamp_millis(hour).expect("a sample's hour")
}

/// Counts one series' samples from where it stood (`prev`): each sample after `from_ms` adds its
/// increase to its hour through `add`; a value that is not a finite number at least 0 is passed
/// over. Returns where the series stands after them.
pub fn count_samples(
    samples: &[(i64, f64)],
    mut prev: Option<f64>,
    from_ms: i64,
    resets: &mut u64,
    mut add: impl FnMut(DateTime<Utc>, f64),
) -> Option<f64> {
    // The hour of the sample before (its start in milliseconds, and as a time): a series' samples
    // are a minute or so apart, so the hour is worked out again only when it changes.
    let mut hour: Option<(i64, DateTime<Utc>)> = None;
    for (t, v) in samples {
        if !v.is_finite() || *v < 0.0 {
            continue;
        }
        if let Some(p) = prev
            && *t > from_ms
        {
            let delta = if *v >= p {
                *v - p
            } else {
                *resets += 1;
                *v
            };
            let start = (*t - 1).div_euclid(HOUR_MS) * HOUR_MS;
            let at = match hour {
                Some((ms, at)) if ms == start => at,
                _ => {
                    let at = hour_of(*t);
                    hour = Some((start, at));
                    at
                }
            };
            add(at, delta);
        }
        prev = Some(*v);
    }
    prev
}

impl Increases {
    /// Counting that starts where `stood` says each series stood (a count of the hours before
    /// ended there), rather than at each series' first sample.
    pub fn starting_from(stood: HashMap<SeriesId, f64>) -> Increases {
        Increases {
            before: stood,
            ..Increases::default()
        }
    }

    /// Adds a chunk's series; samples at or before `from_ms` only set where counting starts.
    pub fn add(&mut self, series: Vec<RawSeries>, from_ms: i64, labels: &Labels<'_>) {
        for s in series {
            let key = UnitKey::of(&s.labels, labels);
            // Where the last chunk left it, or a count of the hours before: under its name, or
            // under none where that count read it through a function (`hourly`).
            let id = (s.name.clone(), s.labels.clone());
            let prev = self.last.remove(&id).or_else(|| {
                self.before
                    .remove(&id)
                    .or_else(|| self.before.remove(&(String::new(), s.labels.clone())))
            });
            // A series' samples come in time order: each hour's increases are added up here and
            // into the map once an hour, not once a sample.
            let hours = &mut self.hours;
            let mut hour: Option<(DateTime<Utc>, f64)> = None;
            let last =
                count_samples(
                    &s.samples,
                    prev,
                    from_ms,
                    &mut self.resets,
                    |at, d| match &mut hour {
                        Some((h, sum)) if *h == at => *sum += d,
                        _ => {
                            if let Some((h, sum)) = hour.replace((at, d)) {
                                *hours.entry((h, key.clone())).or_default() += sum;
                            }
                        }
                    },
                );
            if let Some((h, sum)) = hour {
                *hours.entry((h, key.clone())).or_default() += sum;
            }
            if let Some(p) = last {
                self.last.insert((s.name, s.labels), p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(pod: &str, samples: &[(i64, f64)]) -> RawSeries {
        RawSeries {
            name: "vllm:generation_tokens_total".into(),
            labels: vec![
                ("model_name".into(), "m".into()),
                ("namespace".into(), "ns".into()),
                ("pod".into(), pod.into()),
            ],
            samples: samples.to_vec(),
        }
    }

    const L: Labels<'static> = Labels {
        namespace: "namespace",
        join: "pod",
        model: Some("model_name"),
    };

    fn hours(i: &Increases) -> Vec<(i64, f64)> {
        i.hours
            .iter()
            .map(|((h, _), v)| (h.timestamp_millis() / HOUR_MS, *v))
            .collect()
    }

    #[test]
    fn a_reset_counts_once_and_never_negative() {
        let mut inc = Increases::default();
        // 0 → 100 → 250 (hour 0), restart: 30 → 80 (hour 1).
        inc.add(
            vec![series(
                "p",
                &[
                    (0, 0.0),
                    (1_800_000, 100.0),
                    (3_600_000, 250.0),
                    (5_400_000, 30.0),
                    (7_200_000, 80.0),
                ],
            )],
            0,
            &L,
        );
        assert_eq!(hours(&inc), vec![(0, 250.0), (1, 80.0)]);
        assert_eq!(inc.resets, 1);
    }

    #[test]
    fn chunks_carry_what_a_series_stood_at_and_samples_before_the_period_count_nothing() {
        let mut inc = Increases::default();
        let from = 3_600_000;
        inc.add(vec![series("p", &[(3_000_000, 40.0)])], from, &L);
        inc.add(vec![series("p", &[(4_000_000, 50.0)])], from, &L);
        inc.add(vec![series("p", &[(8_000_000, 75.0)])], from, &L);
        assert_eq!(hours(&inc), vec![(1, 10.0), (2, 25.0)]);
    }
}
