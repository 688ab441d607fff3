//! Billing's service: it feeds the pure pricing, period and invoice rules from the stores and owns
//! the transactions and locks of rate-card changes, invoice runs, issues and credits.
//!
//! Every run, issue and credit of a period first takes the period's lock, and reads what it decides
//! on only then, so that they are serialized whatever arrives at once: they answer 2xx or 409, and
//! numbers stay gap-free. Issues and credits also take one lock for all periods, because a correction
//! on one period's invoice is billed for another period and must be billed once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use utoipa::ToSchema;

use super::invoice::{self, Billed, Invoice, InvoiceError, PricedKey, store as invoices};
use super::period::{self, BillingError, Books, PeriodBill};
use super::rate_card::{self, RateCard, RateCardConflict, RateCardInput, store as rate_cards};
use super::store;
use crate::audit::{AuditAction, store as audit};
use crate::domain::access::Actor;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Billing(#[from] BillingError),
    #[error(transparent)]
    Invoice(#[from] InvoiceError),
    #[error(transparent)]
    RateCard(#[from] RateCardConflict),
    #[error("there are no drafts for {0}: run the drafts of the period first")]
    NoDrafts(Month),
    #[error(
        "the drafts of {0} were made before this version kept the books of a run; run the drafts of {0} again, then issue"
    )]
    NoBooks(Month),
    #[error(
        "invoice {id}'s corrections for {corrects} are out of date: something was billed or credited for {corrects} since the drafts of {period} were made; run the drafts of {period} again, then issue"
    )]
    StaleCorrections {
        id: i64,
        corrects: Month,
        period: Month,
    },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// How invoices are issued.
#[derive(Debug, Clone, Copy)]
pub struct BillingConfig {
    /// How long after a month ends its invoices wait for late data before they can be issued.
    pub issue_grace: Duration,
}

impl Default for BillingConfig {
    fn default() -> Self {
        BillingConfig {
            issue_grace: Duration::days(1),
        }
    }
}

/// How far back a draft run looks for issued periods that changed since.
pub const CORRECTION_LOOKBACK_MONTHS: u32 = 12;

/// Prices `month` for every team from its books (`from_book`) or from what the rollups hold now;
/// not yet checked to be publishable.
async fn bill_in(
    conn: &mut PgConnection,
    month: Month,
    from_book: bool,
) -> Result<PeriodBill, Error> {
    let (usage, usage_gap) = store::usage_aggregates(conn, month, from_book, None).await?;
    let (presence, presence_gap) = store::presence_aggregates(conn, month, from_book).await?;
    let cards = rate_cards::rate_cards_in(conn).await?;
    let gap = [usage_gap, presence_gap].into_iter().flatten().min();
    Ok(period::bill(
        &usage,
        &presence,
        &cards,
        gap.map(|g| g.to_rfc3339()),
    )?)
}

/// The months in `[first, last]` whose books are frozen (issued), in one read.
pub async fn issued_periods(
    pool: &PgPool,
    first: Month,
    last: Month,
) -> Result<BTreeSet<Month>, Error> {
    let mut conn = pool.acquire().await?;
    let months = store::issued_periods(&mut conn, first, last).await?;
    Ok(months.into_iter().collect())
}

/// `month` priced as its books say once it is issued, else from what the rollups hold now; and
/// where its books stand.
pub async fn period_bill(pool: &PgPool, month: Month) -> Result<(PeriodBill, Books), Error> {
    let mut conn = pool.acquire().await?;
    let books = store::books(&mut conn, month).await?;
    let bill = bill_in(&mut conn, month, books.issued())
        .await?
        .publishable()?;
    Ok((bill, books))
}

/// What the issued period `month` would be billed now, less what was billed for it, per team: late
/// windows and consumers attributed since (to a team with an invoice for the month or without one),
/// to be billed once on a later period's invoices. Teams with a draft for the month (it bills the
/// month itself) or only a voided invoice (credited on purpose) have none; nor has `unattributed`.
async fn corrections_of(
    conn: &mut PgConnection,
    month: Month,
) -> Result<BTreeMap<TeamId, Vec<period::Line>>, Error> {
    let now = bill_in(conn, month, false).await?;
    let Some(currency) = now.currency.clone() else {
        return Ok(BTreeMap::new());
    };
    let billed = invoices::billed(conn, month).await?;
    let unbilled = invoices::unbilled_teams(conn, month).await?;
    let teams: BTreeSet<&TeamId> = now.lines.keys().chain(billed.keys()).collect();
    let mut out = BTreeMap::new();
    for team in teams {
        if team.is_unattributed() || unbilled.contains(team) {
            continue;
        }
        let fixes = invoice::corrections(
            month,
            now.lines.get(team).map(Vec::as_slice),
            billed.get(team).unwrap_or(&BTreeMap::new()),
            &currency,
        );
        if !fixes.is_empty() {
            out.insert(team.clone(), fixes);
        }
    }
    Ok(out)
}

/// The corrections an issued period is waiting for (see [`corrections_of`]); none for a period that
/// is not issued.
pub async fn pending_corrections(
    pool: &PgPool,
    month: Month,
) -> Result<BTreeMap<TeamId, Vec<period::Line>>, Error> {
    let mut conn = pool.acquire().await?;
    if !store::books(&mut conn, month).await?.issued() {
        return Ok(BTreeMap::new());
    }
    corrections_of(&mut conn, month).await
}

/// What a draft run did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunSummary {
    pub period: Month,
    /// The drafts, one per team with usage or corrections (`unattributed` is never invoiced). A
    /// team's draft keeps its id from run to run.
    pub drafts: Vec<Invoice>,
    /// Teams whose invoice for the period is already issued; changes reach their next invoice as
    /// corrections.
    #[schema(value_type = Vec<String>)]
    pub already_issued: Vec<TeamId>,
}

/// Makes or remakes the drafts of `month` (which must have ended) for every team with usage, with
/// correction lines for earlier issued periods that changed since they were issued. While none of
/// the month's invoices is issued, the run first writes the month's books from the rollups; once
/// one is, the books are frozen and the drafts are priced from them.
pub async fn run_drafts(
    pool: &PgPool,
    month: Month,
    now: DateTime<Utc>,
    actor: &Actor,
) -> Result<RunSummary, Error> {
    period::may_draft(month, now)?;
    let mut tx = pool.begin().await?;
    store::lock_period(&mut tx, month).await?;
    if !store::books(&mut tx, month).await?.issued() {
        store::write_books(&mut tx, month).await?;
    }
    let bill = bill_in(&mut tx, month, true).await?.publishable()?;
    let issued = invoices::issued_teams(&mut tx, month).await?;
    let cards = rate_cards::rate_cards_in(&mut tx).await?;
    let currency = bill
        .currency
        .clone()
        .or_else(|| cards.values().last().map(|c| c.currency.clone()));
    let mut corrections: BTreeMap<TeamId, Vec<period::Line>> = BTreeMap::new();
    let earlier =
        invoices::periods_with_issued(&mut tx, month.minus(CORRECTION_LOOKBACK_MONTHS), month)
            .await?;
    for q in earlier {
        for (team, fixes) in corrections_of(&mut tx, q).await? {
            // A draft of a period in between is where these corrections go.
            if !invoices::has_draft_between(&mut tx, &team, q, month).await? {
                corrections.entry(team).or_default().extend(fixes);
            }
        }
    }
    let drafts = invoice::drafts(&bill, &issued, corrections);
    // Lines exist only where a rate card priced something, so a draft always has a currency.
    let code = currency.map(|c| c.code).unwrap_or_default();
    let ids = invoices::write_drafts(&mut tx, month, &code, &drafts).await?;
    let totals: Vec<serde_json::Value> = drafts
        .iter()
        .map(|(team, lines)| {
            let total: rust_decimal::Decimal = lines.iter().map(|l| l.amount).sum();
            serde_json::json!({"team": team, "total": total})
        })
        .collect();
    audit::record(
        &mut tx,
        actor,
        AuditAction::InvoiceRun,
        &month.to_string(),
        serde_json::json!({"drafts": totals, "already_issued": issued}),
    )
    .await?;
    tx.commit().await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.extend(invoices::get(pool, id).await?);
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

/// Issues the drafts `ids` of `month` in `tx`, in order: each gets the next number of the year,
/// the month's books are frozen, and each draft's corrections are checked to be still unbilled.
async fn issue_in(
    tx: &mut PgConnection,
    month: Month,
    ids: &[i64],
    actor: &Actor,
) -> Result<(), Error> {
    store::lock_issuing(tx).await?;
    // No rate card version may be published into the month while it is being issued.
    rate_cards::hold(tx).await?;
    if !store::freeze_books(tx, month).await? {
        return Err(Error::NoBooks(month));
    }
    let mut billed: HashMap<Month, BTreeMap<TeamId, BTreeMap<PricedKey, Billed>>> = HashMap::new();
    for &id in ids {
        let head = invoices::head(tx, id)
            .await?
            .ok_or(InvoiceError::NotFound(id))?;
        for (corrects, key, before) in invoices::corrections_of(tx, id).await? {
            if let std::collections::hash_map::Entry::Vacant(e) = billed.entry(corrects) {
                e.insert(invoices::billed(tx, corrects).await?);
            }
            let now = billed[&corrects]
                .get(&head.team)
                .and_then(|keys| keys.get(&key))
                .map_or(rust_decimal::Decimal::ZERO, |b| b.amount);
            if now != before {
                return Err(Error::StaleCorrections {
                    id,
                    corrects,
                    period: month,
                });
            }
        }
        let status = invoices::lock_status(tx, id)
            .await?
            .ok_or(InvoiceError::NotFound(id))?;
        let head = invoice::Head { status, ..head };
        head.may_issue()?;
        let number = invoices::mark_issued(tx, id, actor.token_id).await?;
        audit::record(
            tx,
            actor,
            AuditAction::InvoiceIssue,
            &number,
            serde_json::json!({"invoice_id": id, "team": head.team, "period": head.period,
                               "total": head.total}),
        )
        .await?;
    }
    Ok(())
}

/// Issues one draft: once its month's grace period for late data has passed, with the next
/// gap-free number of the year; its month's books are frozen from then on.
pub async fn issue(
    pool: &PgPool,
    id: i64,
    now: DateTime<Utc>,
    config: &BillingConfig,
    actor: &Actor,
) -> Result<Invoice, Error> {
    let mut tx = pool.begin().await?;
    let head = invoices::head(&mut tx, id)
        .await?
        .ok_or(InvoiceError::NotFound(id))?;
    store::lock_period(&mut tx, head.period).await?;
    period::may_issue(head.period, now, config.issue_grace)?;
    issue_in(&mut tx, head.period, &[id], actor).await?;
    tx.commit().await?;
    invoices::get(pool, id)
        .await?
        .ok_or(InvoiceError::NotFound(id).into())
}

/// Issues every draft of `month` in one transaction, numbered in team order: all or none.
pub async fn issue_period(
    pool: &PgPool,
    month: Month,
    now: DateTime<Utc>,
    config: &BillingConfig,
    actor: &Actor,
) -> Result<Vec<Invoice>, Error> {
    let mut tx = pool.begin().await?;
    store::lock_period(&mut tx, month).await?;
    period::may_issue(month, now, config.issue_grace)?;
    let ids = invoices::drafts_of(&mut tx, month).await?;
    if ids.is_empty() {
        return Err(Error::NoDrafts(month));
    }
    issue_in(&mut tx, month, &ids, actor).await?;
    tx.commit().await?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.extend(invoices::get(pool, id).await?);
    }
    Ok(out)
}

/// Voids an issued invoice by issuing a credit note that reverses it; returns the credit note. When
/// no issued invoice of its month is left, the month's books are unfrozen: the next run prices what
/// the rollups hold then.
pub async fn credit(pool: &PgPool, id: i64, actor: &Actor) -> Result<Invoice, Error> {
    let mut tx = pool.begin().await?;
    let head = invoices::head(&mut tx, id)
        .await?
        .ok_or(InvoiceError::NotFound(id))?;
    store::lock_period(&mut tx, head.period).await?;
    store::lock_issuing(&mut tx).await?;
    let status = invoices::lock_status(&mut tx, id)
        .await?
        .ok_or(InvoiceError::NotFound(id))?;
    invoice::Head {
        status,
        ..head.clone()
    }
    .may_credit()?;
    let note = invoices::insert_credit_note(&mut tx, id).await?;
    let number = invoices::mark_issued(&mut tx, note, actor.token_id).await?;
    let voided = invoices::mark_void(&mut tx, id).await?;
    store::unfreeze_books_if_nothing_issued(&mut tx, head.period).await?;
    audit::record(
        &mut tx,
        actor,
        AuditAction::InvoiceCredit,
        &number,
        serde_json::json!({"credit_note_id": note, "voids": voided, "voided_invoice_id": id,
                           "team": head.team, "total": -head.total}),
    )
    .await?;
    tx.commit().await?;
    invoices::get(pool, note)
        .await?
        .ok_or(InvoiceError::NotFound(note).into())
}

/// Publishes a new rate card version: it must start after every published version and after every
/// period with issued invoices, and keep the currency. Returns its id.
pub async fn publish_rate_card(
    pool: &PgPool,
    card: &RateCard,
    actor: &Actor,
) -> Result<i64, Error> {
    let mut tx = pool.begin().await?;
    rate_cards::lock(&mut tx).await?;
    let latest = rate_cards::latest(&mut tx).await?;
    let last_issued = rate_cards::last_issued_period(&mut tx).await?;
    rate_card::may_publish(
        card,
        latest
            .as_ref()
            .map(|(from, currency)| (*from, currency.as_str())),
        last_issued,
    )?;
    let id = rate_cards::insert(&mut tx, card, actor.token_id).await?;
    audit::record(
        &mut tx,
        actor,
        AuditAction::RateCardPublish,
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

/// Withdraws a version that is not in force yet and has no invoice behind it (a mistyped date or
/// price, say), on the record. Returns the version withdrawn.
pub async fn withdraw_rate_card(
    pool: &PgPool,
    id: i64,
    now: DateTime<Utc>,
    actor: &Actor,
) -> Result<RateCard, Error> {
    let mut tx = pool.begin().await?;
    rate_cards::lock(&mut tx).await?;
    let card = rate_cards::rate_cards_in(&mut tx)
        .await?
        .remove(&id)
        .ok_or(RateCardConflict::NotFound(id))?;
    let lines = rate_cards::lines_priced_by(&mut tx, id).await?;
    rate_card::may_withdraw(&card, now, lines)?;
    if !rate_cards::delete(&mut tx, id).await? {
        return Err(RateCardConflict::NotFound(id).into());
    }
    audit::record(
        &mut tx,
        actor,
        AuditAction::RateCardWithdraw,
        &format!("v{id}"),
        serde_json::json!({"effective_from": card.effective_from, "prices": card.prices}),
    )
    .await?;
    tx.commit().await?;
    Ok(card)
}

/// Why a rate card file could not be published.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0} is not a rate card: {1}")]
    Parse(String, toml::de::Error),
    #[error("{0} is invalid: {1}")]
    Invalid(String, String),
    #[error(transparent)]
    Publish(#[from] Error),
}

/// Publishes the rate card version in a TOML file (`slicemeter rate-card load`).
pub async fn load_rate_card(pool: &PgPool, path: &Path, actor: &Actor) -> Result<i64, LoadError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::Read(name.clone(), e))?;
    let input: RateCardInput =
        toml::from_str(&text).map_err(|e| LoadError::Parse(name.clone(), e))?;
    let card = input.validate(Utc::now()).map_err(|errors| {
        LoadError::Invalid(
            name.clone(),
            errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    Ok(publish_rate_card(pool, &card, actor).await?)
}

/// The invoices (without lines), of one period and one team where given, by period, team and id:
/// what the dashboard lists.
pub async fn invoices(
    pool: &PgPool,
    period: Option<Month>,
    team: Option<&TeamId>,
) -> Result<Vec<Invoice>, sqlx::Error> {
    invoices::list(pool, period, team).await
}

/// One invoice with its lines.
pub async fn invoice(pool: &PgPool, id: i64) -> Result<Option<Invoice>, sqlx::Error> {
    invoices::get(pool, id).await
}

/// Every rate card, by id.
pub async fn rate_cards(pool: &PgPool) -> Result<BTreeMap<i64, RateCard>, sqlx::Error> {
    rate_cards::rate_cards(pool).await
}
