//! The `rate_card` and `rate_card_price` rows, run inside billing's transactions.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use super::{Currency, IdlePolicy, IsolationFactors, RateCard};
use crate::domain::slice::ShareWeights;

fn decode(e: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Decode(e.to_string().into())
}

/// Every rate card version, by id.
pub async fn rate_cards(pool: &PgPool) -> Result<BTreeMap<i64, RateCard>, sqlx::Error> {
    rate_cards_in(&mut *pool.acquire().await?).await
}

/// Every rate card version, by id, read on `conn` (inside a transaction).
pub async fn rate_cards_in(
    conn: &mut PgConnection,
) -> Result<BTreeMap<i64, RateCard>, sqlx::Error> {
    let rows = sqlx::query!(
        "select rate_card_id, effective_from, currency, weight_compute, weight_memory, factor_mig,
                factor_whole, factor_mps, factor_vgpu, factor_timeslice, idle_policy,
                default_hourly_cost, note
         from rate_card order by effective_from"
    )
    .fetch_all(&mut *conn)
    .await?;
    let prices = sqlx::query!("select rate_card_id, gpu_model, hourly_cost from rate_card_price")
        .fetch_all(&mut *conn)
        .await?;
    let mut cards = BTreeMap::new();
    for r in rows {
        cards.insert(
            r.rate_card_id,
            RateCard {
                id: r.rate_card_id,
                effective_from: r.effective_from,
                currency: Currency::parse(&r.currency).map_err(decode)?,
                weights: ShareWeights::new(r.weight_compute, r.weight_memory).map_err(decode)?,
                factors: IsolationFactors {
                    mig: r.factor_mig,
                    whole: r.factor_whole,
                    mps: r.factor_mps,
                    vgpu: r.factor_vgpu,
                    timeslice: r.factor_timeslice,
                },
                idle_policy: IdlePolicy::from_str(&r.idle_policy).map_err(decode)?,
                prices: BTreeMap::new(),
                default_hourly_cost: r.default_hourly_cost,
                note: r.note,
            },
        );
    }
    for p in prices {
        if let Some(card) = cards.get_mut(&p.rate_card_id) {
            card.prices.insert(p.gpu_model, p.hourly_cost);
        }
    }
    Ok(cards)
}

/// Locks the versions against other publishers and withdrawers until the transaction ends.
pub async fn lock(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("lock table rate_card in share row exclusive mode")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Locks the versions against changes (not against readers) until the transaction ends: no version
/// may be published into a month while it is being issued.
pub async fn hold(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("lock table rate_card in share mode")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The latest version's start and currency.
pub async fn latest(
    conn: &mut PgConnection,
) -> Result<Option<(DateTime<Utc>, String)>, sqlx::Error> {
    Ok(sqlx::query!(
        "select effective_from, currency from rate_card order by effective_from desc limit 1"
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| (r.effective_from, r.currency)))
}

/// The last period with an issued (or since voided) invoice.
pub async fn last_issued_period(conn: &mut PgConnection) -> Result<Option<NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!("select max(period) from invoice where status in ('issued', 'void')")
        .fetch_one(&mut *conn)
        .await
}

/// Stores a new version and returns its id.
pub async fn insert(
    conn: &mut PgConnection,
    card: &RateCard,
    created_by: Option<i64>,
) -> Result<i64, sqlx::Error> {
    let id = sqlx::query_scalar!(
        "insert into rate_card (effective_from, currency, minor_units, weight_compute, weight_memory,
                                factor_mig, factor_whole, factor_mps, factor_vgpu, factor_timeslice,
                                idle_policy, default_hourly_cost, note, created_by)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         returning rate_card_id",
        card.effective_from,
        card.currency.code,
        card.currency.minor_units as i16,
        card.weights.compute,
        card.weights.memory,
        card.factors.mig,
        card.factors.whole,
        card.factors.mps,
        card.factors.vgpu,
        card.factors.timeslice,
        card.idle_policy.as_str(),
        card.default_hourly_cost,
        card.note,
        created_by
    )
    .fetch_one(&mut *conn)
    .await?;
    let models: Vec<String> = card.prices.keys().cloned().collect();
    let costs: Vec<Decimal> = card.prices.values().copied().collect();
    sqlx::query!(
        "insert into rate_card_price (rate_card_id, gpu_model, hourly_cost)
         select $1, m, c from unnest($2::text[], $3::numeric[]) as x(m, c)",
        id,
        &models,
        &costs
    )
    .execute(&mut *conn)
    .await?;
    Ok(id)
}

/// How many invoice lines the version priced.
pub async fn lines_priced_by(conn: &mut PgConnection, id: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from invoice_line where rate_card_id = $1"#,
        id
    )
    .fetch_one(&mut *conn)
    .await
}

/// Deletes a version; whether there was one.
pub async fn delete(conn: &mut PgConnection, id: i64) -> Result<bool, sqlx::Error> {
    Ok(
        sqlx::query!("delete from rate_card where rate_card_id = $1", id)
            .execute(&mut *conn)
            .await?
            .rows_affected()
            > 0,
    )
}
