//! Today's MIG layouts, as the rollups show them.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// A card as it is today, with the MIG instances held on it.
#[derive(Debug, Clone)]
pub struct CardToday {
    pub gpu_uuid: String,
    pub node: String,
    pub model: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub instances: Vec<InstanceToday>,
}

#[derive(Debug, Clone)]
pub struct InstanceToday {
    pub slice_uuid: String,
    pub profile: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
}

/// Every MIG-mode card (of `model`, when given) reported present since `since`, with the MIG
/// instances held in the last hour it was present.
pub async fn cards_today(
    pool: &PgPool,
    since: DateTime<Utc>,
    model: Option<&str>,
) -> Result<Vec<CardToday>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"with last as (
               select h.gpu_id, max(h.hour) as hour from gpu_hourly h
               where h.hour >= $1 group by h.gpu_id)
           select g.gpu_uuid, g.node, g.model, g.compute_slices as gpu_compute,
                  g.memory_slices as gpu_memory,
                  i.slice_uuid as "slice_uuid?", i.profile as "profile?",
                  i.compute_slices as "compute_slices?", i.memory_slices as "memory_slices?"
           from last l
           join gpu g on g.gpu_id = l.gpu_id
           left join lateral (
               select distinct s.slice_uuid, s.profile, s.compute_slices, s.memory_slices
               from slice s
               join usage_hourly u on u.slice_id = s.slice_id and u.hour = l.hour
               where s.gpu_id = l.gpu_id and s.kind = 'mig' and u.held_seconds > 0) i on true
           where g.mig_enabled and ($2::text is null or g.model = $2)
           order by g.model, g.node, g.gpu_uuid, i.slice_uuid"#,
        since,
        model
    )
    .fetch_all(pool)
    .await?;
    let mut cards: Vec<CardToday> = Vec::new();
    for r in rows {
        if cards.last().is_none_or(|c| c.gpu_uuid != r.gpu_uuid) {
            cards.push(CardToday {
                gpu_uuid: r.gpu_uuid.clone(),
                node: r.node.clone(),
                model: r.model.clone(),
                compute_slices: u8::try_from(r.gpu_compute).unwrap_or(7),
                memory_slices: u8::try_from(r.gpu_memory).unwrap_or(8),
                instances: Vec::new(),
            });
        }
        if let (Some(uuid), Some(profile), Some(c), Some(m)) =
            (r.slice_uuid, r.profile, r.compute_slices, r.memory_slices)
        {
            let card = cards.last_mut().expect("pushed above");
            card.instances.push(InstanceToday {
                slice_uuid: uuid,
                profile,
                compute_slices: u8::try_from(c).unwrap_or(u8::MAX),
                memory_slices: u8::try_from(m).unwrap_or(u8::MAX),
            });
        }
    }
    Ok(cards)
}
