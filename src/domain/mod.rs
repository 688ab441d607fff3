//! Pure types of slicemeter's world, no I/O: slices and their physical shares, the ingest contract,
//! teams, time periods, text rules and NVIDIA's MIG tables.

pub mod batch;
pub mod profiles;
pub mod slice;
pub mod team;
pub mod text;
pub mod time;
pub mod usage;
