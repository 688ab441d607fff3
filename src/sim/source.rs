//! The simulator as a collector [`Source`]: one node of a [`SimFleet`], behind the same trait the
//! NVML source implements.

use chrono::{DateTime, Utc};

use super::{SimFleet, SimSlice, workload::Plan};
use crate::collector::source::{Inventory, Reading, Source, SourceError};

pub struct SimSource {
    fleet: SimFleet,
    node: String,
    slices: Vec<SimSlice>,
    /// Each slice's plan for the block last sampled.
    plans: Vec<Option<Plan>>,
}

impl SimSource {
    /// The source of `node`: it keeps that node of the fleet only.
    pub fn new(fleet: &SimFleet, node: &str) -> Result<SimSource, SourceError> {
        let Some(fleet) = fleet.for_node(node) else {
            return Err(SourceError::Unavailable(format!(
                "the simulated fleet has no node {node:?}; it has {}",
                fleet
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let slices: Vec<SimSlice> = fleet.nodes[0]
            .gpus
            .iter()
            .flat_map(|g| g.slices.clone())
            .collect();
        Ok(SimSource {
            plans: vec![None; slices.len()],
            node: node.to_owned(),
            slices,
            fleet,
        })
    }
}

impl Source for SimSource {
    fn node(&self) -> &str {
        &self.node
    }

    fn inventory(&mut self) -> Result<Inventory, SourceError> {
        let n = self.fleet.node(&self.node).expect("checked in new");
        Ok(Inventory {
            gpus: n.gpus.iter().map(|g| g.report.clone()).collect(),
            slices: self.slices.iter().map(|s| s.report.clone()).collect(),
        })
    }

    fn sample(&mut self, at: DateTime<Utc>) -> Result<Vec<Reading>, SourceError> {
        let t = at.timestamp_millis();
        let block = SimFleet::block_of(t);
        let mut out = Vec::with_capacity(self.slices.len());
        let mut replanned = false;
        for (i, slice) in self.slices.iter().enumerate() {
            if self.plans[i].as_ref().is_none_or(|p| p.block != block) {
                self.plans[i] = Some(self.fleet.plan(slice, block));
                replanned = true;
            }
            let plan = self.plans[i].as_ref().expect("set above");
            let Some(consumer) = &plan.consumer else {
                out.push(Reading {
                    slice: i,
                    consumer: None,
                    memory_used_bytes: 0,
                    compute_active_ppm: Some(0),
                });
                continue;
            };
            let r = self.fleet.reading(slice, plan, t);
            out.push(Reading {
                slice: i,
                consumer: Some(consumer.clone()),
                memory_used_bytes: r.memory_used_bytes,
                compute_active_ppm: Some(r.compute_active_ppm),
            });
        }
        if replanned {
            self.fleet.forget_idle_consumers();
        }
        Ok(out)
    }
}
