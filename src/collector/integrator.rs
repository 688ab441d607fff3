//! Samples into occupancy windows. A sample's values hold until the next sample when that comes
//! soon enough ([`Hold`]); after a longer gap they hold a fixed time and the rest is time not
//! observed. Windows sit on a grid of `window` since the Unix
//! epoch; a step that crosses a grid line is split there. Sums are kept in integers (milliseconds,
//! bytes, parts per million), so every window is the exact integral of the step function sampled.

use std::sync::Arc;

use super::source::Reading;
use crate::domain::batch::{ConsumerReport, WindowReport};

/// One consumer's window on one slice: its figures within one grid window, in exact integer units.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerWindow {
    pub slice: usize,
    pub consumer: Arc<ConsumerReport>,
    pub held_ms: u64,
    pub memory_byte_ms: u128,
    pub memory_peak_bytes: u64,
    /// Parts-per-million-milliseconds of SM activity; `None` once any held sample had no figure.
    pub compute_ppm_ms: Option<u128>,
}

/// A closed window of the grid: the part of it that was observed, and each consumer's window in it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedWindow {
    /// Observed start and end, in Unix milliseconds; within one grid window.
    pub start_ms: i64,
    pub end_ms: i64,
    pub windows: Vec<ConsumerWindow>,
}

impl ConsumerWindow {
    /// The window as the ingest contract has it.
    pub fn report(&self, slice_uuid: &str, start_ms: i64, end_ms: i64) -> WindowReport {
        WindowReport {
            slice_uuid: slice_uuid.to_owned(),
            start: chrono::DateTime::from_timestamp_millis(start_ms).expect("in range"),
            end: chrono::DateTime::from_timestamp_millis(end_ms).expect("in range"),
            consumer: (*self.consumer).clone(),
            held_seconds: self.held_ms as f64 / 1e3,
            memory_byte_seconds: self.memory_byte_ms as f64 / 1e3,
            memory_peak_bytes: self.memory_peak_bytes as i64,
            compute_active_seconds: self.compute_ppm_ms.map(|c| c as f64 / 1e9),
        }
    }
}

/// How long one sample's values hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// The next sample continues the last one when it comes at most this long after it.
    pub bridge_ms: i64,
    /// After a longer gap, the last sample holds this long; the rest is not observed.
    pub last_ms: i64,
}

impl Hold {
    /// A sample holds until the next one, at most `ms` later: the collector's own sampler, where a
    /// tick may come late and a sample stands for the time until the next.
    pub fn up_to(ms: i64) -> Hold {
        Hold {
            bridge_ms: ms,
            last_ms: ms,
        }
    }

    /// A scrape of another process's page every `interval_ms`, read as Prometheus reads a series:
    /// held from its first sample to its last plus one interval. A next sample up to half an
    /// interval late still continues it; one later leaves the time after the last interval out.
    pub fn scraped(interval_ms: i64) -> Hold {
        Hold {
            bridge_ms: interval_ms + interval_ms / 2,
            last_ms: interval_ms,
        }
    }

    /// Until when a sample taken at `t0` holds, when the next one is taken at `t`.
    pub fn until(&self, t0: i64, t: i64) -> i64 {
        if t - t0 <= self.bridge_ms {
            t
        } else {
            t0 + self.last_ms
        }
    }
}

pub struct Integrator {
    window_ms: i64,
    hold: Hold,
    last: Option<(i64, Vec<Reading>)>,
    current: Option<ClosedWindow>,
    /// Milliseconds between samples that no sample held (each a gap between two windows).
    unobserved_ms: u64,
}

impl Integrator {
    /// Windows of `window_ms`; a sample holds at most `max_step_ms`.
    pub fn new(window_ms: i64, max_step_ms: i64) -> Integrator {
        Integrator::with_hold(window_ms, Hold::up_to(max_step_ms))
    }

    /// Windows of `window_ms`, samples held as `hold` says.
    pub fn with_hold(window_ms: i64, hold: Hold) -> Integrator {
        assert!(window_ms > 0 && hold.bridge_ms > 0 && hold.last_ms > 0);
        Integrator {
            window_ms,
            hold,
            last: None,
            current: None,
            unobserved_ms: 0,
        }
    }

    /// Takes the samples at `t_ms` and returns the windows that closed.
    pub fn push(&mut self, t_ms: i64, readings: Vec<Reading>) -> Vec<ClosedWindow> {
        let mut closed = Vec::new();
        if let Some((t0, prev)) = self.last.take() {
            let until = self.hold.until(t0, t_ms).min(t_ms);
            self.integrate(t0, until, &prev, &mut closed);
            if until < t_ms {
                // Not observed: the window in progress ends where observation stopped.
                closed.extend(self.current.take());
                self.unobserved_ms += (t_ms - until) as u64;
            }
        }
        self.last = Some((t_ms, readings));
        closed
    }

    /// Milliseconds so far that fell between samples too far apart to hold (a sampler starved of
    /// the CPU, or a suspended process): time the windows leave out, so a gap between periods.
    pub fn unobserved_ms(&self) -> u64 {
        self.unobserved_ms
    }

    /// Lets the last samples hold until `t_ms` (at most as long as a last sample holds) and closes
    /// the open window.
    pub fn flush(&mut self, t_ms: i64) -> Vec<ClosedWindow> {
        let mut closed = Vec::new();
        if let Some((t0, prev)) = self.last.take() {
            let until = t_ms.min(t0 + self.hold.last_ms);
            self.integrate(t0, until, &prev, &mut closed);
        }
        closed.extend(self.current.take());
        closed
    }

    /// Integrates `readings` held over `[from, to)`: a step computed by the caller (the importer
    /// reads Prometheus' samples as steps of one scrape interval). A step that does not start where
    /// the last one ended closes the open window first; the time between is not observed.
    pub fn hold(&mut self, from: i64, to: i64, readings: &[Reading]) -> Vec<ClosedWindow> {
        let mut closed = Vec::new();
        if from < to {
            self.integrate(from, to, readings, &mut closed);
        }
        closed
    }

    /// Closes the open window, if any.
    pub fn close(&mut self) -> Vec<ClosedWindow> {
        self.current.take().into_iter().collect()
    }

    fn integrate(
        &mut self,
        from: i64,
        to: i64,
        readings: &[Reading],
        closed: &mut Vec<ClosedWindow>,
    ) {
        let mut a = from;
        while a < to {
            let grid_end = (a.div_euclid(self.window_ms) + 1) * self.window_ms;
            let b = to.min(grid_end);
            let grid_start = grid_end - self.window_ms;
            if self
                .current
                .as_ref()
                .is_some_and(|w| w.start_ms < grid_start || w.end_ms != a)
            {
                closed.extend(self.current.take());
            }
            let w = self.current.get_or_insert_with(|| ClosedWindow {
                start_ms: a,
                end_ms: a,
                windows: Vec::new(),
            });
            apply(w, readings, (b - a) as u64);
            w.end_ms = b;
            if b == grid_end {
                closed.extend(self.current.take());
            }
            a = b;
        }
    }
}

fn apply(w: &mut ClosedWindow, readings: &[Reading], ms: u64) {
    for r in readings {
        let Some(consumer) = &r.consumer else {
            continue;
        };
        let i = match w.windows.iter().position(|o| {
            o.slice == r.slice && (Arc::ptr_eq(&o.consumer, consumer) || o.consumer == *consumer)
        }) {
            Some(i) => i,
            None => {
                w.windows.push(ConsumerWindow {
                    slice: r.slice,
                    consumer: consumer.clone(),
                    held_ms: 0,
                    memory_byte_ms: 0,
                    memory_peak_bytes: 0,
                    compute_ppm_ms: Some(0),
                });
                w.windows.len() - 1
            }
        };
        let o = &mut w.windows[i];
        o.held_ms += ms;
        o.memory_byte_ms += u128::from(r.memory_used_bytes) * u128::from(ms);
        o.memory_peak_bytes = o.memory_peak_bytes.max(r.memory_used_bytes);
        o.compute_ppm_ms = match (o.compute_ppm_ms, r.compute_active_ppm) {
            (Some(sum), Some(ppm)) => Some(sum + u128::from(ppm) * u128::from(ms)),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer(pod: &str) -> Arc<ConsumerReport> {
        Arc::new(ConsumerReport {
            namespace: Some("nlp".into()),
            pod: Some(pod.into()),
            ..Default::default()
        })
    }

    fn reading(slice: usize, h: Option<&Arc<ConsumerReport>>, mem: u64, ppm: u32) -> Reading {
        Reading {
            slice,
            consumer: h.cloned(),
            memory_used_bytes: mem,
            compute_active_ppm: Some(ppm),
        }
    }

    /// A synthetic stream: irregular sample times, memory and activity that change at every sample,
    /// a slice that changes hands mid-window and a free spell.
    #[test]
    fn window_sums_equal_the_exact_integrals_and_windows_tile_the_sampled_time() {
        let (a, b) = (consumer("a-0"), consumer("b-0"));
        let window = 60_000;
        let mut integrator = Integrator::new(window, 10_000);
        let mut times = Vec::new();
        let mut t = 1_000_000_000_000i64 + 7_250; // not on the grid
        for i in 0..400u64 {
            times.push(t);
            t += 3_000 + (i * 7_919 % 4_000) as i64; // 3 to 7 s apart
        }
        let stream: Vec<(i64, Vec<Reading>)> = times
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let i = i as u64;
                let h = match i % 50 {
                    0..20 => Some(&a),
                    20..35 => Some(&b),
                    _ => None,
                };
                (
                    t,
                    vec![
                        reading(0, h, 1_000_000 + i * 4_096, (i * 37_000 % 1_000_001) as u32),
                        reading(1, Some(&a), 5 << 30, 250_000),
                    ],
                )
            })
            .collect();
        let mut closed = Vec::new();
        for (t, r) in stream.clone() {
            closed.extend(integrator.push(t, r));
        }
        let end = *times.last().unwrap() + 2_000;
        closed.extend(integrator.flush(end));

        // Windows tile [first sample, end) with no overlap and never cross a grid line.
        assert_eq!(closed.first().unwrap().start_ms, times[0]);
        assert_eq!(closed.last().unwrap().end_ms, end);
        for pair in closed.windows(2) {
            assert_eq!(pair[0].end_ms, pair[1].start_ms);
        }
        for w in &closed {
            assert!(w.start_ms < w.end_ms);
            assert_eq!(
                w.start_ms.div_euclid(window),
                (w.end_ms - 1).div_euclid(window)
            );
        }

        // The exact integrals of the step function, computed sample by sample.
        let mut want = std::collections::BTreeMap::<(usize, String), (u64, u128, u128)>::new();
        for (k, (t, readings)) in stream.iter().enumerate() {
            let next = times.get(k + 1).copied().unwrap_or(end);
            let dt = (next - t) as u64;
            for r in readings {
                if let Some(h) = &r.consumer {
                    let e = want.entry((r.slice, h.pod.clone().unwrap())).or_default();
                    e.0 += dt;
                    e.1 += u128::from(r.memory_used_bytes) * u128::from(dt);
                    e.2 += u128::from(r.compute_active_ppm.unwrap()) * u128::from(dt);
                }
            }
        }
        let mut got = std::collections::BTreeMap::<(usize, String), (u64, u128, u128)>::new();
        for w in &closed {
            for o in &w.windows {
                assert!(o.held_ms <= (w.end_ms - w.start_ms) as u64);
                let e = got
                    .entry((o.slice, o.consumer.pod.clone().unwrap()))
                    .or_default();
                e.0 += o.held_ms;
                e.1 += o.memory_byte_ms;
                e.2 += o.compute_ppm_ms.unwrap();
            }
        }
        assert_eq!(got, want);
        assert_eq!(got.len(), 3, "slice 0 by a and b, slice 1 by a");
    }

    #[test]
    fn a_gap_longer_than_the_step_limit_is_not_counted() {
        let a = consumer("a");
        let mut integrator = Integrator::new(60_000, 10_000);
        let mut closed = integrator.push(0, vec![reading(0, Some(&a), 100, 1_000_000)]);
        closed.extend(integrator.push(5_000, vec![reading(0, Some(&a), 100, 1_000_000)]));
        // The collector stalled for 40 s: only 10 s of the last sample count.
        closed.extend(integrator.push(45_000, vec![reading(0, Some(&a), 100, 1_000_000)]));
        closed.extend(integrator.flush(50_000));
        let held: u64 = closed
            .iter()
            .flat_map(|w| &w.windows)
            .map(|o| o.held_ms)
            .sum();
        assert_eq!(held, 5_000 + 10_000 + 5_000);
        assert_eq!(closed.len(), 2, "{closed:?}");
        assert_eq!((closed[0].start_ms, closed[0].end_ms), (0, 15_000));
        assert_eq!((closed[1].start_ms, closed[1].end_ms), (45_000, 50_000));
        assert_eq!(integrator.unobserved_ms(), 30_000, "15 s to 45 s");
    }

    #[test]
    fn unknown_compute_makes_the_window_unknown_and_converts_to_null() {
        let a = consumer("a");
        let mut integrator = Integrator::new(60_000, 10_000);
        let mut r = reading(0, Some(&a), 1 << 30, 0);
        r.compute_active_ppm = None;
        integrator.push(0, vec![r.clone()]);
        let closed = integrator.flush(5_000);
        let o = &closed[0].windows[0];
        assert_eq!(o.compute_ppm_ms, None);
        let w = o.report("MIG-x", 0, 5_000);
        assert_eq!(w.compute_active_seconds, None);
        assert_eq!(w.held_seconds, 5.0);
        assert_eq!(w.memory_byte_seconds, 5.0 * (1u64 << 30) as f64);
    }

    #[test]
    fn samples_on_the_grid_close_each_window_when_its_end_is_reached() {
        let a = consumer("a");
        let mut integrator = Integrator::new(60_000, 10_000);
        let mut closed = Vec::new();
        for t in (0..=120_000).step_by(5_000) {
            closed.extend(integrator.push(t, vec![reading(0, Some(&a), 1, 500_000)]));
        }
        assert_eq!(closed.len(), 2);
        assert_eq!((closed[1].start_ms, closed[1].end_ms), (60_000, 120_000));
        let w = closed[1].windows[0].report("s", 60_000, 120_000);
        assert_eq!(
            (w.held_seconds, w.compute_active_seconds),
            (60.0, Some(30.0))
        );
    }
}
