//! Right-sizing's evidence of closed UTC days, summarised per day and evidence group
//! (`evidence_day`, migration 0029) by a bounded background step, so that a range's evidence is a
//! read of its days' summaries and of the hours left (today's, a part day, a day written since),
//! not a scan and sort of all its hourly rows.
//!
//! A day is summarised once it is closed and settled ([`SETTLE`] past its end, so that batches in
//! flight at midnight have landed); a later write to it marks it stale (`ingest::store::
//! mark_closed_days`), and it is read from the hourly rollups until summarised again. The writer
//! holds the day's advisory lock shared, the summariser exclusively (without waiting: a day busy
//! with a write is left to the next round), so a summary never misses a write that was not marked.
//!
//! The same step then keeps the windows of days the product reads ([`windows_due`]: the month so
//! far, the month before, right-sizing's days) built from the days' summaries (`evidence_window`,
//! migration 0031): a row per group with the percentiles' largest values, so that a large team's
//! month is a read of a row per workload. A window built from a day summarised again since is not
//! read, and is built again the next round.

use std::time::Duration;

mod store;

pub use store::{
    Lag, Round, Window, build_due_windows, build_window, lag, summarise_day, summarise_due,
    windows_due,
};

/// How long after its end a day is left to the writes in flight before it is summarised.
pub const SETTLE: Duration = Duration::from_secs(15 * 60);

/// How often the background step looks for days to summarise, and how many it summarises a round
/// (the newest first: right-sizing reads the last days).
pub const EVERY: Duration = Duration::from_secs(30);
pub const DAYS_PER_ROUND: i64 = 4;

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::windows_due;

    #[test]
    fn the_windows_due_are_the_months_and_right_sizings_whole_closed_days() {
        let at =
            |m: u32, d: u32, h: u32, min: u32| Utc.with_ymd_and_hms(2026, m, d, h, min, 0).unwrap();
        // Mid-month, mid-day: November whole, December so far, and right-sizing's 14 days from
        // 12:00 on 22 November, whose whole days are the 23rd to the 5th.
        assert_eq!(
            windows_due(at(12, 6, 12, 34)),
            vec![
                (at(11, 1, 0, 0), at(12, 1, 0, 0)),
                (at(11, 23, 0, 0), at(12, 6, 0, 0)),
                (at(12, 1, 0, 0), at(12, 6, 0, 0)),
            ]
        );
        // The first hour of a month: no days of it closed yet; right-sizing's range starts at
        // midnight, so its 14 days are whole.
        assert_eq!(
            windows_due(at(12, 1, 0, 10)),
            vec![
                (at(11, 1, 0, 0), at(12, 1, 0, 0)),
                (at(11, 17, 0, 0), at(12, 1, 0, 0)),
            ]
        );
    }
}
