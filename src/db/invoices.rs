//! Invoices and credit notes: drafts replaced freely, issued ones frozen (by triggers, see
//! `migrations/0002_billing.sql`), numbers gap-free per year.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use crate::billing::invoice::{Billed, Invoice, InvoiceLine, PricedKey, price_source_str};
use crate::billing::period::Line;
use crate::db::audit::{self, Actor};
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

#[derive(Debug, thiserror::Error)]
pub enum InvoiceError {
    #[error("there is no invoice {0}")]
    NotFound(i64),
    #[error("invoice {0} is {1}; only a draft can be issued")]
    NotDraft(i64, String),
    #[error("invoice {0} is {1}; only an issued invoice can be credited")]
    NotIssued(i64, String),
    #[error("invoice {0} is a credit note; credit notes are final")]
    CreditNote(i64),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Teams whose invoice for `period` is issued.
pub async fn issued_teams(
    conn: &mut PgConnection,
    period: Month,
) -> Result<BTreeSet<String>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        "select team_id from invoice where kind = 'invoice' and status = 'issued' and period = $1",
        period.first_day()
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect())
}

/// Periods in `[since, before)` with at least one issued invoice, oldest first.
pub async fn periods_with_issued(
    conn: &mut PgConnection,
    since: Month,
    before: Month,
) -> Result<Vec<Month>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        "select distinct period from invoice
         where kind = 'invoice' and status = 'issued' and period >= $1 and period < $2
         order by period",
        since.first_day(),
        before.first_day()
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(Month::from_first_day)
    .collect())
}

/// What was billed per team and priced key for `period`: lines of issued (or since voided)
/// invoices for it, corrections for it on later issued invoices, and credit notes.
pub async fn billed(
    conn: &mut PgConnection,
    period: Month,
) -> Result<BTreeMap<String, BTreeMap<PricedKey, Billed>>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select i.team_id, l.gpu_model, l.slice_kind, l.profile, l.rate_card_id as "rate_card_id!",
                  sum(l.slice_hours) as "slice_hours!", sum(l.gpu_equivalent_hours) as "gpu_eq!",
                  sum(l.exact_amount) as "exact_amount!", sum(l.amount) as "amount!",
                  max(l.unit_price) as unit_price
           from invoice_line l join invoice i using (invoice_id)
           where i.status in ('issued', 'void') and l.rate_card_id is not null
             and coalesce(l.corrects_period, i.period) = $1
           group by 1, 2, 3, 4, 5"#,
        period.first_day()
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut out: BTreeMap<String, BTreeMap<PricedKey, Billed>> = BTreeMap::new();
    for r in rows {
        let kind = r
            .slice_kind
            .as_deref()
            .and_then(|k| k.parse::<SliceKind>().ok());
        out.entry(r.team_id).or_default().insert(
            (r.gpu_model, kind, r.profile, r.rate_card_id),
            Billed {
                slice_hours: r.slice_hours,
                gpu_equivalent_hours: r.gpu_eq,
                exact_amount: r.exact_amount,
                amount: r.amount,
                unit_price: r.unit_price,
            },
        );
    }
    Ok(out)
}

/// Replaces every draft of `period` with `drafts` (team -> lines). Returns the new invoice ids.
pub async fn replace_drafts(
    conn: &mut PgConnection,
    period: Month,
    currency: &str,
    drafts: &BTreeMap<String, Vec<Line>>,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query!(
        "delete from invoice where kind = 'invoice' and status = 'draft' and period = $1",
        period.first_day()
    )
    .execute(&mut *conn)
    .await?;
    let mut ids = Vec::new();
    for (team, lines) in drafts {
        let total: Decimal = lines.iter().map(|l| l.amount).sum();
        let id = sqlx::query_scalar!(
            "insert into invoice (team_id, period, currency, total) values ($1, $2, $3, $4)
             returning invoice_id",
            team,
            period.first_day(),
            currency,
            total
        )
        .fetch_one(&mut *conn)
        .await?;
        insert_lines(conn, id, lines).await?;
        ids.push(id);
    }
    Ok(ids)
}

async fn insert_lines(conn: &mut PgConnection, id: i64, lines: &[Line]) -> Result<(), sqlx::Error> {
    let n = lines.len();
    let mut no = Vec::with_capacity(n);
    let mut kind = Vec::with_capacity(n);
    let mut description = Vec::with_capacity(n);
    let mut model = Vec::with_capacity(n);
    let mut slice_kind = Vec::with_capacity(n);
    let mut profile = Vec::with_capacity(n);
    let mut card = Vec::with_capacity(n);
    let mut source = Vec::with_capacity(n);
    let mut slice_hours = Vec::with_capacity(n);
    let mut gpu_eq = Vec::with_capacity(n);
    let mut unit_price = Vec::with_capacity(n);
    let mut exact = Vec::with_capacity(n);
    let mut amount = Vec::with_capacity(n);
    let mut windows = Vec::with_capacity(n);
    let mut corrects: Vec<Option<NaiveDate>> = Vec::with_capacity(n);
    for (i, l) in lines.iter().enumerate() {
        no.push(i as i32 + 1);
        kind.push(l.key.kind.as_str().to_owned());
        description.push(l.description());
        model.push(l.key.gpu_model.clone());
        slice_kind.push(l.key.slice_kind.map(|k| k.as_str().to_owned()));
        profile.push(l.key.profile.clone());
        card.push(l.key.rate_card);
        source.push(price_source_str(l.price_source).map(str::to_owned));
        slice_hours.push(l.slice_hours.round_dp(6));
        gpu_eq.push(l.gpu_equivalent_hours.round_dp(6));
        unit_price.push(l.unit_price);
        exact.push(l.exact_amount);
        amount.push(l.amount);
        windows.push(l.windows);
        corrects.push(l.corrects.map(Month::first_day));
    }
    sqlx::query!(
        "insert into invoice_line (invoice_id, line_no, line_kind, description, gpu_model, slice_kind,
                                   profile, rate_card_id, price_source, slice_hours,
                                   gpu_equivalent_hours, unit_price, exact_amount, amount, windows,
                                   corrects_period)
         select $1, * from unnest($2::int4[], $3::text[], $4::text[], $5::text[], $6::text[],
                                  $7::text[], $8::int8[], $9::text[], $10::numeric[], $11::numeric[],
                                  $12::numeric[], $13::numeric[], $14::numeric[], $15::int8[],
                                  $16::date[])",
        id,
        &no,
        &kind,
        &description,
        &model as &[Option<String>],
        &slice_kind as &[Option<String>],
        &profile as &[Option<String>],
        &card,
        &source as &[Option<String>],
        &slice_hours,
        &gpu_eq,
        &unit_price as &[Option<Decimal>],
        &exact,
        &amount,
        &windows,
        &corrects as &[Option<NaiveDate>]
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Gives a draft the next number of this year and freezes it.
pub async fn issue(pool: &PgPool, id: i64, actor: &Actor) -> Result<Invoice, InvoiceError> {
    let mut tx = pool.begin().await?;
    let number = issue_in(&mut tx, id, actor.token_id).await?;
    let head = sqlx::query!(
        "select team_id, period, total from invoice where invoice_id = $1",
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        actor,
        "invoice.issue",
        &number,
        serde_json::json!({"invoice_id": id, "team": head.team_id,
                           "period": Month::from_first_day(head.period), "total": head.total}),
    )
    .await?;
    tx.commit().await?;
    get(pool, id).await?.ok_or(InvoiceError::NotFound(id))
}

/// Issues a draft in `conn`'s transaction and returns its number.
async fn issue_in(
    conn: &mut PgConnection,
    id: i64,
    by: Option<i64>,
) -> Result<String, InvoiceError> {
    let status = sqlx::query_scalar!(
        "select status from invoice where invoice_id = $1 for update",
        id
    )
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(InvoiceError::NotFound(id))?;
    if status != "draft" {
        return Err(InvoiceError::NotDraft(id, status));
    }
    let year = Utc::now().year();
    // The counter row's lock serialises issuers; a rolled-back issue gives its number back.
    let seq = sqlx::query_scalar!(
        "insert into invoice_counter (year, last) values ($1, 1)
         on conflict (year) do update set last = invoice_counter.last + 1
         returning last",
        year
    )
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query!(
        "update invoice set status = 'issued', number_year = $2, number_seq = $3, issued_at = now(),
                            issued_by = $4
         where invoice_id = $1",
        id,
        year,
        seq,
        by
    )
    .execute(&mut *conn)
    .await?;
    Ok(format!("SM-{year}-{seq:06}"))
}

/// Voids an issued invoice by issuing a credit note that reverses each of its lines.
pub async fn credit(pool: &PgPool, id: i64, actor: &Actor) -> Result<Invoice, InvoiceError> {
    let mut tx = pool.begin().await?;
    let head = sqlx::query!(
        "select kind, status, team_id, period, currency, total from invoice where invoice_id = $1 for update",
        id
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(InvoiceError::NotFound(id))?;
    if head.kind == "credit_note" {
        return Err(InvoiceError::CreditNote(id));
    }
    if head.status != "issued" {
        return Err(InvoiceError::NotIssued(id, head.status));
    }
    let note = sqlx::query_scalar!(
        "insert into invoice (kind, team_id, period, currency, total, credits)
         values ('credit_note', $1, $2, $3, $4, $5) returning invoice_id",
        head.team_id,
        head.period,
        head.currency,
        -head.total,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        "insert into invoice_line (invoice_id, line_no, line_kind, description, gpu_model, slice_kind,
                                   profile, rate_card_id, price_source, slice_hours,
                                   gpu_equivalent_hours, unit_price, exact_amount, amount, windows,
                                   corrects_period)
         select $2, line_no, 'credit', 'Credit: ' || description, gpu_model, slice_kind, profile,
                rate_card_id, price_source, -slice_hours, -gpu_equivalent_hours, unit_price,
                -exact_amount, -amount, windows, corrects_period
         from invoice_line where invoice_id = $1 order by line_no",
        id,
        note
    )
    .execute(&mut *tx)
    .await?;
    let number = issue_in(&mut tx, note, actor.token_id).await?;
    let voided = sqlx::query_scalar!(
        r#"update invoice set status = 'void' where invoice_id = $1 returning number as "number!""#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    audit::record(
        &mut tx,
        actor,
        "invoice.credit",
        &number,
        serde_json::json!({"credit_note_id": note, "voids": voided, "voided_invoice_id": id,
                           "team": head.team_id, "total": -head.total}),
    )
    .await?;
    tx.commit().await?;
    get(pool, note).await?.ok_or(InvoiceError::NotFound(note))
}

/// One invoice with its lines.
pub async fn get(pool: &PgPool, id: i64) -> Result<Option<Invoice>, sqlx::Error> {
    let Some(mut invoice) = list_where(pool, Some(id), None, None).await?.pop() else {
        return Ok(None);
    };
    invoice.lines = sqlx::query!(
        "select line_no, line_kind, description, gpu_model, slice_kind, profile, rate_card_id,
                price_source, slice_hours, gpu_equivalent_hours, unit_price, amount, windows,
                corrects_period
         from invoice_line where invoice_id = $1 order by line_no",
        id
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|l| InvoiceLine {
        line_no: l.line_no,
        line_kind: l.line_kind,
        description: l.description,
        gpu_model: l.gpu_model,
        slice_kind: l.slice_kind,
        profile: l.profile,
        rate_card: l.rate_card_id,
        price_source: l.price_source,
        slice_hours: l.slice_hours.normalize(),
        gpu_equivalent_hours: l.gpu_equivalent_hours.normalize(),
        unit_price: l.unit_price.map(|p| p.normalize()),
        amount: l.amount,
        windows: l.windows,
        corrects_period: l.corrects_period.map(Month::from_first_day),
    })
    .collect();
    Ok(Some(invoice))
}

/// Invoices (without lines), optionally of one period and team, by period then team then id.
pub async fn list(
    pool: &PgPool,
    period: Option<Month>,
    team: Option<&TeamId>,
) -> Result<Vec<Invoice>, sqlx::Error> {
    list_where(pool, None, period, team).await
}

async fn list_where(
    pool: &PgPool,
    id: Option<i64>,
    period: Option<Month>,
    team: Option<&TeamId>,
) -> Result<Vec<Invoice>, sqlx::Error> {
    Ok(sqlx::query!(
        r#"select i.invoice_id, i.number, i.kind, i.team_id, i.period, i.status, i.currency, i.total,
                  i.created_at, i.issued_at, i.credits,
                  (select c.invoice_id from invoice c where c.credits = i.invoice_id) as credited_by
           from invoice i
           where ($1::int8 is null or i.invoice_id = $1)
             and ($2::date is null or i.period = $2)
             and ($3::text is null or i.team_id = $3)
           order by i.period, i.team_id, i.invoice_id"#,
        id,
        period.map(Month::first_day),
        team.map(TeamId::as_str)
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| Invoice {
        id: r.invoice_id,
        number: r.number,
        kind: r.kind,
        team: r.team_id,
        period: Month::from_first_day(r.period),
        status: r.status,
        currency: r.currency,
        total: r.total,
        created_at: r.created_at,
        issued_at: r.issued_at,
        credits: r.credits,
        credited_by: r.credited_by,
        lines: Vec::new(),
    })
    .collect())
}
