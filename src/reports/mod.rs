//! Reports: what the fleet held and used, read from the hourly rollups (or an issued period's books):
//! the usage report, the monthly report, the month-end forecast, the fleet's gauges for Prometheus,
//! and each card's ledger. `usage`, `monthly`, `forecast`, `slices`, `gauges` and `ledger` (its
//! `store` and `service` apart) are pure; `store` holds the SQL; `service` reads through it, and
//! `allocation` keeps the fleet page's allocation by day. The finance exports (FOCUS, ERP, OpenCost)
//! are `exports`'.

pub mod allocation;
pub mod forecast;
pub mod gauges;
pub mod ledger;
pub mod month_rollup;
pub mod monthly;
pub mod parallel;
pub mod pod_hours;
pub mod service;
pub mod slices;
pub mod store;
pub mod usage;
