//! Unit definitions' rows: put (created or replaced) and deleted in the transaction that audits the
//! change, read by name or all; and each unit's kept counts (`units::counts`): kept a step at a
//! time, read for a period, dropped when the definition's counting changes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, PgPool};

use super::count::{Increases, SeriesId, UnitKey};
use super::{UnitDefinition, UnitDefinitionView};
use crate::audit::{AuditAction, store as audit};
use crate::domain::access::Actor;

/// Stores `def` under its name, replacing what was there; audited as `unit.put` with the definition.
/// A definition whose counting changes (its expression or a label) loses its kept counts: they are
/// counted again. Returns whether it replaced one.
pub async fn put(pool: &PgPool, def: &UnitDefinition, actor: &Actor) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let old = locked(&mut tx, &def.name).await?;
    if old.as_ref().is_some_and(|old| !old.counts_like(def)) {
        sqlx::query!("delete from unit_count_span where unit = $1", def.name)
            .execute(&mut *tx)
            .await?;
    }
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
    Ok(old.is_some())
}

/// The definition `name`, its row locked until the transaction ends: `put` and the counting's
/// step lock it before the unit's span, so neither waits on the other in turn.
async fn locked(tx: &mut PgConnection, name: &str) -> Result<Option<UnitDefinition>, sqlx::Error> {
    let row = sqlx::query_as!(
        Row,
        "select name, expression, model_label, namespace_label, pod_label, workload_label,
                per_units, description, updated_at
         from unit_definition where name = $1 for update",
        name
    )
    .fetch_optional(tx)
    .await?;
    Ok(row.map(|r| UnitDefinitionView::from(r).definition))
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

/// The hours kept of the unit `name` (`units::counts`): `[kept_from, kept_to)`, if any.
pub async fn count_span<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, sqlx::Error> {
    let row = sqlx::query!(
        "select kept_from, kept_to from unit_count_span where unit = $1",
        name
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.kept_from, r.kept_to)))
}

/// What is kept of a unit's counts for a read of `[from, to)`, read at one moment.
#[derive(Debug, Default)]
pub struct KeptCounts {
    /// `[kept_from, kept_to)`, if anything is kept.
    pub span: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Each kept hour's increases in `[from, to)`.
    pub hours: Vec<((DateTime<Utc>, UnitKey), f64)>,
    /// Where each series stood at `kept_to`.
    pub stood: HashMap<SeriesId, f64>,
}

/// The kept hours of the unit `name` in `[from, to)`, its span and where its series stood at the
/// span's end, in one snapshot: a step of the counting between the reads cannot mix two ends.
pub async fn kept_counts(
    pool: &PgPool,
    name: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<KeptCounts, sqlx::Error> {
    let mut tx = crate::db::read_snapshot(pool).await?;
    let mut kept = KeptCounts::default();
    let Some((kept_from, kept_to)) = count_span(&mut *tx, name).await? else {
        return Ok(kept);
    };
    kept.span = Some((kept_from, kept_to));
    kept.hours = sqlx::query!(
        "select hour, namespace, join_key, model, units from unit_hour_count
         where unit = $1 and hour >= $2 and hour < $3",
        name,
        from,
        to
    )
    .fetch(&mut *tx)
    .map_ok(|r| {
        let key = UnitKey {
            namespace: r.namespace,
            join: r.join_key,
            model: r.model,
        };
        ((r.hour, key), r.units)
    })
    .try_collect()
    .await?;
    if to > kept_to {
        kept.stood = stood(&mut tx, name).await?;
    }
    tx.commit().await?;
    Ok(kept)
}

/// Where each series of the unit `name` stood at its `kept_to`.
pub async fn stood(
    conn: &mut PgConnection,
    name: &str,
) -> Result<HashMap<SeriesId, f64>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select name, labels as "labels: Json<Vec<(String, String)>>", value
           from unit_count_stand where unit = $1"#,
        name
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ((r.name, r.labels.0), r.value))
        .collect())
}

/// Keeps `inc`, the counts of `def`'s hours `[from, to)`, extending its kept span from `from`
/// (a new span starts at `from`); false, keeping nothing, when the definition changed or went
/// since it was read, or the span no longer ends at `from` (another server kept those hours).
pub async fn keep_counts(
    pool: &PgPool,
    def: &UnitDefinition,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    inc: &Increases,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if !locked(&mut tx, &def.name)
        .await?
        .is_some_and(|now| now.counts_like(def))
    {
        return Ok(false);
    }
    let extended = sqlx::query!(
        "insert into unit_count_span (unit, kept_from, kept_to) values ($1, $2, $3)
         on conflict (unit) do update set kept_to = excluded.kept_to
         where unit_count_span.kept_to = $2",
        def.name,
        from,
        to
    )
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !extended {
        return Ok(false);
    }
    let n = inc.hours.len();
    let (mut hours, mut namespaces, mut joins, mut models, mut units) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for ((hour, key), u) in &inc.hours {
        hours.push(*hour);
        namespaces.push(key.namespace.clone());
        joins.push(key.join.clone());
        models.push(key.model.clone());
        units.push(*u);
    }
    sqlx::query!(
        "insert into unit_hour_count (unit, hour, namespace, join_key, model, units)
         select $1, * from unnest($2::timestamptz[], $3::text[], $4::text[], $5::text[],
                                  $6::float8[])",
        def.name,
        &hours,
        &namespaces as &[Option<String>],
        &joins as &[Option<String>],
        &models as &[Option<String>],
        &units
    )
    .execute(&mut *tx)
    .await?;
    // Where the series seen stand now; those unseen for 31 days forgotten.
    let (mut names, mut labels, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for ((name, series), v) in &inc.last {
        names.push(name.clone());
        labels.push(serde_json::to_value(series).unwrap_or_default());
        values.push(*v);
    }
    sqlx::query!(
        "insert into unit_count_stand (unit, name, labels, value, seen_to)
         select $1, s.name, s.labels, s.value, $5
         from unnest($2::text[], $3::jsonb[], $4::float8[]) s(name, labels, value)
         on conflict (unit, name, labels) do update
             set value = excluded.value, seen_to = excluded.seen_to",
        def.name,
        &names,
        &labels,
        &values,
        to
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "delete from unit_count_stand where unit = $1 and seen_to < $2::timestamptz - interval '31 days'",
        def.name,
        to
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}
