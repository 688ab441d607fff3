//! Where readings come from: the simulator here, NVML on real GPUs; both behind [`Source`].

pub mod nvml;
pub mod sim;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::domain::batch::{ConsumerReport, GpuReport, SliceReport};

/// The GPUs and slices of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    pub gpus: Vec<GpuReport>,
    pub slices: Vec<SliceReport>,
}

/// One slice's state at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Index into the inventory's slices.
    pub slice: usize,
    /// Who holds it; `None` when it is free.
    pub holder: Option<Arc<ConsumerReport>>,
    pub memory_used_bytes: u64,
    /// SM activity in parts per million, relative to the slice (to the whole GPU for a time-sliced
    /// replica); `None` where the GPU cannot measure it.
    pub compute_active_ppm: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{0}")]
    Unavailable(String),
}

/// A node's GPUs, read at an instant.
pub trait Source: Send {
    /// The node this source reads.
    fn node(&self) -> &str;
    fn inventory(&mut self) -> Result<Inventory, SourceError>;
    /// Readings of every slice of the inventory at `at`.
    fn sample(&mut self, at: DateTime<Utc>) -> Result<Vec<Reading>, SourceError>;
}

impl Source for Box<dyn Source> {
    fn node(&self) -> &str {
        (**self).node()
    }

    fn inventory(&mut self) -> Result<Inventory, SourceError> {
        (**self).inventory()
    }

    fn sample(&mut self, at: DateTime<Utc>) -> Result<Vec<Reading>, SourceError> {
        (**self).sample(at)
    }
}
