//! New windows to their teams, for the rollups: a consumer's `team` label's team, else its
//! namespace's owner at each moment of the window (`domain::ownership`: a window that straddles a
//! change of owner is split at the instant). The owners are read in the batch's transaction, under
//! a lock that a change of ownership waits on (`store::read_ownership`), so that no window is added
//! under an owner a concurrent change has just replaced.

use std::collections::HashMap;

use super::store::{RollupKey, WindowIds};
use super::validate::{ValidBatch, ValidConsumer};
use crate::domain::ownership::{self, Claim, Ownership};
use crate::domain::team::TeamId;
use crate::domain::window::{Rollup, Window};

/// The teams a group's rollup rows name, each once: the rollup keys hold their index.
#[derive(Debug, Default)]
pub struct Teams {
    teams: Vec<TeamId>,
    index: HashMap<TeamId, u32>,
}

impl Teams {
    fn index(&mut self, team: &TeamId) -> u32 {
        if let Some(&i) = self.index.get(team) {
            return i;
        }
        let i = self.teams.len() as u32;
        self.teams.push(team.clone());
        self.index.insert(team.clone(), i);
        i
    }

    /// The teams, by the index rollup keys hold.
    pub fn teams(&self) -> &[TeamId] {
        &self.teams
    }
}

/// The namespaces of the batches' consumers without a `team` label: those whose owners decide.
pub fn namespaces(batches: &[&ValidBatch]) -> Vec<String> {
    let mut out: Vec<String> = batches
        .iter()
        .flat_map(|b| &b.consumers)
        .filter(|c| c.team_label.is_none())
        .filter_map(|c| c.report.namespace.clone())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Adds `windows` (of the batch whose consumers are `consumers`) to `rollup`, each hour of each
/// window under the team of its time; `None` when a sum overflows.
pub fn add<'w>(
    rollup: &mut Rollup<RollupKey>,
    teams: &mut Teams,
    windows: impl IntoIterator<Item = &'w Window>,
    ids: WindowIds<'_>,
    consumers: &[ValidConsumer],
    owners: &Ownership,
) -> Option<()> {
    for w in windows {
        let (slice, gpu, consumer) = ids.rollup_key(w);
        let c = consumers.get(w.consumer)?;
        let claim = Claim::of(c.team_label.as_ref(), c.report.namespace.as_deref());
        // The common case, a window its owner holds throughout: its hours as they are.
        if !claim.changes_within(owners, w.start, w.end) {
            let team = teams.index(claim.team_at(owners, w.start));
            rollup.add((slice, gpu, consumer, team), &w.hours)?;
            continue;
        }
        for (hour, team, part) in ownership::attribute(w, claim, owners)? {
            let team = teams.index(team);
            rollup.add((slice, gpu, consumer, team), &[(hour, part)])?;
        }
    }
    Some(())
}
