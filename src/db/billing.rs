//! Rate cards, and the rollup aggregates billing prices: usage per (team, model, kind, profile) and
//! GPU presence per model, each split by the rate card version in force for its hours.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use crate::billing::pricing::{PresenceAggregate, UsageAggregate};
use crate::billing::rate_card::{Currency, IdlePolicy, IsolationFactors, RateCard};
use crate::db::audit::{self, Actor};
use crate::domain::slice::{ShareWeights, SliceKind};
use crate::domain::team::TeamId;
use crate::domain::time::Month;
use crate::domain::usage::OccupancySums;

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

#[derive(Debug, thiserror::Error)]
pub enum RateCardConflict {
    #[error("effective_from must be later than {0}, the latest version's")]
    NotLater(DateTime<Utc>),
    #[error(
        "effective_from falls in {0}, a period with issued invoices; a new version may start from {1}"
    )]
    IssuedPeriod(NaiveDate, NaiveDate),
    #[error("the published versions are in {0}; one deployment bills in one currency")]
    Currency(String),
    #[error("there is no rate card version {0}")]
    NotFound(i64),
    #[error(
        "rate card version {0} is in force since {1} and cannot be withdrawn; publish a new version instead"
    )]
    InForce(i64, DateTime<Utc>),
    #[error("rate card version {0} prices {1} invoice lines and cannot be withdrawn")]
    Invoiced(i64, i64),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Withdraws a version that is not in force yet and has no invoice behind it (a mistyped date or
/// price, say), on the record. Returns the version withdrawn.
pub async fn withdraw_rate_card(
    pool: &PgPool,
    id: i64,
    now: DateTime<Utc>,
    actor: &Actor,
) -> Result<RateCard, RateCardConflict> {
    let card = rate_cards(pool)
        .await?
        .remove(&id)
        .ok_or(RateCardConflict::NotFound(id))?;
    let mut tx = pool.begin().await?;
    sqlx::query!("lock table rate_card in share row exclusive mode")
        .execute(&mut *tx)
        .await?;
    if card.effective_from <= now {
        return Err(RateCardConflict::InForce(id, card.effective_from));
    }
    let lines = sqlx::query_scalar!(
        r#"select count(*) as "n!" from invoice_line where rate_card_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    if lines > 0 {
        return Err(RateCardConflict::Invoiced(id, lines));
    }
    let deleted = sqlx::query!("delete from rate_card where rate_card_id = $1", id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if deleted == 0 {
        return Err(RateCardConflict::NotFound(id));
    }
    audit::record(
        &mut tx,
        actor,
        "rate_card.withdraw",
        &format!("v{id}"),
        serde_json::json!({"effective_from": card.effective_from, "prices": card.prices}),
    )
    .await?;
    tx.commit().await?;
    Ok(card)
}

/// Publishes a new version. It must start after every published version and after every period with
/// issued invoices, and keep the currency.
pub async fn insert_rate_card(
    pool: &PgPool,
    card: &RateCard,
    actor: &Actor,
) -> Result<i64, RateCardConflict> {
    let mut tx = pool.begin().await?;
    sqlx::query!("lock table rate_card in share row exclusive mode")
        .execute(&mut *tx)
        .await?;
    let latest = sqlx::query!(
        "select effective_from, currency from rate_card order by effective_from desc limit 1"
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(latest) = latest {
        if card.effective_from <= latest.effective_from {
            return Err(RateCardConflict::NotLater(latest.effective_from));
        }
        if latest.currency != card.currency.code {
            return Err(RateCardConflict::Currency(latest.currency));
        }
    }
    if let Some(last_issued) =
        sqlx::query_scalar!("select max(period) from invoice where status in ('issued', 'void')")
            .fetch_one(&mut *tx)
            .await?
    {
        let free_from = crate::domain::time::next_month(last_issued);
        if card.effective_from < crate::domain::time::start_of(free_from) {
            return Err(RateCardConflict::IssuedPeriod(
                crate::domain::time::month_of(card.effective_from),
                free_from,
            ));
        }
    }
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
        actor.token_id
    )
    .fetch_one(&mut *tx)
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
    .execute(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        actor,
        "rate_card.publish",
        &format!("v{id}"),
        serde_json::json!({
            "effective_from": card.effective_from, "currency": card.currency.code,
            "idle_policy": card.idle_policy.as_str(), "default_hourly_cost": card.default_hourly_cost,
            "prices": card.prices,
        }),
    )
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// Usage of `month` per (team, model, kind, profile, rate card in force), optionally of one team,
/// from its books or the rollups (`from_book`), and the first day no rate card covered, if any.
pub async fn usage_aggregates(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
    team: Option<&TeamId>,
) -> Result<(Vec<(UsageAggregate, Option<i64>)>, Option<DateTime<Utc>>), sqlx::Error> {
    let rows = sqlx::query!(
        // Two steps: sum the slice-days per slice first (additions only), then weigh each slice's
        // sums by its shares: a handful of multiplications per slice instead of per row.
        r#"with per_slice as (
               select d.slice_id, d.team_id, d.rate_card_id, d.model, d.kind, d.profile,
                      d.compute_share, d.memory_share, d.memory_reserved_bytes,
                      sum(d.windows)::int8 as windows, min(d.day) as first_hour,
                      sum(d.held_seconds) as held, sum(d.known_seconds) as known,
                      sum(d.active_seconds) as active, sum(d.memory_byte_seconds) as memory
               from period_slice_day($1, $2) d
               where $3::text is null or d.team_id = $3
               group by 1, 2, 3, 4, 5, 6, 7, 8, 9)
           select p.team_id as "team!", p.model as "model!", p.kind as "kind!", p.profile,
                  p.rate_card_id as "rate_card?",
                  count(*) as "slices!",
                  sum(p.windows)::int8 as "windows!",
                  min(p.first_hour) as "first_hour!",
                  round(sum(p.held), 12) as "held_seconds!",
                  round(sum(p.held * p.compute_share), 12) as "held_compute!",
                  round(sum(p.held * p.memory_share), 12) as "held_memory!",
                  round(sum(p.known), 12) as "known_seconds!",
                  round(sum(p.known * p.compute_share), 12) as "known_compute!",
                  round(sum(p.active), 12) as "active_seconds!",
                  round(sum(p.active * p.compute_share), 12) as "active_compute!",
                  round(sum(p.memory) / 1073741824, 6) as "memory_gib_seconds!",
                  round(sum(p.memory * p.memory_share / p.memory_reserved_bytes), 12) as "memory_used!"
           from per_slice p
           group by 1, 2, 3, 4, 5
           order by 1, 2, 3, 4, 5"#,
        month.first_day(),
        from_book,
        team.map(TeamId::as_str)
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut uncovered: Option<DateTime<Utc>> = None;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if r.rate_card.is_none() {
            uncovered = Some(uncovered.map_or(r.first_hour, |u| u.min(r.first_hour)));
        }
        out.push((
            UsageAggregate {
                team: r.team,
                model: r.model,
                kind: SliceKind::from_str(&r.kind).map_err(decode)?,
                profile: r.profile,
                rate_card: r.rate_card.unwrap_or_default(),
                slices: r.slices,
                sums: OccupancySums {
                    held_seconds: r.held_seconds,
                    held_compute: r.held_compute,
                    held_memory: r.held_memory,
                    known_seconds: r.known_seconds,
                    known_compute: r.known_compute,
                    active_seconds: r.active_seconds,
                    active_compute: r.active_compute,
                    memory_gib_seconds: r.memory_gib_seconds,
                    memory_used: r.memory_used,
                    windows: r.windows,
                },
            },
            r.rate_card,
        ));
    }
    Ok((out, uncovered))
}

/// GPU presence of `month` per (model, rate card in force), from its books or the rollups, and the
/// first uncovered day.
pub async fn presence_aggregates(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
) -> Result<(Vec<(PresenceAggregate, Option<i64>)>, Option<DateTime<Utc>>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"select d.model as "model!", d.rate_card_id as "rate_card?",
                  min(d.day) as "first_hour!", sum(d.present_seconds) as "present_seconds!"
           from period_model_day($1, $2) d
           group by 1, 2
           order by 1, 2"#,
        month.first_day(),
        from_book
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut uncovered: Option<DateTime<Utc>> = None;
    let out = rows
        .into_iter()
        .map(|r| {
            if r.rate_card.is_none() {
                uncovered = Some(uncovered.map_or(r.first_hour, |u| u.min(r.first_hour)));
            }
            (
                PresenceAggregate {
                    model: r.model,
                    rate_card: r.rate_card.unwrap_or_default(),
                    present_seconds: r.present_seconds,
                },
                r.rate_card,
            )
        })
        .collect();
    Ok((out, uncovered))
}
