//! The fleet as it stands: GPUs, their slices and who holds them, and which node may report each GPU
//! (a GPU belongs to the node that first reported it until an admin moves it, on the record).

pub mod store;

/// What the dashboard and the API read of it (the web layer reads through these, not the store).
pub use store::{FleetSliceRow, LastPresent, slices};

use sqlx::PgPool;

use crate::audit::{AuditAction, store as audit};
use crate::domain::access::Actor;
use store::GpuRow;

/// Moves a GPU to another node (the card was moved, or the node renamed), on the record: from then
/// on only `node`'s collector may report it. `None` if there is no such GPU.
pub async fn move_gpu(
    pool: &PgPool,
    uuid: &str,
    node: &str,
    actor: &Actor,
) -> Result<Option<GpuRow>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let Some(from) = store::lock_gpu(&mut tx, uuid).await? else {
        return Ok(None);
    };
    let row = store::set_node(&mut tx, uuid, node).await?;
    audit::record(
        &mut tx,
        actor,
        AuditAction::GpuMove,
        uuid,
        serde_json::json!({"from": from, "to": node}),
    )
    .await?;
    tx.commit().await?;
    Ok(Some(row))
}
