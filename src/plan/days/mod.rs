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

use std::time::Duration;

mod store;

pub use store::{Lag, Round, lag, summarise_day, summarise_due};

/// How long after its end a day is left to the writes in flight before it is summarised.
pub const SETTLE: Duration = Duration::from_secs(15 * 60);

/// How often the background step looks for days to summarise, and how many it summarises a round
/// (the newest first: right-sizing reads the last days).
pub const EVERY: Duration = Duration::from_secs(30);
pub const DAYS_PER_ROUND: i64 = 4;
