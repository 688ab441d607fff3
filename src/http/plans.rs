//! `GET /v1/recommendations`: what slice each workload should have; `GET /v1/plans/consolidation`:
//! each GPU model's MIG instances packed onto the fewest cards.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{require, team_in_scope};
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::state::AppState;
use crate::domain::access::{Principal, Role};
use crate::domain::fields::FieldError;
use crate::domain::team::TeamId;
use crate::domain::text;
use crate::plan::recommend::{Recommendation, TargetProfile};
use crate::plan::{self, ConsolidationPlan, PlanError};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(recommendations))
        .routes(routes!(consolidation))
        .routes(routes!(mig_parted))
}

impl From<PlanError> for ApiError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Pack { .. } => ApiError::conflict(ErrorCode::CannotPlan, &e),
            PlanError::Solver(detail) => ApiError::internal(detail),
            PlanError::Db(e) => e.into(),
        }
    }
}

/// The shape of the mig-parted file, for the API document (the file itself is YAML text).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct MigPartedFile {
    #[schema(example = "v1")]
    version: String,
    /// One named configuration per card: `slicemeter-<gpu uuid>`.
    #[schema(rename = "mig-configs")]
    mig_configs: std::collections::BTreeMap<String, Vec<MigPartedEntry>>,
}

#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct MigPartedEntry {
    /// `all`: the collector does not report a card's index on its node.
    #[schema(example = "all")]
    devices: String,
    #[schema(rename = "mig-enabled")]
    mig_enabled: bool,
    /// Instances per profile.
    #[schema(rename = "mig-devices")]
    mig_devices: std::collections::BTreeMap<String, u32>,
}

/// The most days of layouts a plan reads.
const MAX_DAYS: u32 = 90;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct PlanParams {
    /// Only this GPU model, as NVML names it (`NVIDIA H100 80GB HBM3`); every model by default.
    #[param(
        example = "NVIDIA H100 80GB HBM3",
        pattern = r"^[^\x00-\x1F\x7F-\x9F]{1,200}$"
    )]
    model: Option<String>,
    /// Cards reported in the last this many days are planned, and recommendations judged over
    /// them (default 14, at most 90).
    #[param(value_type = Option<u32>, example = 14, minimum = 1, maximum = 90)]
    days: Option<String>,
    /// `true` (default): each instance first takes its workload's recommendation (a smaller
    /// profile, or given back; medium confidence or better); `false`: today's profiles as they are.
    #[param(value_type = Option<bool>, example = true)]
    right_size: Option<String>,
    /// The recommendations' target utilisation: `default`, `dev`, `prod` or `ha`.
    #[param(pattern = "^(default|dev|prod|ha)$", example = "prod")]
    profile: Option<String>,
}

fn target_of(profile: Option<&str>, errors: &mut Vec<FieldError>) -> TargetProfile {
    match profile {
        None => TargetProfile::Default,
        Some(p) => TargetProfile::parse(p).unwrap_or_else(|| {
            errors.push(FieldError::new(
                "profile",
                format!("{p:?} is not one of default, dev, prod, ha"),
            ));
            TargetProfile::Default
        }),
    }
}

impl PlanParams {
    fn checked(&self) -> Result<(Option<&str>, u32, Option<TargetProfile>), ApiError> {
        let mut errors = Vec::new();
        let days = days_of(self.days.as_deref(), &mut errors);
        let target = target_of(self.profile.as_deref(), &mut errors);
        let right_size = match self.right_size.as_deref() {
            None | Some("true") => true,
            Some("false") => false,
            Some(other) => {
                errors.push(FieldError::new(
                    "right_size",
                    format!("{other:?} is neither true nor false"),
                ));
                false
            }
        };
        if let Some(m) = &self.model
            && let Err(e) = text::check(m, 200)
        {
            errors.push(FieldError::new("model", format!("a GPU model name {e}")));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid_fields(
                "the plan's parameters are invalid",
                errors,
            ));
        }
        Ok((self.model.as_deref(), days, right_size.then_some(target)))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct RecommendationParams {
    /// Only this team's workloads (a team lead: their own, the default).
    #[param(example = "nlp", pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")]
    team: Option<String>,
    /// The days of data to judge by (default 14, at most 90); under 7 nothing is recommended.
    #[param(value_type = Option<u32>, example = 14, minimum = 1, maximum = 90)]
    days: Option<String>,
    /// The target utilisation: `default` (0.7), `dev` (0.8), `prod` (0.65) or `ha` (0.5).
    #[param(pattern = "^(default|dev|prod|ha)$", example = "prod")]
    profile: Option<String>,
}

fn days_of(days: Option<&str>, errors: &mut Vec<FieldError>) -> u32 {
    match days {
        None => crate::plan::RIGHT_SIZING_DAYS,
        Some(d) => match d.parse::<u32>() {
            Ok(n) if (1..=MAX_DAYS).contains(&n) => n,
            _ => {
                errors.push(FieldError::new(
                    "days",
                    format!("{d:?} is not a whole number of days from 1 to {MAX_DAYS}"),
                ));
                0
            }
        },
    }
}

/// Per workload (the pod's owner where its labels say it: Deployment, StatefulSet, Job; else the
/// pod) and the slices it holds: today's slice, the smallest MIG profile of the same GPU model
/// that fits its memory need (p99 of hourly peak memory x 1.15, never below the highest peak)
/// and compute need (p95 of the compute-active fraction x compute slices / target utilisation),
/// or "give it back" for a slice held with no compute; the evidence, a confidence (low under 7
/// days of data, medium under 14, high after) and the monthly chargeback delta at today's rate
/// card (each line rounded as an invoice line). Time-sliced replicas are pay-per-use. A team lead
/// sees their own team only.
#[utoipa::path(get, path = "/v1/recommendations", tag = "reports",
    params(RecommendationParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "one recommendation per workload and slice profile", body = Vec<Recommendation>),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "a collector token, or another team's", body = ErrorBody)))]
async fn recommendations(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<RecommendationParams>, QueryRejection>,
) -> Result<Json<Vec<Recommendation>>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance, Role::TeamLead])?;
    let Query(params) = params?;
    let mut errors = Vec::new();
    let days = days_of(params.days.as_deref(), &mut errors);
    let target = target_of(params.profile.as_deref(), &mut errors);
    let asked = match params.team.as_deref().map(TeamId::parse) {
        Some(Err(e)) => {
            errors.push(FieldError::new("team", e.to_string()));
            None
        }
        Some(Ok(t)) => Some(t),
        None => None,
    };
    if !errors.is_empty() {
        return Err(ApiError::invalid_fields(
            "the recommendations' parameters are invalid",
            errors,
        ));
    }
    let team = team_in_scope(&principal, asked, "recommendations")?;
    Ok(Json(
        plan::recommendations(
            &state.pool,
            &state.evidence,
            team.as_ref(),
            days,
            target,
            Utc::now(),
        )
        .await?,
    ))
}

/// The plan the parameters ask for (the caller is checked first).
async fn read(state: &AppState, params: &PlanParams) -> Result<ConsolidationPlan, ApiError> {
    let (model, days, right_size) = params.checked()?;
    Ok(plan::consolidation(
        &state.pool,
        &state.evidence,
        model,
        days,
        right_size,
        Utc::now(),
    )
    .await?)
}

/// For each GPU model, its MIG cards' instances (as held in the last hour each card was reported)
/// packed onto the fewest cards (an integer program over every card configuration NVIDIA's
/// placement table allows; `optimal` says the packing meets its linear relaxation's bound, so
/// that no fewer cards can do), right-sized first unless `right_size=false`, then with as
/// few instances moved as the greedy assignment finds: each card's new layout with explicit
/// placements, the ordered moves, the cards freed and their monthly cost (hourly cost under the
/// rate card in force x 730 hours), and the `mig-parted` configuration. Advice: nothing is
/// reconfigured. Admin and finance only (it shows every team's instances).
#[utoipa::path(get, path = "/v1/plans/consolidation", tag = "fleet",
    params(PlanParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the plan", body = ConsolidationPlan),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 409, description = "an instance no card of its model can hold", body = ErrorBody)))]
async fn consolidation(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<PlanParams>, QueryRejection>,
) -> Result<Json<ConsolidationPlan>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let Query(params) = params?;
    Ok(Json(read(&state, &params).await?))
}

/// The plan's `mig-parted` configuration (`version: v1`, one named configuration per card that
/// holds instances), as a file to download.
#[utoipa::path(get, path = "/v1/plans/consolidation/mig-parted.yaml", tag = "fleet",
    params(PlanParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the mig-parted configuration: `version: v1` and `mig-configs`, one per card that holds instances", body = MigPartedFile, content_type = "application/yaml"),
        (status = 400, description = "bad parameters, each named", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody),
        (status = 409, description = "an instance no card of its model can hold", body = ErrorBody)))]
async fn mig_parted(
    State(state): State<AppState>,
    principal: Principal,
    params: Result<Query<PlanParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let Query(params) = params?;
    Ok(mig_parted_response(read(&state, &params).await?))
}

/// The plan's `mig-parted` file as a download; the dashboard serves the same.
pub(crate) fn mig_parted_response(plan: ConsolidationPlan) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/yaml; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"slicemeter-mig-parted.yaml\"",
            ),
        ],
        plan.mig_parted,
    )
        .into_response()
}
