//! `GET /v1/fleet`: every GPU with its slices and who held each slice in the last hour.

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::require;
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use super::teams::ApiJson;
use crate::domain::access::Actor;
use crate::domain::access::{Principal, Role};
use crate::domain::batch::{ConsumerReport, DraClaim};
use crate::domain::dcgm::{DcgmLabels, Device};
use crate::domain::fields::FieldError;
use crate::domain::team::TeamId;
use crate::fleet::{self, store as fleet_store};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_fleet))
        .routes(routes!(move_gpu))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuMove {
    /// The node whose collector reports the GPU from now on.
    #[schema(example = "gpu-node-07", pattern = r"^[A-Za-z0-9._-]{1,253}$")]
    pub node: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GpuRegistration {
    pub uuid: String,
    /// The node that may report it.
    pub node: String,
    pub model: String,
    pub memory_bytes: i64,
    pub mig_enabled: bool,
}

/// Moves a GPU to another node: a GPU belongs to the node that first reported it, and only that
/// node's collector (or an admin's back-fill for that node) may report it. Audited (`gpu.move`).
#[utoipa::path(put, path = "/v1/gpus/{uuid}", tag = "fleet",
    params(("uuid" = String, Path, description = "the GPU's uuid, as NVML reports it")),
    request_body = GpuMove,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "the GPU as registered now", body = GpuRegistration),
        (status = 400, description = "not a node name", body = ErrorBody),
        (status = 401, description = "no valid token", body = ErrorBody),
        (status = 403, description = "needs admin", body = ErrorBody),
        (status = 404, description = "no such GPU", body = ErrorBody)))]
async fn move_gpu(
    State(state): State<AppState>,
    principal: Principal,
    Path(uuid): Path<String>,
    ApiJson(body): ApiJson<GpuMove>,
) -> Result<Json<GpuRegistration>, ApiError> {
    require(&principal, &[Role::Admin])?;
    if !crate::domain::batch::is_node_name(&body.node) {
        return Err(ApiError::invalid_fields(
            "the node is invalid",
            vec![FieldError::new(
                "node",
                "a node name has 1 to 253 letters, digits, '.', '-' or '_'",
            )],
        ));
    }
    let row = fleet::move_gpu(&state.pool, &uuid, &body.node, &Actor::of(&principal))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("there is no GPU {uuid:?}")))?;
    tracing::info!(gpu = %row.gpu_uuid, node = %row.node, by = principal.token_id(), "A GPU was moved to another node.");
    Ok(Json(GpuRegistration {
        uuid: row.gpu_uuid,
        node: row.node,
        model: row.model,
        memory_bytes: row.memory_bytes,
        mig_enabled: row.mig_enabled,
    }))
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
    /// A MIG instance's GPU instance id, if its collector sent it.
    pub gpu_instance_id: Option<i16>,
    /// Fraction of the GPU's compute the slice reserves (1 for a time-sliced replica: measured).
    #[schema(value_type = String)]
    pub compute_share: Decimal,
    #[schema(value_type = String)]
    pub memory_share: Decimal,
    /// Who held it in the last hour, if anyone.
    #[serde(rename = "holder")]
    pub consumer: Option<FleetConsumer>,
    /// The slice and its holder as NVIDIA's dcgm-exporter labels their series (`UUID`, `Hostname`,
    /// `modelName`, `GPU_I_PROFILE`, `GPU_I_ID`, `pod`, `namespace`, `container`, `dra_claim_name`,
    /// `dra_claim_namespace`, `dra_driver_name`, `dra_pool_name`, `dra_device_name`), to join with
    /// DCGM dashboards; absent labels are left out.
    pub dcgm: DcgmLabels,
}

// On the wire `holder` (its schema `Holder`), the fleet page's word before the glossary's.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Holder)]
pub struct FleetConsumer {
    #[schema(value_type = String)]
    pub team: TeamId,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub container: Option<String>,
    pub unix_user: Option<String>,
    /// The DRA resource claim it holds the slice through, if any.
    pub dra_claim: Option<DraClaim>,
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
    let rows =
        fleet_store::slices(&state.pool, Utc::now(), fleet_store::LastPresent::Found).await?;
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
        let consumer = r.consumer_team.map(|team| FleetConsumer {
            team,
            namespace: r.consumer_namespace,
            pod: r.consumer_pod,
            container: r.consumer_container,
            unix_user: r.consumer_user,
            dra_claim: r.consumer_dra_claim.map(|c| c.0),
        });
        let dcgm = DcgmLabels::of(
            &Device {
                gpu_uuid: Some(&r.gpu_uuid),
                node: Some(&r.node),
                model: &r.model,
                kind,
                profile: r.profile.as_deref(),
                gpu_instance_id: r.gpu_instance_id,
            },
            consumer
                .as_ref()
                .map(|h| ConsumerReport {
                    namespace: h.namespace.clone(),
                    pod: h.pod.clone(),
                    container: h.container.clone(),
                    dra_claim: h.dra_claim.clone(),
                    ..ConsumerReport::default()
                })
                .as_ref(),
        );
        let gpu = gpus.last_mut().expect("pushed above");
        gpu.slices.push(FleetSlice {
            uuid,
            kind: kind.as_str().to_owned(),
            profile: r.profile,
            gpu_instance_id: r.gpu_instance_id,
            compute_share: compute_share.normalize(),
            memory_share: memory_share.normalize(),
            consumer,
            dcgm,
        });
    }
    Ok(Json(Fleet { gpus }))
}
