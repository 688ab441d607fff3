//! The consolidation plan (issue 13): each GPU model's MIG instances packed onto the fewest
//! cards ([`pack`]), with each card's new layout and explicit placements, a `mig-parted` config, the
//! ordered moves, the cards freed and what they cost a month. Advice only: nothing here
//! reconfigures a GPU.
//!
//! Today's layout of a card is the MIG instances held in the last hour it was reported present in
//! the window; a MIG-mode card reported present with nothing held is empty today and freed by any
//! plan. Cards not in MIG mode (whole GPUs, MPS, time-slicing) are not repacked.

pub mod days;
mod evidence;
mod merge;
mod mig_parted;
pub mod pack;
pub mod recommend;
pub mod store;
pub mod stranded;

pub use evidence::EvidenceCache;
pub use store::{CardToday, Evidence, InstanceToday};

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;

use crate::billing::rate_card::{self, RateCard};
use crate::domain::profiles;
use crate::domain::team::TeamId;
use crate::domain::time::AVERAGE_MONTH_HOURS;
use pack::{Item, PackError, Shape, StepKind};

/// The plan for the fleet's MIG cards, one entry per GPU model.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ConsolidationPlan {
    /// The days of data today's layouts were read from.
    pub days: u32,
    pub generated_at: DateTime<Utc>,
    pub models: Vec<ModelPlan>,
    /// What all the freed cards save a month, in `currency`.
    pub monthly_saving: Decimal,
    pub currency: Option<String>,
    /// The `mig-parted` configuration of every card that holds instances in the plan.
    pub mig_parted: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelPlan {
    pub model: String,
    pub cards_today: usize,
    pub cards_planned: usize,
    /// Whether the packing meets the linear relaxation's bound: no fewer cards can hold these
    /// instances.
    pub optimal: bool,
    /// Instances today.
    pub instances: usize,
    /// Given back on their workload's recommendation.
    pub instances_released: usize,
    /// Instances that change card.
    pub instances_moved: usize,
    /// Today's layouts, placed as NVIDIA's table allows (the collector does not report where an
    /// instance starts): what the plan starts from.
    pub today: Vec<CardPlan>,
    /// The plan's layouts: the cards that hold instances.
    pub cards: Vec<CardPlan>,
    pub moves: Vec<PlannedMove>,
    /// The cards left empty, by uuid.
    pub freed: Vec<String>,
    /// A card's cost an hour under the rate card in force, if one is.
    pub hourly_cost: Option<Decimal>,
    /// freed cards x hourly cost x 730 hours.
    pub monthly_saving: Decimal,
    /// What today's layouts strand: capacity no slice holds and no profile can take.
    pub stranded_today: stranded::StrandedCapacity,
    /// What the plan's layouts strand (freed cards nothing): the least of packings on as many cards.
    pub stranded_planned: stranded::StrandedCapacity,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CardPlan {
    pub gpu_uuid: String,
    pub node: String,
    pub instances: Vec<PlacedInstance>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlacedInstance {
    pub slice_uuid: String,
    /// Its profile in the plan.
    pub profile: String,
    /// Its profile today (another when right-sizing shrinks it).
    pub profile_today: String,
    /// Where it starts on the memory-slice axis (`nvidia-smi mig -lgipp`); none on GPUs the
    /// placement table does not cover.
    pub start: Option<u8>,
    pub memory_slices: u8,
    pub compute_slices: u8,
    /// Whether it is on this card today.
    pub stays: bool,
    /// Who held it most in the last hour of today's layout.
    #[schema(value_type = Option<String>)]
    pub team: Option<TeamId>,
    pub workload: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlannedMove {
    /// 1, 2, ... in the order to carry them out.
    pub order: usize,
    /// `release`: delete it (given back); `shrink`: recreate it in place as `profile` (the
    /// workload restarts); `move`: create on `to`, move the workload, delete on `from`; `stop`:
    /// delete on `from` first (the workload is down) because every destination is full;
    /// `start`: create it on `to` again.
    #[schema(value_type = String, example = "move")]
    pub action: MoveAction,
    pub slice_uuid: String,
    pub profile: String,
    pub from_gpu: String,
    pub to_gpu: String,
}

/// What a step of the plan does to an instance (`PlannedMove::action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MoveAction {
    Release,
    Shrink,
    Move,
    Stop,
    Start,
}

impl MoveAction {
    pub fn as_str(self) -> &'static str {
        match self {
            MoveAction::Release => "release",
            MoveAction::Shrink => "shrink",
            MoveAction::Move => "move",
            MoveAction::Stop => "stop",
            MoveAction::Start => "start",
        }
    }
}

impl From<StepKind> for MoveAction {
    fn from(k: StepKind) -> MoveAction {
        match k {
            StepKind::Move => MoveAction::Move,
            StepKind::Stop => MoveAction::Stop,
            StepKind::Start => MoveAction::Start,
        }
    }
}

/// Its word, padded as asked (`{:<7}` in the CLI's table).
impl std::fmt::Display for MoveAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{model}: {source}")]
    Pack { model: String, source: PackError },
    #[error("making the plan stopped: {0}")]
    Solver(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// How long the solver may search one model's packing before it settles for its best layout.
pub const SOLVE_LIMIT: Duration = Duration::from_secs(20);

/// What the plan does to an instance before packing, from its workload's recommendation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Recreated in place as a smaller profile (a smaller instance fits where a larger one was).
    Shrink {
        profile: String,
        compute_slices: u8,
        memory_slices: u8,
    },
    /// Given back: deleted.
    Release,
}

/// The plan for the MIG cards (of `model`, when given) reported in the last `days` days, freed
/// cards priced by the rate card in force at `now`. With `right_size`, each instance first takes
/// its workload's recommendation (`target`; medium confidence or better): a smaller profile, or
/// given back. Larger profiles are left to the team: they cannot be made in place.
pub async fn consolidation(
    pool: &sqlx::PgPool,
    evidence: &EvidenceCache,
    model: Option<&str>,
    days: u32,
    right_size: Option<recommend::TargetProfile>,
    now: DateTime<Utc>,
) -> Result<ConsolidationPlan, PlanError> {
    let since = now - chrono::Duration::days(i64::from(days));
    let cards = store::cards_today(pool, since, model).await?;
    let rate_cards = rate_card::store::rate_cards(pool).await?;
    let in_force = rate_card::in_force_at(&rate_cards, now);
    let changes = match right_size {
        Some(target) => changes(
            &cards,
            &recommendations(pool, evidence, None, days, target, now).await?,
        ),
        None => BTreeMap::new(),
    };
    // The solver is CPU-bound for up to its time limit: off the async workers.
    tokio::task::spawn_blocking({
        let in_force = in_force.cloned();
        move || plan(cards, in_force.as_ref(), &changes, days, now)
    })
    .await
    .map_err(|e| PlanError::Solver(e.to_string()))?
}

/// Each instance's change, by slice uuid: its consumer's recommendation for its profile.
pub fn changes(
    cards: &[CardToday],
    recommendations: &[recommend::Recommendation],
) -> BTreeMap<String, Change> {
    use recommend::{Action, Confidence};
    // Each MIG workload's recommendation by its workload, model and profile (the first, as a
    // search of the list would find it).
    type Key<'a> = (&'a str, Option<&'a str>, &'a str, &'a str, &'a str, &'a str);
    let mut of: std::collections::HashMap<Key<'_>, &recommend::Recommendation> =
        std::collections::HashMap::new();
    for r in recommendations {
        if r.kind != crate::domain::slice::SliceKind::Mig {
            continue;
        }
        let Some(profile) = r.profile.as_deref() else {
            continue;
        };
        of.entry((
            r.team.as_str(),
            r.namespace.as_deref(),
            r.workload_kind.as_str(),
            r.workload.as_str(),
            r.gpu_model.as_str(),
            profile,
        ))
        .or_insert(r);
    }
    let mut out = BTreeMap::new();
    for c in cards {
        let table = profiles::table_model(&c.model);
        for i in &c.instances {
            let Some(h) = &i.consumer else { continue };
            let Some(r) = of.get(&(
                h.team.as_str(),
                h.namespace.as_deref(),
                h.workload_kind.as_str(),
                h.workload.as_str(),
                c.model.as_str(),
                i.profile.as_str(),
            )) else {
                continue;
            };
            if r.confidence == Confidence::Low {
                continue;
            }
            match (r.action, &r.recommended_profile) {
                (Action::GiveBack, _) => {
                    out.insert(i.slice_uuid.clone(), Change::Release);
                }
                (Action::Resize, Some(p)) => {
                    let Some(p) = table.and_then(|t| profiles::by_name(t, p)) else {
                        continue;
                    };
                    if p.compute_slices <= i.compute_slices && p.memory_slices <= i.memory_slices {
                        out.insert(
                            i.slice_uuid.clone(),
                            Change::Shrink {
                                profile: p.profile.clone(),
                                compute_slices: p.compute_slices,
                                memory_slices: p.memory_slices,
                            },
                        );
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The days right-sizing judges by unless asked otherwise: the team page's, `/v1/recommendations`'
/// and the plan's.
pub const RIGHT_SIZING_DAYS: u32 = 14;

/// The hours right-sizing reads at `now`: the last `days` days up to the current hour.
pub fn right_sizing_range(days: u32, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let to = crate::domain::time::floor_hour(now);
    (to - chrono::Duration::days(i64::from(days)), to)
}

/// Every workload's recommendation over the last `days` days (only `team`'s, when given), priced
/// by the rate card in force at `now`.
pub async fn recommendations(
    pool: &sqlx::PgPool,
    evidence: &EvidenceCache,
    team: Option<&TeamId>,
    days: u32,
    target: recommend::TargetProfile,
    now: DateTime<Utc>,
) -> Result<Vec<recommend::Recommendation>, PlanError> {
    let read = evidence
        .get(pool, &[right_sizing_range(days, now)], team)
        .await?;
    recommend_all(pool, &read[0], target, now).await
}

/// A recommendation for each of `evidence`, priced by the rate card in force at `now`.
pub async fn recommend_all(
    pool: &sqlx::PgPool,
    evidence: &[Evidence],
    target: recommend::TargetProfile,
    now: DateTime<Utc>,
) -> Result<Vec<recommend::Recommendation>, PlanError> {
    let rate_cards = rate_card::store::rate_cards(pool).await?;
    let in_force = rate_card::in_force_at(&rate_cards, now);
    Ok(evidence
        .iter()
        .map(|e| recommend::recommend(e, in_force, target))
        .collect())
}

/// Plans every model among `cards`, pricing freed cards with `card` (the rate card in force).
pub fn plan(
    cards: Vec<CardToday>,
    card: Option<&RateCard>,
    changes: &BTreeMap<String, Change>,
    days: u32,
    generated_at: DateTime<Utc>,
) -> Result<ConsolidationPlan, PlanError> {
    let mut by_model: BTreeMap<String, Vec<CardToday>> = BTreeMap::new();
    for c in cards {
        by_model.entry(c.model.clone()).or_default().push(c);
    }
    let mut models = Vec::new();
    for (model, cards) in by_model {
        models.push(plan_model(&model, cards, card, changes)?);
    }
    let monthly_saving = models.iter().map(|m| m.monthly_saving).sum();
    let mig_parted = mig_parted::mig_parted(models.iter().flat_map(|m| {
        m.cards.iter().map(|c| {
            let profiles = c.instances.iter().map(|i| i.profile.as_str()).collect();
            (c.gpu_uuid.as_str(), profiles)
        })
    }));
    Ok(ConsolidationPlan {
        days,
        generated_at,
        models,
        monthly_saving,
        currency: card.map(|c| c.currency.code.clone()),
        mig_parted,
    })
}

// long: one model's plan in order (today's layout, right-sizing, packing, moves, steps), each step
// reading the tables of the one before
fn plan_model(
    model: &str,
    cards: Vec<CardToday>,
    rate_card: Option<&RateCard>,
    changes: &BTreeMap<String, Change>,
) -> Result<ModelPlan, PlanError> {
    let (total_compute, total_memory) = cards
        .first()
        .map(|c| (c.compute_slices, c.memory_slices))
        .unwrap_or((7, 8));
    let table = profiles::table_model(model);
    let mut shapes: Vec<Shape> = Vec::new();
    let mut items: Vec<Item> = Vec::new();
    let mut refs: Vec<&InstanceToday> = Vec::new();
    // The in-place steps come first: releases, then shrinks.
    let mut in_place: Vec<PlannedMove> = Vec::new();
    for (n, c) in cards.iter().enumerate() {
        for i in &c.instances {
            let (profile, compute_slices, memory_slices) = match changes.get(&i.slice_uuid) {
                Some(Change::Release) => {
                    in_place.push(PlannedMove {
                        order: 0,
                        action: MoveAction::Release,
                        slice_uuid: i.slice_uuid.clone(),
                        profile: i.profile.clone(),
                        from_gpu: c.gpu_uuid.clone(),
                        to_gpu: c.gpu_uuid.clone(),
                    });
                    continue;
                }
                Some(Change::Shrink {
                    profile,
                    compute_slices,
                    memory_slices,
                }) => {
                    in_place.push(PlannedMove {
                        order: 0,
                        action: MoveAction::Shrink,
                        slice_uuid: i.slice_uuid.clone(),
                        profile: profile.clone(),
                        from_gpu: c.gpu_uuid.clone(),
                        to_gpu: c.gpu_uuid.clone(),
                    });
                    (profile.clone(), *compute_slices, *memory_slices)
                }
                None => (i.profile.clone(), i.compute_slices, i.memory_slices),
            };
            let s = match shapes.iter().position(|s| s.profile == profile) {
                Some(s) => s,
                None => {
                    let max_per_card = table
                        .and_then(|t| profiles::by_name(t, &profile))
                        .map(|p| u8::try_from(p.max_instances).unwrap_or(u8::MAX))
                        .unwrap_or(total_compute);
                    shapes.push(Shape {
                        profile: profile.clone(),
                        compute_slices,
                        memory_slices,
                        max_per_card,
                    });
                    shapes.len() - 1
                }
            };
            items.push(Item {
                id: i.slice_uuid.clone(),
                shape: s,
                card: n,
            });
            refs.push(i);
        }
    }
    in_place.sort_by_key(|m| m.action != MoveAction::Release);
    let packing = pack::pack(
        &shapes,
        &items,
        cards.len(),
        total_compute,
        total_memory,
        stranded::weights(rate_card),
        SOLVE_LIMIT,
    )
    .map_err(|source| PlanError::Pack {
        model: model.to_owned(),
        source,
    })?;
    let mut planned: Vec<CardPlan> = packing
        .used
        .iter()
        .map(|&n| CardPlan {
            gpu_uuid: cards[n].gpu_uuid.clone(),
            node: cards[n].node.clone(),
            instances: Vec::new(),
        })
        .collect();
    // Each card's place among the cards used (`usize::MAX`: freed).
    let mut planned_at = vec![usize::MAX; cards.len()];
    for (k, &n) in packing.used.iter().enumerate() {
        planned_at[n] = k;
    }
    for p in &packing.placed {
        let k = planned_at[p.card];
        let i = refs[p.item];
        let shape = &shapes[items[p.item].shape];
        planned[k].instances.push(PlacedInstance {
            slice_uuid: i.slice_uuid.clone(),
            profile: shape.profile.clone(),
            profile_today: i.profile.clone(),
            start: p.start,
            memory_slices: shape.memory_slices,
            compute_slices: shape.compute_slices,
            stays: items[p.item].card == p.card,
            team: i.consumer.as_ref().map(|h| h.team.clone()),
            workload: i.consumer.as_ref().map(|h| h.workload.clone()),
        });
    }
    for c in &mut planned {
        c.instances.sort_by_key(|i| (i.start, i.slice_uuid.clone()));
    }
    let released = in_place
        .iter()
        .filter(|m| m.action == MoveAction::Release)
        .count();
    let moves: Vec<PlannedMove> = in_place
        .into_iter()
        .chain(packing.steps.iter().map(|s| PlannedMove {
            order: 0,
            action: s.kind.into(),
            slice_uuid: refs[s.item].slice_uuid.clone(),
            profile: shapes[items[s.item].shape].profile.clone(),
            from_gpu: cards[s.from].gpu_uuid.clone(),
            to_gpu: cards[s.to].gpu_uuid.clone(),
        }))
        .enumerate()
        .map(|(k, m)| PlannedMove { order: k + 1, ..m })
        .collect();
    let freed: Vec<String> = (0..cards.len())
        .filter(|&n| planned_at[n] == usize::MAX)
        .map(|n| cards[n].gpu_uuid.clone())
        .collect();
    let hourly_cost = rate_card.map(|c| c.hourly_cost(model).0);
    let monthly_saving = hourly_cost.unwrap_or_default()
        * Decimal::from(freed.len())
        * Decimal::from(AVERAGE_MONTH_HOURS);
    let today: Vec<CardPlan> = cards
        .iter()
        .map(|c| {
            let shapes: Vec<profiles::Instance> = c
                .instances
                .iter()
                .map(|i| profiles::Instance {
                    compute_slices: i.compute_slices,
                    memory_slices: i.memory_slices,
                })
                .collect();
            let starts = profiles::check_layout(&shapes, total_compute, total_memory)
                .ok()
                .flatten();
            let mut instances: Vec<PlacedInstance> = c
                .instances
                .iter()
                .enumerate()
                .map(|(k, i)| PlacedInstance {
                    slice_uuid: i.slice_uuid.clone(),
                    profile: i.profile.clone(),
                    profile_today: i.profile.clone(),
                    start: starts.as_ref().map(|s| s[k]),
                    memory_slices: i.memory_slices,
                    compute_slices: i.compute_slices,
                    stays: true,
                    team: i.consumer.as_ref().map(|h| h.team.clone()),
                    workload: i.consumer.as_ref().map(|h| h.workload.clone()),
                })
                .collect();
            instances.sort_by_key(|i| (i.start, i.slice_uuid.clone()));
            CardPlan {
                gpu_uuid: c.gpu_uuid.clone(),
                node: c.node.clone(),
                instances,
            }
        })
        .collect();
    let stranded = |cards: &[CardPlan]| {
        let layouts = cards.iter().map(|c| {
            c.instances
                .iter()
                .map(|i| (i.compute_slices, i.memory_slices))
        });
        stranded::stranded_capacity(model, layouts, total_compute, total_memory, rate_card)
    };
    let (stranded_today, stranded_planned) = (stranded(&today), stranded(&planned));
    Ok(ModelPlan {
        model: model.to_owned(),
        cards_today: cards.len(),
        cards_planned: packing.used.len(),
        optimal: packing.optimal,
        instances: items.len() + released,
        instances_released: released,
        instances_moved: packing
            .placed
            .iter()
            .filter(|p| items[p.item].card != p.card)
            .count(),
        today,
        cards: planned,
        moves,
        freed,
        hourly_cost,
        monthly_saving,
        stranded_today,
        stranded_planned,
    })
}
