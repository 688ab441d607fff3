//! slicemeter: chargeback for fractional GPUs. Bills each team for the physical share of the card it
//! blocks (MIG instances, MPS shares, time-sliced replicas, vGPU fractions, whole GPUs).

/// Roles, API tokens and principals.
pub mod auth;
/// Benchmarks that print figures (`slicemeter bench`).
pub mod bench;
/// Rate cards, pricing, monthly statements and invoices.
pub mod billing;
/// The node collector: sources, integrator, shipper.
pub mod collector;
/// PostgreSQL: pool, migrations, partitions, repositories.
pub mod db;
/// The zero-configuration main job (`slicemeter demo`).
pub mod demo;
/// Pure domain types: slices, shares, the ingest contract, teams, time, MIG tables.
pub mod domain;
/// The HTTP API, its auth extractor and error envelope.
pub mod http;
/// Validation and storage of collector batches.
pub mod ingest;
/// A private PostgreSQL cluster for `demo` and the tests.
pub mod pgcluster;
/// Reports read from the hourly rollups.
pub mod reports;
/// `serve`: the server process.
pub mod server;
/// The deterministic simulated fleet.
pub mod sim;
/// Fast-forward generation of simulated batches.
pub mod simulate;
