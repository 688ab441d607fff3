//! Reports: what the fleet held and used, read from the hourly rollups (or an issued period's books),
//! the monthly report, and the finance exports (FOCUS cost data, ERP journal lines). `usage`,
//! `monthly`, `slices`, `focus` and `erp` are pure; `store` holds the SQL; `service` and `exports`
//! read through it.

mod chunks;
pub mod erp;
pub mod exports;
pub mod focus;
pub mod monthly;
pub mod service;
pub mod slices;
pub mod store;
pub mod usage;
