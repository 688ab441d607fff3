//! The simulator's memory, measured by a counting allocator (this test binary's own, so nothing
//! else runs beside it): generating for twice the GPUs takes at most about twice the memory, and
//! more days take no more memory than one (issue 16). `slicemeter simulate` prints the peak
//! resident memory of a real run; `bench scale` records it at 10,000 GPUs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use slicemeter::collector::Cadence;
use slicemeter::sim::SimFleet;
use slicemeter::sim::generate::generate;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout is passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak bytes above what was live before, while making a fleet of `gpus` and generating `days` of
/// its batches (hourly windows of 5-minute samples, daily batches), each batch written and dropped.
fn peak_bytes(gpus: usize, days: i64) -> (usize, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let from: DateTime<Utc> = "2026-10-01T00:00:00Z".parse().unwrap();
    let cadence = Cadence {
        sample_interval: StdDuration::from_secs(300),
        window: StdDuration::from_secs(3600),
        batch_period: StdDuration::from_secs(86_400),
    };
    let fleet = SimFleet::generate(7, gpus);
    let mut windows = 0;
    generate(
        &fleet,
        from,
        from + Duration::days(days),
        cadence,
        |node_day| {
            for b in node_day {
                windows += b.windows.len();
                serde_json::to_writer(std::io::sink(), &b).unwrap();
            }
            true
        },
    )
    .unwrap();
    drop(fleet);
    (PEAK.load(Ordering::Relaxed) - before, windows)
}

#[test]
fn memory_grows_with_the_fleet_at_most_linearly_and_not_with_the_days() {
    let (n, n_windows) = peak_bytes(192, 1);
    let (two_n, two_n_windows) = peak_bytes(384, 1);
    let (n_three_days, three_days_windows) = peak_bytes(192, 3);
    println!(
        "peak: {n} B for 192 GPUs x 1 day, {two_n} B for 384 x 1 day ({:.2}x), {n_three_days} B for 192 x 3 days ({:.2}x)",
        two_n as f64 / n as f64,
        n_three_days as f64 / n as f64
    );
    assert!(two_n_windows > n_windows && three_days_windows > 2 * n_windows);
    assert!(
        two_n as f64 <= 2.2 * n as f64,
        "twice the GPUs took {two_n} B against {n} B"
    );
    assert!(
        n_three_days as f64 <= 1.25 * n as f64,
        "three days took {n_three_days} B against {n} B for one"
    );
}
