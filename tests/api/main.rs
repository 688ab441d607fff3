//! The API, in-process, against a real PostgreSQL: one test binary, one module per resource.

mod audit;
mod authz;
mod billing;
mod books;
mod browser;
mod cache;
mod collector;
mod exports;
mod faults;
mod fleet;
mod group_commit;
mod hostile;
mod ingest;
mod ingest_props;
mod kubelet;
mod metrics;
mod nvml;
mod openapi;
mod opencost;
mod plans;
mod recommendations;
mod reports;
mod retention;
mod support;
mod teams;
mod tokens;
