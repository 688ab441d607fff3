//! The finance exports, streamed: FOCUS rows straight from a database cursor to CSV chunks (memory
//! does not grow with the fleet), and the ERP journal of a period's issued invoices.
//!
//! The FOCUS export of a month states the month as the monthly report does: one row per (team, slice,
//! day), their amounts carried so that each invoice line's rows sum to its amount; the share of idle
//! capacity spread to teams; correction lines of the month's invoices; and the platform's rows
//! (unallocated capacity and sharing discount per model and day, and the rounding residual). The rows
//! that are not corrections sum to the month's fleet cost, to the cent.
//!
//! The file stays whole: the FOCUS stream's kinds of rows are written in one pass, and what each
//! carries to the next (the allocated sums, the rounding targets) is read beside it.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::{Stream, StreamExt};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use sqlx::PgPool;
use tokio::sync::mpsc;

use super::chunks::{Chunk, ChunkWriter, Piece, checked_stream};
use super::erp::{self, Document, JournalError, Layout, Platform};
use super::focus::split::{Split, idle_spread_ratios};
use super::focus::{
    self, Allocated, Category, Issuer, LineGroup, PlatformFigure, Row, Version, platform_row,
    sku_id, slice_allocation, usage_charge, usage_row,
};
use crate::billing::invoice::{Invoice, InvoiceKind, InvoiceStatus, store as invoices};
use crate::billing::period::{LineKind, PeriodBill};
use crate::billing::pricing::{CarryRounder, Charge};
use crate::billing::rate_card::{IdlePolicy, RateCard, store as rate_cards};
use crate::billing::service::Error as BillingError;
use crate::domain::team::{TeamId, UNATTRIBUTED};
use crate::domain::time::Month;
use crate::reports::service::{self, ReportCache};
use crate::reports::slices::{SliceDay, Unpriced};
use crate::reports::store;

/// Who the exports name as issuer and where the platform's journal credit goes.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub issuer: Issuer,
    pub platform: Platform,
    pub erp_layout: Layout,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            issuer: Issuer::default(),
            platform: Platform {
                cost_center: "GPU-PLATFORM".into(),
                gl_account: "6490".into(),
            },
            erp_layout: Layout::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Billing(#[from] BillingError),
    #[error(transparent)]
    Unpriced(#[from] Unpriced),
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Journal(Vec<JournalError>),
    #[error(
        "the invoices of {period} are not all issued (drafts: {teams}); issue them before exporting journal lines"
    )]
    Drafts { period: Month, teams: String },
    #[error("there are no issued invoices for {0}; run and issue them first")]
    NoInvoices(Month),
    #[error(transparent)]
    Csv(#[from] csv::Error),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What the FOCUS stream needs to know before its rows.
struct FocusPlan {
    month: Month,
    team: Option<TeamId>,
    bill: PeriodBill,
    /// Whether the month is issued: its rows then come from its books.
    issued: bool,
    cards: BTreeMap<i64, RateCard>,
    invoices: Vec<Invoice>,
    /// Each team's voided invoice of the month, by number: its charges were issued on it (and
    /// reversed by a credit note) until a new invoice bills them.
    voided: BTreeMap<TeamId, String>,
    config: Arc<ExportConfig>,
    version: Version,
}

impl FocusPlan {
    async fn read(
        pool: &PgPool,
        cache: &ReportCache,
        month: Month,
        team: Option<TeamId>,
        cards: BTreeMap<i64, RateCard>,
        config: Arc<ExportConfig>,
        version: Version,
    ) -> Result<FocusPlan, ExportError> {
        let inputs = service::month(pool, cache, month).await?;
        let (bill, issued) = (inputs.bill().clone(), inputs.books().issued());
        let mut documents = Vec::new();
        let mut voided = BTreeMap::new();
        for i in invoices::list(pool, Some(month), team.as_ref()).await? {
            if i.kind == InvoiceKind::Invoice && i.status != InvoiceStatus::Void {
                documents.extend(invoices::get(pool, i.id).await?);
            } else if i.kind == InvoiceKind::Invoice
                && let Some(n) = i.number.clone()
            {
                voided.insert(i.team.clone(), n);
            }
        }
        Ok(FocusPlan {
            month,
            team,
            bill,
            issued,
            cards,
            invoices: documents,
            voided,
            config,
            version,
        })
    }
}

/// Whether one rate card or a run of them, in one currency, is in force for every hour of `month`:
/// then pricing the month cannot fail for want of a card or over currencies (`BillingError`), and the
/// export may start before the month is priced.
fn cards_price_all_of(cards: &BTreeMap<i64, RateCard>, month: Month) -> bool {
    let mut in_force: Vec<&RateCard> = cards
        .values()
        .filter(|c| c.effective_from < month.end())
        .collect();
    in_force.sort_by_key(|c| c.effective_from);
    let from_start = in_force
        .iter()
        .rposition(|c| c.effective_from <= month.start());
    match from_start {
        None => false,
        Some(i) => in_force[i..]
            .windows(2)
            .all(|w| w[0].currency == w[1].currency),
    }
}

/// The FOCUS rows of `month` (only `team`'s when given: a team lead's export) as CSV chunks, in
/// `version`'s columns.
///
/// The header is sent at once and the month priced while the client waits on the rows, when the
/// rate cards show that pricing cannot fail; otherwise the month is priced first, so that what
/// stops it (no rate card for some hours, mixed currencies) is an error response, not a cut
/// stream.
pub async fn focus(
    pool: &PgPool,
    cache: &Arc<ReportCache>,
    month: Month,
    team: Option<TeamId>,
    config: Arc<ExportConfig>,
    version: Version,
) -> Result<impl Stream<Item = Chunk> + Send + 'static, ExportError> {
    let cards = rate_cards::rate_cards(pool).await?;
    let header: Vec<String> = version.columns().into_iter().map(str::to_owned).collect();
    let (tx, rx) = mpsc::channel::<Piece>(4);
    let mut w = ChunkWriter::new(tx);
    let (pool, cache) = (pool.clone(), cache.clone());
    if cards_price_all_of(&cards, month) {
        tokio::spawn(async move {
            if !(w.write(&header).await && w.flush().await) {
                return;
            }
            let plan = FocusPlan::read(&pool, &cache, month, team, cards, config, version).await;
            let written = match plan {
                Ok(plan) => write_focus(&pool, plan, w).await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                tracing::error!(error = %e, "The FOCUS export stopped part way.");
            }
        });
    } else {
        let plan = FocusPlan::read(&pool, &cache, month, team, cards, config, version).await?;
        tokio::spawn(async move {
            let written = match w.write(&header).await && w.flush().await {
                true => write_focus(&pool, plan, w).await,
                false => Ok(()),
            };
            if let Err(e) = written {
                tracing::error!(error = %e, "The FOCUS export stopped part way.");
            }
        });
    }
    Ok(checked_stream(rx))
}

/// Slice-day rows made into CSV at once, beside the task that reads them: about 0.5 MB of CSV.
const ROWS_A_BATCH: usize = 512;

/// A slice-day as read, priced and rounded, before its row is made.
struct UsageDay {
    day: SliceDay,
    rate_card: i64,
    charge: Charge,
    /// Its part in FOCUS 1.3's split cost allocation.
    allocation: Option<Allocated>,
    /// Its charge rounded as its invoice line's rows are.
    billed: Decimal,
}

/// The rows of the plan, after the header `w` has sent.
// long: each kind of FOCUS row (slice-days, idle spread, corrections, the platform's) in the order
// the export promises, sharing the running totals that round each invoice line
async fn write_focus(
    pool: &PgPool,
    plan: FocusPlan,
    mut w: ChunkWriter,
) -> Result<(), ExportError> {
    let FocusPlan {
        month,
        team,
        bill,
        issued,
        cards,
        invoices,
        voided,
        config,
        version,
    } = plan;
    let Some(currency) = bill
        .currency
        .clone()
        .or_else(|| cards.values().last().map(|c| c.currency.clone()))
    else {
        // Nothing priced, no rate card: the header alone.
        w.finish().await;
        return Ok(());
    };
    // A team's live invoice, or the voided one its charges were issued on until billed again.
    let mut number_of: BTreeMap<&str, &str> = voided
        .iter()
        .map(|(t, n)| (t.as_str(), n.as_str()))
        .collect();
    number_of.extend(
        invoices
            .iter()
            .filter_map(|i| i.number.as_deref().map(|n| (i.team.as_str(), n))),
    );
    // Once the month is invoiced, the platform's rows (consumers no team claims, unallocated
    // capacity, the sharing discount, rounding) name the document that settles the platform's side
    // of it, the journal's clearing document: every row of an invoiced month is on a document.
    let clearing = erp::clearing_document(month);
    let platform_document = (!number_of.is_empty()).then_some(clearing.as_str());
    if let Some(c) = platform_document {
        number_of.insert(UNATTRIBUTED, c);
    }
    let issuer = &config.issuer;

    // The amount of each usage line, which its rows must sum to.
    let mut targets: BTreeMap<LineGroup, Decimal> = BTreeMap::new();
    for (t, lines) in &bill.lines {
        for l in lines.iter().filter(|l| l.key.kind == LineKind::Usage) {
            let key = (
                t.clone(),
                l.key.gpu_model.clone().unwrap_or_default(),
                l.key.slice_kind,
                l.key.profile.clone(),
                l.key.rate_card,
            );
            targets.insert(key, l.amount);
        }
    }
    // Per (model, rate card, day): what the slices took of the fleet cost, and the discount.
    let mut allocated: BTreeMap<(String, i64, DateTime<Utc>), (Decimal, Decimal)> = BTreeMap::new();

    let days = {
        let mut conn = pool.acquire().await?;
        store::model_days(&mut conn, month, issued).await?
    };
    // FOCUS 1.3's split cost allocation: each card's day, the origin charge that its slices' rows
    // and the unallocated rows split (from the books when the month is issued).
    let mut split = if version == Version::V1_3 {
        let mut conn = pool.acquire().await?;
        Split::read(&mut conn, month, issued).await?
    } else {
        Split::default()
    };

    // This task reads the slice-days in order, prices and rounds each; their rows are made and
    // written as CSV a batch at a time beside it, while it goes on to the next.
    let record = {
        let (cards, currency, issuer) = (cards.clone(), currency.clone(), issuer.clone());
        let numbers: BTreeMap<String, String> = number_of
            .iter()
            .map(|(t, n)| ((*t).to_owned(), (*n).to_owned()))
            .collect();
        Arc::new(move |u: &UsageDay| {
            let card = cards.get(&u.rate_card)?;
            let mut row = usage_row(&u.day, card, &u.charge, &numbers, &issuer);
            row.billed = u.billed;
            row.allocation = u.allocation.clone();
            Some(row.record(month, &currency, &issuer, version))
        })
    };
    let mut batch = Vec::with_capacity(ROWS_A_BATCH);
    // The rows stream for as long as the client reads them: past any request's statement timeout.
    let mut tx = pool.begin().await?;
    crate::db::without_statement_timeout(&mut tx).await?;
    let mut rows = store::slice_days(&mut tx, month, issued, team.as_ref());
    let mut pending: Option<(LineGroup, UsageDay)> = None;
    let mut rounder = CarryRounder::new();
    loop {
        let next = rows.next().await.transpose()?;
        let next = match next {
            Some(day) => {
                let (group, charge) = usage_charge(&day, &cards)?;
                let allocation = match version {
                    Version::V1_3 => split.slice(&day, day.card(&cards)?, slice_allocation(&day)),
                    _ => None,
                };
                let usage = UsageDay {
                    rate_card: group.4,
                    day,
                    charge,
                    allocation,
                    billed: Decimal::ZERO,
                };
                Some((group, usage))
            }
            None => None,
        };
        if let Some((group, mut usage)) = pending.take() {
            let group_ends = next.as_ref().is_none_or(|(g, _)| *g != group);
            let exact = usage.charge.amount.clone();
            usage.billed = match (group_ends, targets.get(&group)) {
                (true, Some(target)) => rounder.last(exact, *target),
                _ => rounder.next(exact, &currency),
            };
            if group_ends {
                rounder = CarryRounder::new();
            }
            batch.push(usage);
            if batch.len() == ROWS_A_BATCH
                && !w
                    .write_batch(std::mem::take(&mut batch), record.clone())
                    .await
            {
                return Ok(());
            }
        }
        let Some((group, usage)) = next else {
            break;
        };
        let list_cost = usage.charge.allocated.to_decimal();
        let e = allocated
            .entry((usage.day.model.clone(), usage.rate_card, usage.day.day))
            .or_default();
        e.0 += list_cost;
        e.1 += list_cost - usage.charge.amount.to_decimal();
        pending = Some((group, usage));
    }
    drop(rows);
    drop(tx);
    if !w.write_batch(batch, record).await {
        return Ok(());
    }

    // Idle capacity spread to teams, one row per team and rate card for the month; each team's
    // share of the version's idle capacity is its ratio.
    let spread_ratios = idle_spread_ratios(bill.lines.iter().flat_map(|(t, lines)| {
        lines
            .iter()
            .filter(|l| l.key.kind == LineKind::IdleSpread)
            .map(move |l| (t.as_str(), l.key.rate_card, l.amount))
    }));
    for (t, lines) in &bill.lines {
        if team.as_ref().is_some_and(|own| own != t) {
            continue;
        }
        for l in lines.iter().filter(|l| l.key.kind == LineKind::IdleSpread) {
            // What falls to consumers no team claims stays on the platform's account.
            let mut tags = BTreeMap::from([("slicemeter/team".to_owned(), t.to_string())]);
            let (sub_account_id, sub_account_name) = if t.is_unattributed() {
                tags.insert("slicemeter/platform".to_owned(), t.to_string());
                (focus::PLATFORM_ACCOUNT.to_owned(), issuer.name.clone())
            } else {
                (t.to_string(), t.to_string())
            };
            let row = Row {
                category: Category::Usage,
                correction: false,
                description: l.description(),
                charge_start: month.start(),
                charge_end: month.end(),
                // A share of several models' idle hours has no hourly price: one share, priced
                // at what it comes to.
                billed: l.amount,
                list_cost: l.amount,
                list_unit_price: Some(l.amount),
                contracted_cost: l.amount,
                contracted_unit_price: Some(l.amount),
                consumed_hours: None,
                pricing_hours: Some(Decimal::ONE),
                pricing_unit: focus::SHARE_UNIT,
                resource_id: None,
                resource_name: None,
                resource_type: None,
                sku_id: "idle-capacity".into(),
                sku_price_id: format!("idle-capacity/v{}", l.key.rate_card),
                sub_account_id,
                sub_account_name,
                tags,
                gpu_model: None,
                slice_kind: None,
                mig_profile: None,
                physical_share: None,
                isolation_factor: None,
                rate_card: Some(l.key.rate_card),
                invoice_number: number_of.get(t.as_str()).map(|n| (*n).to_owned()),
                sku_meter: "Idle capacity",
                allocation: Some(Allocated {
                    method: focus::IDLE_SPREAD,
                    resource: Some((
                        format!("idle-capacity/{t}"),
                        format!("Idle capacity spread to {t}"),
                    )),
                    details: spread_ratios
                        .get(&(t.to_string(), l.key.rate_card))
                        .map(|r| {
                            let mut element = serde_json::Map::new();
                            element.insert(
                                "AllocatedRatio".into(),
                                r.to_f64().unwrap_or_default().into(),
                            );
                            // Reckoned from the team's charges under the version; the row's own
                            // unit (the validator asks every element for a UsageUnit once any
                            // element of the column has a UsageQuantity).
                            element.insert("UsageUnit".into(), focus::SHARE_UNIT.into());
                            let mut details = serde_json::Map::new();
                            details.insert(
                                "Elements".into(),
                                vec![serde_json::Value::Object(element)].into(),
                            );
                            details
                                .insert("x_OriginRateCardVersion".into(), l.key.rate_card.into());
                            details
                        }),
                    tags: BTreeMap::new(),
                }),
            };
            if !w
                .write(&row.record(month, &currency, issuer, version))
                .await
            {
                return Ok(());
            }
        }
    }

    // Corrections the month's invoices carry for earlier periods.
    for i in &invoices {
        for l in i
            .lines
            .iter()
            .filter(|l| l.line_kind == LineKind::Correction)
        {
            let corrected = l.corrects_period.unwrap_or(month);
            let sku = sku_id(l.gpu_model.as_deref(), l.slice_kind, l.profile.as_deref());
            // The hours corrected at the list and contracted prices of the line's rate card; a
            // correction of an idle-capacity share is one share at what it comes to.
            let hourly = l
                .gpu_model
                .as_deref()
                .zip(l.rate_card.and_then(|c| cards.get(&c)))
                .map(|(m, c)| c.hourly_cost(m).0);
            let (list_unit_price, contracted_unit_price, pricing_hours, pricing_unit) =
                match (hourly, l.unit_price) {
                    (Some(h), Some(u)) => (
                        Some(h),
                        Some(u),
                        Some(l.gpu_equivalent_hours),
                        focus::PRICING_UNIT,
                    ),
                    // A price is never negative: a share taken back is minus one share.
                    _ => (
                        Some(l.amount.abs()),
                        Some(l.amount.abs()),
                        Some(if l.amount.is_sign_negative() {
                            -Decimal::ONE
                        } else {
                            Decimal::ONE
                        }),
                        focus::SHARE_UNIT,
                    ),
                };
            let row = Row {
                category: Category::Usage,
                correction: true,
                description: l.description.clone(),
                charge_start: corrected.start(),
                charge_end: corrected.end(),
                billed: l.amount,
                list_cost: l.amount,
                list_unit_price,
                contracted_cost: l.amount,
                contracted_unit_price,
                consumed_hours: Some(l.slice_hours),
                pricing_hours,
                pricing_unit,
                // The line's slices, not one resource: no resource, so no type (ResourceType-C-004-C).
                resource_id: None,
                resource_name: None,
                resource_type: None,
                sku_price_id: format!("{sku}/v{}", l.rate_card.unwrap_or_default()),
                sku_id: sku,
                sub_account_id: i.team.to_string(),
                sub_account_name: i.team.to_string(),
                tags: BTreeMap::from([
                    ("slicemeter/team".to_owned(), i.team.to_string()),
                    ("slicemeter/corrects".to_owned(), corrected.to_string()),
                ]),
                gpu_model: l.gpu_model.clone(),
                slice_kind: l.slice_kind.map(|k| k.as_str().to_owned()),
                mig_profile: l.profile.clone(),
                physical_share: None,
                isolation_factor: None,
                rate_card: l.rate_card,
                invoice_number: i.number.clone(),
                sku_meter: "GPU share held",
                allocation: None,
            };
            if !w
                .write(&row.record(month, &currency, issuer, version))
                .await
            {
                return Ok(());
            }
        }
    }

    if team.is_none() {
        let spread_cards: Vec<i64> = bill
            .lines
            .values()
            .flatten()
            .filter(|l| l.key.kind == LineKind::IdleSpread)
            .map(|l| l.key.rate_card)
            .collect();
        let c = &bill.conservation;
        let mut platform: Vec<(Row, Decimal)> = Vec::new();
        let mut discounts: Vec<(Row, Decimal)> = Vec::new();
        // FOCUS 1.3: a day whose idle capacity was spread to teams still has its cards' unallocated
        // portions, each card-day's ratios summing to 1: a row of its own at no cost (the cost is
        // on the teams' idle-capacity rows).
        let mut spread_days: Vec<Row> = Vec::new();
        for d in &days {
            let Some(card) = d.rate_card.and_then(|id| cards.get(&id)) else {
                continue;
            };
            let (cost, _) = card.hourly_cost(&d.model);
            let fleet = cost * d.present_seconds / Decimal::from(3600);
            let (taken, discount) = allocated
                .get(&(d.model.clone(), card.id, d.day))
                .copied()
                .unwrap_or_default();
            let spread = card.idle_policy == IdlePolicy::Spread && spread_cards.contains(&card.id);
            if !spread {
                let mut row = platform_row(
                    month,
                    d.day,
                    &d.model,
                    card,
                    PlatformFigure::Unallocated,
                    fleet - taken,
                    issuer,
                );
                row.allocation = split.unallocated(&d.model, card.id, d.day, false);
                platform.push((row, fleet - taken));
            } else if let Some(a) = split.unallocated(&d.model, card.id, d.day, true) {
                let mut row = platform_row(
                    month,
                    d.day,
                    &d.model,
                    card,
                    PlatformFigure::Unallocated,
                    Decimal::ZERO,
                    issuer,
                );
                row.description = format!(
                    "Unallocated capacity of {}: the share of its GPUs no slice held, spread to teams (on their idle capacity rows)",
                    d.model
                );
                row.allocation = Some(a);
                row.invoice_number = platform_document.map(str::to_owned);
                spread_days.push(row);
            }
            if !discount.is_zero() {
                discounts.push((
                    platform_row(
                        month,
                        d.day,
                        &d.model,
                        card,
                        PlatformFigure::SharingDiscount,
                        discount,
                        issuer,
                    ),
                    discount,
                ));
            }
        }
        for (group, target) in [(platform, c.unallocated), (discounts, c.sharing_discount)] {
            let mut r = CarryRounder::new();
            let n = group.len();
            for (k, (mut row, exact)) in group.into_iter().enumerate() {
                row.billed = if k + 1 == n {
                    r.last(exact, target)
                } else {
                    r.next(exact, &currency)
                };
                row.invoice_number = platform_document.map(str::to_owned);
                if !w
                    .write(&row.record(month, &currency, issuer, version))
                    .await
                {
                    return Ok(());
                }
            }
        }
        for row in spread_days {
            if !w
                .write(&row.record(month, &currency, issuer, version))
                .await
            {
                return Ok(());
            }
        }
        if !c.rounding_residual.is_zero() {
            let mut row = platform_row(
                month,
                month.start(),
                "",
                cards
                    .values()
                    .last()
                    .expect("a priced month has a rate card"),
                PlatformFigure::Rounding,
                c.rounding_residual,
                issuer,
            );
            row.category = Category::Adjustment;
            row.invoice_number = platform_document.map(str::to_owned);
            row.charge_end = month.end();
            row.billed = c.rounding_residual;
            row.description =
                "Rounding residual: invoice lines are each rounded once to the minor unit".into();
            if !w
                .write(&row.record(month, &currency, issuer, version))
                .await
            {
                return Ok(());
            }
        }
    }
    w.finish().await;
    Ok(())
}

/// The ERP journal of `month`'s issued invoices and credit notes, as CSV.
pub async fn erp(
    pool: &PgPool,
    month: Month,
    config: &ExportConfig,
) -> Result<Vec<u8>, ExportError> {
    let mut conn = pool.acquire().await?;
    let docs = store::period_documents(&mut conn, month.first_day()).await?;
    drop(conn);
    let drafts: Vec<&str> = docs
        .iter()
        .filter(|d| d.status == InvoiceStatus::Draft)
        .map(|d| d.team.as_str())
        .collect();
    if !drafts.is_empty() {
        return Err(ExportError::Drafts {
            period: month,
            teams: drafts.join(", "),
        });
    }
    if docs.is_empty() {
        return Err(ExportError::NoInvoices(month));
    }
    let documents: Vec<Document> = docs
        .into_iter()
        .map(|d| Document {
            number: d.number.unwrap_or_default(),
            team: d.team,
            team_name: d.team_name,
            cost_center: d.cost_center,
            gl_account: d.gl_account,
            currency: d.currency,
            total: d.total,
        })
        .collect();
    let lines = erp::journal(month, &documents, &config.platform).map_err(ExportError::Journal)?;
    let mut w = csv::Writer::from_writer(Vec::new());
    let header: Vec<&str> = config
        .erp_layout
        .columns
        .iter()
        .map(|c| c.header.as_str())
        .collect();
    w.write_record(&header)?;
    for l in &lines {
        w.write_record(erp::record(l, &config.erp_layout))?;
    }
    w.into_inner()
        .map_err(|e| csv::Error::from(e.into_error()).into())
}
