//! The month rollup (`usage_month`, migration 0032): the day rollup summed per month, team, slice
//! and consumer over a month's closed days, so that a team's month by workload (the team page's
//! table and its cost over time) reads a row per slice and consumer the team held instead of every
//! day row of the fleet's month (`reports::store::usage_sums` reads it for a month bucket). Beside
//! it, each build of the month (`usage_month_build`, migration 0034) keeps the same days per team
//! and slice with their days as arrays (`usage_month_slice`, 0033), each GPU's days
//! (`usage_month_gpu`) and the presence per model and day (`usage_month_model_day`): the rows of a
//! month's books before they are named and priced. An invoice run of a month the rollup covers
//! whole writes the books' sums from them and names the build for their days, instead of gathering
//! 2.1 million day rows at 10,000 GPUs (`billing::store::write_books`); a build lives as long as a
//! book names it, and the builder sweeps the others ([`sweep_builds`]).
//!
//! Ingest does not write it. The background step that summarises closed days (`plan::days`) then
//! builds each month's rollup ([`build_due`]) over the month's first days that are summarised and
//! not stale, up to the first that is not (`through`), recording when each of them was summarised
//! (`seen`). A write to a closed day marks it stale and it is summarised again, so a rollup whose
//! days' summaries no longer match what it saw is not read (its month is read from the day rollup)
//! until it is built again (`month_rollups_valid`, one rule for every reader).

mod cover;
mod store;

pub use store::{Built, build_due, build_month, months_due, sweep_builds};

/// How many months a round builds, the newest first.
pub const MONTHS_PER_ROUND: usize = 2;
