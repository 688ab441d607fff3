//! Reports: what the fleet held and used, read from the hourly rollups, and the finance exports
//! (FOCUS cost data, ERP journal lines).

pub mod erp;
pub mod exports;
pub mod focus;
pub mod usage;
