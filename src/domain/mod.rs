//! Pure types of slicemeter's world, no I/O: slices and their physical shares, the ingest contract,
//! the occupancy window and its sums, field errors, roles and principals, teams and who owns a
//! namespace when, time periods, text rules, NVIDIA's MIG tables and dcgm-exporter's label names.

pub mod access;
pub mod batch;
pub mod dcgm;
pub mod exact;
pub mod fields;
pub mod layout;
pub mod ownership;
pub mod profiles;
pub mod scope;
pub mod slice;
pub mod team;
pub mod text;
pub mod time;
pub mod usage;
pub mod window;
