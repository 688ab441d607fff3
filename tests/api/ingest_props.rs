//! Seeded property tests of the ingest parser and validator, on batches the simulator makes
//! (proptest's failure persistence keeps the seeds of any failure under `proptest-regressions/`):
//! arbitrary bytes never panic, every batch the simulator makes is valid, and a batch broken in one
//! field is refused naming that field.

use std::io::Write;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use slicemeter::collector::{Cadence, Replay};
use slicemeter::domain::batch::Batch;
use slicemeter::ingest::IngestError;
use slicemeter::ingest::decode::decode;
use slicemeter::ingest::validate::{Limits, validate};
use slicemeter::sim::SimFleet;
use slicemeter::sim::source::SimSource;

const LIMIT: usize = 1 << 20;

fn now() -> DateTime<Utc> {
    "2026-11-01T00:00:00Z".parse().unwrap()
}

/// The first batch of a simulated node: an hour of one-minute windows.
fn simulated(seed: u64, gpus: usize, node: usize, hour: u32) -> Batch {
    let fleet = SimFleet::generate(seed, gpus);
    let name = fleet.nodes[node % fleet.nodes.len()].name.clone();
    let cadence = Cadence {
        sample_interval: StdDuration::from_secs(30),
        window: StdDuration::from_secs(60),
        batch_period: StdDuration::from_secs(3600),
    };
    let from: DateTime<Utc> = format!("2026-10-{:02}T{:02}:00:00Z", 1 + hour / 24, hour % 24)
        .parse()
        .unwrap();
    let to = from + chrono::Duration::hours(1);
    let mut replay =
        Replay::new(SimSource::new(&fleet, &name).unwrap(), cadence, from, to).unwrap();
    replay.advance(to).unwrap().remove(0)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

proptest! {
    // A fixed seed: CI runs the same 200 cases every time (PROPTEST_RNG_SEED overrides it to
    // explore further, e.g. `PROPTEST_RNG_SEED=$RANDOM PROPTEST_CASES=5000 cargo test props`).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(200),
        rng_seed: std::env::var("PROPTEST_RNG_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(RngSeed::Fixed(0x5_11ce), RngSeed::Fixed),
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_are_refused_or_decoded_never_a_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        gz in any::<bool>(),
    ) {
        if let Ok(batch) = decode(&bytes, gz, LIMIT) {
            let _ = validate(batch, now(), &Limits::default());
        }
    }

    #[test]
    fn every_simulated_batch_decodes_plain_or_gzipped_and_validates_whole(
        seed in 0u64..1000, gpus in 1usize..24, node in 0usize..4, hour in 0u32..(24 * 30),
        gz in any::<bool>(),
    ) {
        let batch = simulated(seed, gpus, node, hour);
        let json = serde_json::to_vec(&batch).unwrap();
        let body = if gz { gzip(&json) } else { json };
        let decoded = decode(&body, gz, LIMIT).unwrap();
        prop_assert_eq!(&decoded, &batch);
        let valid = validate(decoded, now(), &Limits::default())
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(valid.windows.len(), batch.windows.len());
        prop_assert_eq!(valid.slices.len(), batch.slices.len());
    }

    #[test]
    fn a_batch_broken_in_one_window_field_is_refused_naming_it(
        seed in 0u64..1000, gpus in 1usize..24, pick in any::<prop::sample::Index>(),
        broken in 0usize..5,
    ) {
        let mut batch = simulated(seed, gpus, 0, 12);
        prop_assume!(!batch.windows.is_empty());
        let i = pick.index(batch.windows.len());
        let w = &mut batch.windows[i];
        let field = match broken {
            0 => { w.held_seconds = -1.0; "held_seconds" }
            1 => { w.held_seconds = 61.0; "held_seconds" }
            2 => { w.memory_byte_seconds = -5.0; "memory_byte_seconds" }
            3 => { w.memory_peak_bytes = -1; "memory_peak_bytes" }
            _ => { w.slice_uuid = "GPU-not-in-this-batch".into(); "slice_uuid" }
        };
        let errors = validate(batch, now(), &Limits::default()).unwrap_err();
        let want = format!("windows[{i}].{field}");
        prop_assert!(errors.iter().any(|e| e.field == want), "{} not in {:?}", want, errors);
    }

    #[test]
    fn a_valid_body_with_any_byte_changed_never_panics(
        seed in 0u64..100, at in any::<prop::sample::Index>(), byte in any::<u8>(),
    ) {
        let mut json = serde_json::to_vec(&simulated(seed, 4, 0, 3)).unwrap();
        let i = at.index(json.len());
        json[i] = byte;
        if let Ok(batch) = decode(&json, false, LIMIT) {
            let _ = validate(batch, now(), &Limits::default());
        }
    }
}

#[test]
fn a_body_over_the_limit_is_refused_before_parsing_plain_or_gzipped() {
    let big = vec![b' '; 4096];
    for gz in [false, true] {
        let body = if gz { gzip(&big) } else { big.clone() };
        assert!(matches!(
            decode(&body, gz, 1024),
            Err(IngestError::TooLarge { limit: 1024 })
        ));
    }
}
