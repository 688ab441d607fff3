//! Reports: what the fleet held and used, read from the hourly rollups (or an issued period's books),
//! the monthly report, the finance exports (FOCUS cost data, ERP journal lines) and the fleet's
//! gauges for Prometheus, and each card's ledger. `usage`, `monthly`, `slices`, `focus`, `erp`, `gauges`
//! and `ledger` (its `store` and `service` apart) are pure; `store` holds the SQL; `service` and `exports`
//! read through it, and `allocation` keeps the fleet page's allocation by day.

pub mod allocation;
mod chunks;
pub mod erp;
pub mod exports;
pub mod focus;
pub mod forecast;
pub mod gauges;
pub mod ledger;
pub mod monthly;
pub mod opencost;
pub mod service;
pub mod slices;
pub mod store;
pub mod usage;
