//! The ledger's service: the card, the issued months of the range (read from their books), the rest
//! from the rollups, and the rate cards that price them.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;

use super::store;
use super::{Card, Ledger, ledger};
use crate::billing::rate_card::store as rate_cards;
use crate::billing::service as billing;
use crate::domain::time::Month;
use crate::reports::usage::Step;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("there is no GPU {0:?}")]
    UnknownGpu(String),
    #[error(
        "{0} is issued: its books keep days, so its ledger is read with step=day or step=month"
    )]
    HoursOfIssuedMonth(Month),
    #[error(transparent)]
    Billing(#[from] billing::Error),
}

impl From<sqlx::Error> for LedgerError {
    fn from(e: sqlx::Error) -> Self {
        LedgerError::Billing(e.into())
    }
}

/// The ledger of the GPU `uuid` over `[from, to)` (hour boundaries) at `step`.
pub async fn card_ledger(
    pool: &PgPool,
    uuid: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Step,
) -> Result<Ledger, LedgerError> {
    let gpu = store::gpu(pool, uuid)
        .await?
        .ok_or_else(|| LedgerError::UnknownGpu(uuid.to_owned()))?;
    let issued: BTreeSet<Month> =
        billing::issued_periods(pool, Month::of(from), Month::of(to - Duration::hours(1))).await?;
    if let (Step::Hour, Some(m)) = (step, issued.first()) {
        return Err(LedgerError::HoursOfIssuedMonth(*m));
    }
    let in_books = |bucket: DateTime<Utc>| issued.contains(&Month::of(bucket));
    let (mut consumers, mut presence) = store::from_rollups(pool, &gpu, from, to, step).await?;
    consumers.retain(|h| !in_books(h.bucket));
    presence.retain(|p| !in_books(p.bucket));
    for &m in &issued {
        let (h, p) = store::from_books(pool, &gpu, m, from.max(m.start()), to.min(m.end()), step)
            .await?
            .ok_or(billing::Error::NoBooks(m))?;
        consumers.extend(h);
        presence.extend(p);
    }
    let cards = rate_cards::rate_cards_in(&mut *pool.acquire().await?).await?;
    let card = Card {
        gpu_uuid: gpu.gpu_uuid,
        model: gpu.model,
        node: gpu.node,
    };
    Ok(ledger(
        card, from, to, step, &consumers, &presence, &in_books, &cards,
    )
    .map_err(billing::Error::from)?)
}
