//! Reports: what the fleet held and used, read from the hourly rollups.

pub mod usage;
