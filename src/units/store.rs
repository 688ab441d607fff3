//! Unit definitions' rows: put (created or replaced) and deleted in the transaction that audits the
//! change, read by name or all.

use sqlx::PgPool;

use super::{UnitDefinition, UnitDefinitionView};
use crate::audit::{AuditAction, store as audit};
use crate::domain::access::Actor;

/// Stores `def` under its name, replacing what was there; audited as `unit.put` with the definition.
/// Returns whether it replaced one.
pub async fn put(pool: &PgPool, def: &UnitDefinition, actor: &Actor) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let existed = sqlx::query_scalar!(
        "select exists (select 1 from unit_definition where name = $1) as \"e!\"",
        def.name
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        "insert into unit_definition (name, expression, model_label, namespace_label, pod_label,
                                      workload_label, per_units, description)
         values ($1, $2, $3, $4, $5, $6, $7, $8)
         on conflict (name) do update set
             expression = excluded.expression, model_label = excluded.model_label,
             namespace_label = excluded.namespace_label, pod_label = excluded.pod_label,
             workload_label = excluded.workload_label, per_units = excluded.per_units,
             description = excluded.description, updated_at = now()",
        def.name,
        def.expression,
        def.model_label,
        def.namespace_label,
        def.pod_label,
        def.workload_label,
        def.per_units,
        def.description
    )
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        actor,
        AuditAction::UnitPut,
        &def.name,
        serde_json::to_value(def).unwrap_or_default(),
    )
    .await?;
    tx.commit().await?;
    Ok(existed)
}

/// Deletes the definition `name`, audited as `unit.delete`; false if there was none.
pub async fn delete(pool: &PgPool, name: &str, actor: &Actor) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let gone = sqlx::query!("delete from unit_definition where name = $1", name)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        > 0;
    if gone {
        audit::record(
            &mut tx,
            actor,
            AuditAction::UnitDelete,
            name,
            serde_json::json!({}),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(gone)
}

/// A row as stored.
struct Row {
    name: String,
    expression: String,
    model_label: Option<String>,
    namespace_label: String,
    pod_label: Option<String>,
    workload_label: Option<String>,
    per_units: i64,
    description: Option<String>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

impl From<Row> for UnitDefinitionView {
    fn from(r: Row) -> Self {
        UnitDefinitionView {
            definition: UnitDefinition {
                name: r.name,
                expression: r.expression,
                model_label: r.model_label,
                namespace_label: r.namespace_label,
                pod_label: r.pod_label,
                workload_label: r.workload_label,
                per_units: r.per_units,
                description: r.description,
            },
            updated_at: r.updated_at,
        }
    }
}

/// Every definition, by name.
pub async fn list(pool: &PgPool) -> Result<Vec<UnitDefinitionView>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Row,
        "select name, expression, model_label, namespace_label, pod_label, workload_label,
                per_units, description, updated_at
         from unit_definition order by name"
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// The definition `name`, if there is one.
pub async fn get(pool: &PgPool, name: &str) -> Result<Option<UnitDefinitionView>, sqlx::Error> {
    let row = sqlx::query_as!(
        Row,
        "select name, expression, model_label, namespace_label, pod_label, workload_label,
                per_units, description, updated_at
         from unit_definition where name = $1",
        name
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Into::into))
}
