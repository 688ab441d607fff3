//! Pure types of slicemeter's world, no I/O: slices and their physical shares, the ingest contract,
//! the occupancy window and its sums, field errors, roles and principals, teams, time periods, text
//! rules and NVIDIA's MIG tables.

pub mod access;
pub mod batch;
pub mod fields;
pub mod profiles;
pub mod slice;
pub mod team;
pub mod text;
pub mod time;
pub mod usage;
pub mod window;
