//! The plan page (finance, admin): each GPU model's MIG cards today and as the consolidation plan
//! would have them (right-sized first), the cards it frees and what they cost a month, the moves
//! in order, and the `mig-parted` file. The figures are the API's (`/v1/plans/consolidation`).

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use maud::html;
use serde::Deserialize;

use super::charts::{self, GpuBar, Palette, SliceMark};
use super::format::{money, number};
use super::layout::{UiError, Viewer, empty_state, page};
use crate::domain::access::Principal;
use crate::http::plans::mig_parted_response;
use crate::http::state::AppState;
use crate::plan::recommend::TargetProfile;
use crate::plan::stranded::StrandedCapacity;
use crate::plan::{self, CardPlan, ConsolidationPlan};
use crate::teams;

#[derive(Deserialize)]
pub struct PlanQuery {
    /// `false`: today's profiles as they are.
    pub right_size: Option<String>,
}

impl PlanQuery {
    fn right_size(&self) -> Option<TargetProfile> {
        (self.right_size.as_deref() != Some("false")).then_some(TargetProfile::Default)
    }
}

const DAYS: u32 = 14;

async fn read(
    state: &AppState,
    viewer: &Principal,
    q: &PlanQuery,
) -> Result<ConsolidationPlan, UiError> {
    if !matches!(viewer, Principal::Admin { .. } | Principal::Finance { .. }) {
        return Err(UiError::Forbidden(
            "The plan covers every team's cards: it is for finance and admins.".into(),
        ));
    }
    Ok(plan::consolidation(
        &state.pool,
        &state.evidence,
        None,
        DAYS,
        q.right_size(),
        Utc::now(),
    )
    .await
    .map_err(crate::http::error::ApiError::from)?)
}

pub async fn plan_page(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<PlanQuery>,
) -> Result<Response, UiError> {
    let plan = read(&state, &viewer, &q).await?;
    let teams = teams::list(&state.pool, None).await?;
    let palette = Palette::new(teams.iter().map(|t| t.team_id.as_str()));
    let right_sized = q.right_size().is_some();
    let currency = plan.currency.clone().unwrap_or_default();
    let m = |d| money(d, &currency, 2);
    let freed: usize = plan.models.iter().map(|x| x.freed.len()).sum();
    let body = html! {
        h1 { "Consolidation plan" }
        p {
            "Each GPU model's MIG instances on the fewest cards, from the last " (DAYS) " days. "
            @if right_sized {
                "Each instance first takes its workload's recommendation (a smaller profile, or given back). "
                a href="/ui/plan?right_size=false" { "Plan today's profiles as they are" }
            } @else {
                "Today's profiles as they are. "
                a href="/ui/plan" { "Right-size first" }
            }
            ". Advice only: nothing here reconfigures a GPU."
        }
        div class="cards" {
            div class="card" {
                div class="label" { "Cards freed" }
                div class="value" data-field="freed" { (freed) }
            }
            div class="card" {
                div class="label" { "Saving a month" }
                div class="value" data-field="saving" { (m(plan.monthly_saving)) }
            }
        }
        p {
            a href=(format!("/ui/plan/mig-parted.yaml{}", if right_sized { "" } else { "?right_size=false" })) download {
                "Download the mig-parted configuration"
            }
        }
        @if plan.models.is_empty() {
            (empty_state())
        }
        @for (k, model) in plan.models.iter().enumerate() {
            section aria-labelledby=(format!("model-{k}")) data-model=(model.model) {
                h2 id=(format!("model-{k}")) { (model.model) }
                p data-field="summary" {
                    (model.cards_today) " cards today, " strong { (model.cards_planned) " planned" }
                    @if model.optimal { " (proven the fewest)" } @else { " (not proven the fewest)" }
                    ": " (model.instances_released) " of " (model.instances) " instances given back, "
                    (model.instances_moved) " move, " (model.freed.len()) " freed, "
                    strong { (m(model.monthly_saving)) } " a month."
                }
                p data-field="stranded" {
                    "Stranded (no profile fits): today " (stranded(&model.stranded_today, &m))
                    "; planned " strong { (stranded(&model.stranded_planned, &m)) } "."
                }
                div class="plan-maps" {
                    figure {
                        figcaption { "Today" }
                        (charts::gpu_map(&format!("today-{k}"), &bars(&model.today, &[]), &palette))
                    }
                    figure {
                        figcaption { "Planned" }
                        (charts::gpu_map(&format!("planned-{k}"), &bars(&model.cards, &model.freed), &palette))
                    }
                }
                @if !model.moves.is_empty() {
                    div class="scroll" {
                        table data-table="moves" {
                            caption { "The steps, in order" }
                            thead { tr {
                                th scope="col" class="num" { "#" }
                                th scope="col" { "Step" }
                                th scope="col" { "Instance" }
                                th scope="col" { "Profile" }
                                th scope="col" { "From" }
                                th scope="col" { "To" }
                            } }
                            tbody {
                                @for mv in &model.moves {
                                    tr {
                                        td class="num" { (mv.order) }
                                        td { (mv.action) }
                                        td { code { (mv.slice_uuid) } }
                                        td { (mv.profile) }
                                        td { code { (mv.from_gpu) } }
                                        td { code { (mv.to_gpu) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(page("Consolidation plan", Some(&viewer), body).into_response())
}

pub async fn mig_parted(
    State(state): State<AppState>,
    Viewer(viewer): Viewer,
    Query(q): Query<PlanQuery>,
) -> Result<Response, UiError> {
    Ok(mig_parted_response(read(&state, &viewer, &q).await?))
}

/// A bar per card on the memory-slice axis: each instance where it is placed, as wide as its
/// memory slices, coloured by its consumer's team; free memory slices grey; freed cards empty.
fn bars(cards: &[CardPlan], freed: &[String]) -> Vec<GpuBar> {
    let mut out: Vec<GpuBar> = cards
        .iter()
        .map(|c| {
            let mut slices = Vec::new();
            let mut at = 0u8;
            for i in &c.instances {
                let start = i.start.unwrap_or(at);
                if start > at {
                    slices.push(free(start - at));
                }
                slices.push(SliceMark {
                    share: f64::from(i.memory_slices) / 8.0,
                    team: i.team.clone(),
                    hover: format!(
                        "{}{} at memory slices {}-{}{}",
                        i.profile,
                        if i.profile != i.profile_today {
                            format!(" (today {})", i.profile_today)
                        } else {
                            String::new()
                        },
                        start,
                        start + i.memory_slices - 1,
                        match (&i.team, &i.workload) {
                            (Some(t), Some(w)) => format!(": {t} ({w})"),
                            (Some(t), None) => format!(": {t}"),
                            _ => String::new(),
                        }
                    ),
                });
                at = start + i.memory_slices;
            }
            if at < 8 {
                slices.push(free(8 - at));
            }
            GpuBar {
                label: label(&c.node, &c.gpu_uuid),
                link: None,
                slices,
            }
        })
        .collect();
    for uuid in freed {
        out.push(GpuBar {
            label: format!("freed · {}", short(uuid)),
            link: None,
            slices: vec![SliceMark {
                share: 1.0,
                team: None,
                hover: format!("{uuid}: freed"),
            }],
        });
    }
    out
}

/// What `s` strands as the page says it (`StrandedCapacity::describe`).
fn stranded(s: &StrandedCapacity, money: &dyn Fn(rust_decimal::Decimal) -> String) -> String {
    s.describe(number, money)
}

fn free(slices: u8) -> SliceMark {
    SliceMark {
        share: f64::from(slices) / 8.0,
        team: None,
        hover: format!(
            "{slices} memory slice{} free",
            if slices == 1 { "" } else { "s" }
        ),
    }
}

fn label(node: &str, uuid: &str) -> String {
    format!("{node} · {}", short(uuid))
}

fn short(uuid: &str) -> &str {
    uuid.get(uuid.len().saturating_sub(12)..).unwrap_or(uuid)
}
