//! Billing: rate cards, pricing by physical share, the monthly statement of every unit of fleet cost,
//! and invoices. `pricing`, `period` and `rate_card` are pure; this module feeds them from the
//! database.

pub mod invoice;
pub mod period;
pub mod pricing;
pub mod rate_card;
pub mod report;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;

use crate::db;
use crate::db::audit::Actor;
use crate::domain::time::Month;
use invoice::Invoice;
use period::{BillingError, PeriodBill};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Billing(#[from] BillingError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// How far back a draft run looks for issued periods that changed since.
pub const CORRECTION_LOOKBACK_MONTHS: u32 = 12;

/// Prices `month` for every team from the rollups.
pub async fn period_bill(pool: &PgPool, month: Month) -> Result<PeriodBill, Error> {
    let mut conn = pool.acquire().await?;
    let (usage, usage_gap) =
        db::billing::usage_aggregates(&mut conn, month.start(), month.end(), None).await?;
    let (presence, presence_gap) =
        db::billing::presence_aggregates(&mut conn, month.start(), month.end()).await?;
    drop(conn);
    let cards = db::billing::rate_cards(pool).await?;
    let gap = [usage_gap, presence_gap].into_iter().flatten().min();
    Ok(period::bill(
        &usage,
        &presence,
        &cards,
        gap.map(|g| g.to_rfc3339()),
    )?)
}

/// What a draft run did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunSummary {
    pub period: Month,
    /// The drafts made, one per team with usage or corrections.
    pub drafts: Vec<Invoice>,
    /// Teams whose invoice for the period is already issued; changes reach their next invoice as
    /// corrections.
    pub already_issued: Vec<String>,
}

/// Makes or replaces the drafts of `month` for every team with usage, with correction lines for
/// earlier issued periods that changed since they were issued.
pub async fn run_drafts(pool: &PgPool, month: Month, actor: &Actor) -> Result<RunSummary, Error> {
    let bill = period_bill(pool, month).await?;
    let mut conn = pool.acquire().await?;
    let issued = db::invoices::issued_teams(&mut conn, month).await?;
    let earlier = db::invoices::periods_with_issued(
        &mut conn,
        month.minus(CORRECTION_LOOKBACK_MONTHS),
        month,
    )
    .await?;
    drop(conn);
    let cards = db::billing::rate_cards(pool).await?;
    let currency = bill
        .currency
        .clone()
        .or_else(|| cards.values().last().map(|c| c.currency.clone()));
    let mut corrections: BTreeMap<String, Vec<period::Line>> = BTreeMap::new();
    if let Some(currency) = &currency {
        for q in earlier {
            let then = period_bill(pool, q).await?;
            let mut conn = pool.acquire().await?;
            let billed = db::invoices::billed(&mut conn, q).await?;
            let issued_then = db::invoices::issued_teams(&mut conn, q).await?;
            drop(conn);
            for team in issued_then {
                let fixes = invoice::corrections(
                    q,
                    then.lines.get(&team).map(Vec::as_slice),
                    billed.get(&team).unwrap_or(&BTreeMap::new()),
                    currency,
                );
                corrections.entry(team).or_default().extend(fixes);
            }
        }
    }
    let drafts = invoice::drafts(&bill, &issued, corrections);
    let mut tx = pool.begin().await?;
    // One run per period at a time; the second waits and then replaces the first's drafts.
    sqlx::query("select pg_advisory_xact_lock(hashtext('slicemeter.invoice_run:' || $1))")
        .bind(month.to_string())
        .execute(&mut *tx)
        .await?;
    // Lines exist only where a rate card priced something, so a draft always has a currency.
    let code = currency.map(|c| c.code).unwrap_or_default();
    let ids = db::invoices::replace_drafts(&mut tx, month, &code, &drafts).await?;
    let totals: Vec<serde_json::Value> = drafts
        .iter()
        .map(|(team, lines)| {
            let total: rust_decimal::Decimal = lines.iter().map(|l| l.amount).sum();
            serde_json::json!({"team": team, "total": total})
        })
        .collect();
    db::audit::record(
        &mut tx,
        actor,
        "invoice.run",
        &month.to_string(),
        serde_json::json!({"drafts": totals, "already_issued": issued}),
    )
    .await?;
    tx.commit().await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.extend(db::invoices::get(pool, id).await?);
    }
    Ok(RunSummary {
        period: month,
        drafts: out,
        already_issued: issued
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    })
}
