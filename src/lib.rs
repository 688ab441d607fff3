//! slicemeter: chargeback for fractional GPUs. Bills each team for the physical share of the card it
//! blocks (MIG instances, MPS shares, time-sliced replicas, vGPU fractions, whole GPUs).
//!
//! Dependencies point one way: `cli -> background, http -> {ingest, plan, alerts, units, exports ->
//! reports -> billing, teams, fleet, auth -> audit} -> db -> domain`; `collector -> domain` (it
//! reaches the server over HTTP only); `sim -> collector` is the simulated fleet behind the
//! collector's `Source` trait; `process` (logs, metrics, signals) stands alone.
//! `tests/architecture.rs` holds the table (docs/architecture.md draws it) and keeps it so.

/// Budget alerts: evaluated by a worker `background` runs, each fired once, delivered with retries.
pub mod alerts;
/// The audit log: what was changed, by whom, recorded with the change.
pub mod audit;
/// API tokens and the dashboard's sessions.
pub mod auth;
/// The work `serve` runs beside the HTTP server: partitions ahead, retention, the alerts worker.
pub mod background;
/// Rate cards, pricing, monthly statements and invoices.
pub mod billing;
/// Budgets per team, their thresholds and channels, and where a month stands against them.
pub mod budgets;
/// The `slicemeter` subcommands, one module each.
pub mod cli;
/// The node collector: sources, integrator, spool, shipper, and the `collect` modes.
pub mod collector;
/// PostgreSQL: pool, migrations, partitions, SQL types, the private cluster.
pub mod db;
/// Pure domain types: slices, shares, the ingest contract, the occupancy window, teams, time.
pub mod domain;
/// The finance exports: FOCUS, the ERP journal, OpenCost's allocation API.
pub mod exports;
/// The fleet as it stands: GPUs, slices, consumers, and which node reports each GPU.
pub mod fleet;
/// The HTTP API, the dashboard and the server.
pub mod http;
/// Validation and storage of collector batches.
pub mod ingest;
/// The consolidation plan: each GPU model's MIG instances packed onto the fewest cards.
pub mod plan;
/// Logs, the Prometheus recorder and shutdown signals, the same in every process.
pub mod process;
/// Reports: usage, the monthly report, FOCUS and ERP exports.
pub mod reports;
/// The deterministic simulated fleet.
pub mod sim;
/// Teams and the namespaces they own.
pub mod teams;
/// Cost per unit of work: unit definitions, counters read from Prometheus, joined with the books.
pub mod units;
