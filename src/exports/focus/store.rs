//! The FOCUS export's own SQL: each card's presence per rate card version and day of a month, the
//! origin charges of FOCUS 1.3's split cost allocation.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, Row as _};

use crate::domain::time::Month;

/// One card's seconds present on one day under one rate card version.
#[derive(Debug, Clone)]
pub struct CardDayPresence {
    pub gpu_uuid: String,
    pub model: String,
    pub rate_card: i64,
    pub day: DateTime<Utc>,
    pub present_seconds: Decimal,
}

/// Each card's presence per rate card version and day of `month`, from its books when `from_book`
/// (none for books written before they kept cards' days, migration 0028), else the rollups.
pub async fn card_days(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
) -> Result<Vec<CardDayPresence>, sqlx::Error> {
    sqlx::query(
        "select g.gpu_uuid, g.model, d.rate_card_id, d.day, d.present_seconds
         from period_gpu_day($1, $2) d join gpu g using (gpu_id)
         where d.rate_card_id is not null",
    )
    .bind(month.first_day())
    .bind(from_book)
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|r| {
        Ok(CardDayPresence {
            gpu_uuid: r.try_get("gpu_uuid")?,
            model: r.try_get("model")?,
            rate_card: r.try_get("rate_card_id")?,
            day: r.try_get("day")?,
            present_seconds: r.try_get("present_seconds")?,
        })
    })
    .collect()
}
