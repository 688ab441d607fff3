//! `GET /v1/fleet`: every GPU with its slices and who held each slice in the last hour.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::require;
use super::error::{ApiError, ErrorBody};
use crate::auth::{Principal, Role};
use crate::db;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_fleet))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Fleet {
    pub gpus: Vec<FleetGpu>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FleetGpu {
    pub uuid: String,
    pub node: String,
    pub model: String,
    pub memory_bytes: i64,
    pub mig_enabled: bool,
    /// End of the last hour the GPU was reported present (within 31 days).
    pub last_present: Option<DateTime<Utc>>,
    pub slices: Vec<FleetSlice>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FleetSlice {
    pub uuid: String,
    pub kind: String,
    pub profile: Option<String>,
    /// Fraction of the GPU's compute the slice reserves (1 for a time-sliced replica: measured).
    #[schema(value_type = String)]
    pub compute_share: Decimal,
    #[schema(value_type = String)]
    pub memory_share: Decimal,
    /// Who held it in the last hour, if anyone.
    pub holder: Option<Holder>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Holder {
    pub team: String,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub unix_user: Option<String>,
}

/// GPUs, slices and current holders (admin and finance).
#[utoipa::path(get, path = "/v1/fleet", tag = "fleet",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the fleet", body = Fleet),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin or finance", body = ErrorBody)))]
async fn get_fleet(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Fleet>, ApiError> {
    require(&principal, &[Role::Admin, Role::Finance])?;
    let rows = db::fleet::slices(&state.pool, Utc::now()).await?;
    let mut gpus: Vec<FleetGpu> = Vec::new();
    for r in rows {
        if gpus.last().is_none_or(|g| g.uuid != r.gpu_uuid) {
            gpus.push(FleetGpu {
                uuid: r.gpu_uuid.clone(),
                node: r.node.clone(),
                model: r.model.clone(),
                memory_bytes: r.memory_bytes,
                mig_enabled: r.mig_enabled,
                last_present: r.last_present,
                slices: Vec::new(),
            });
        }
        let (Some(uuid), Some(kind), Some(compute_share), Some(memory_share)) =
            (r.slice_uuid, r.kind, r.compute_share, r.memory_share)
        else {
            continue;
        };
        let gpu = gpus.last_mut().expect("pushed above");
        gpu.slices.push(FleetSlice {
            uuid,
            kind,
            profile: r.profile,
            compute_share: compute_share.normalize(),
            memory_share: memory_share.normalize(),
            holder: r.holder_team.map(|team| Holder {
                team,
                namespace: r.holder_namespace,
                pod: r.holder_pod,
                unix_user: r.holder_user,
            }),
        });
    }
    Ok(Json(Fleet { gpus }))
}
