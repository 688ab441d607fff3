//! Invoices and credit notes, as stored: drafts rewritten freely (each team's draft keeps its id),
//! issued ones frozen (by triggers, see `migrations/0002_billing.sql`), numbers gap-free per year
//! and formatted by the table's generated `number` column alone. What may be drafted, issued or
//! credited is decided by `invoice` and `service`; these are the statements they run, inside the
//! service's transactions.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, NaiveDate, Utc};
use rust_decimal::Decimal;
use sqlx::{PgConnection, PgPool};

use super::{Billed, Head, Invoice, InvoiceKind, InvoiceLine, InvoiceStatus, PricedKey};
use crate::billing::period::{Line, LineKind};
use crate::billing::rate_card::PriceSource;
use crate::domain::slice::SliceKind;
use crate::domain::team::TeamId;
use crate::domain::time::Month;

crate::text_type!(InvoiceStatus);
crate::text_type!(InvoiceKind);
crate::text_type!(LineKind);
crate::text_type!(PriceSource);

/// Teams whose invoice for `period` is issued.
pub async fn issued_teams(
    conn: &mut PgConnection,
    period: Month,
) -> Result<BTreeSet<TeamId>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        r#"select team_id as "team_id: TeamId" from invoice
           where kind = 'invoice' and status = 'issued' and period = $1"#,
        period.first_day()
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect())
}

/// Teams that have an invoice for `period` that is a draft or was voided (and none issued): their
/// corrections are not made on later invoices (a draft will bill the period itself; a voided one was
/// credited on purpose, and drafting the period again bills it).
pub async fn unbilled_teams(
    conn: &mut PgConnection,
    period: Month,
) -> Result<BTreeSet<TeamId>, sqlx::Error> {
    Ok(sqlx::query_scalar!(
        r#"select team_id as "team_id!: TeamId" from invoice where kind = 'invoice' and period = $1
           group by team_id having bool_and(status <> 'issued')"#,
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
) -> Result<BTreeMap<TeamId, BTreeMap<PricedKey, Billed>>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select i.team_id as "team_id: TeamId", l.gpu_model, l.slice_kind as "slice_kind: SliceKind",
                  l.profile, l.rate_card_id as "rate_card_id!",
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
    let mut out: BTreeMap<TeamId, BTreeMap<PricedKey, Billed>> = BTreeMap::new();
    for r in rows {
        out.entry(r.team_id).or_default().insert(
            (r.gpu_model, r.slice_kind, r.profile, r.rate_card_id),
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

/// Makes `period`'s drafts `drafts` (team -> lines): a team's existing draft keeps its id and gets
/// the new lines, drafts of teams no longer billed are deleted, new teams get new drafts. Each draft
/// names its team as the team is now (name, cost center, GL account). Returns the ids, by team.
pub async fn write_drafts(
    conn: &mut PgConnection,
    period: Month,
    currency: &str,
    drafts: &BTreeMap<TeamId, Vec<Line>>,
) -> Result<Vec<i64>, sqlx::Error> {
    let teams: Vec<TeamId> = drafts.keys().cloned().collect();
    sqlx::query!(
        "delete from invoice where kind = 'invoice' and status = 'draft' and period = $1
         and not (team_id = any($2))",
        period.first_day(),
        &teams as &[TeamId]
    )
    .execute(&mut *conn)
    .await?;
    let mut ids = Vec::new();
    for (team, lines) in drafts {
        let total: Decimal = lines.iter().map(|l| l.amount).sum();
        let existing = sqlx::query_scalar!(
            "select invoice_id from invoice
             where kind = 'invoice' and status = 'draft' and period = $1 and team_id = $2
             for update",
            period.first_day(),
            team as &TeamId
        )
        .fetch_optional(&mut *conn)
        .await?;
        let id = match existing {
            Some(id) => {
                sqlx::query!("delete from invoice_line where invoice_id = $1", id)
                    .execute(&mut *conn)
                    .await?;
                sqlx::query!(
                    "update invoice i set currency = $2, total = $3, created_at = now(),
                         team_name = t.display_name, cost_center = t.cost_center, gl_account = t.gl_account
                     from team t where i.invoice_id = $1 and t.team_id = i.team_id",
                    id,
                    currency,
                    total
                )
                .execute(&mut *conn)
                .await?;
                id
            }
            None => {
                sqlx::query_scalar!(
                    "insert into invoice (team_id, period, currency, total, team_name, cost_center, gl_account)
                     select $1, $2, $3, $4, t.display_name, t.cost_center, t.gl_account
                     from team t where t.team_id = $1
                     returning invoice_id",
                    team as &TeamId,
                    period.first_day(),
                    currency,
                    total
                )
                .fetch_one(&mut *conn)
                .await?
            }
        };
        insert_lines(conn, id, lines).await?;
        ids.push(id);
    }
    Ok(ids)
}

/// The ids of `period`'s drafts, by team, locked for this transaction.
pub async fn drafts_of(conn: &mut PgConnection, period: Month) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        "select invoice_id from invoice where kind = 'invoice' and status = 'draft' and period = $1
         order by team_id for update",
        period.first_day()
    )
    .fetch_all(&mut *conn)
    .await
}

/// Whether `team` has a draft for a period strictly between `after` and `before`: corrections of
/// `after` then belong on that earlier draft.
pub async fn has_draft_between(
    conn: &mut PgConnection,
    team: &TeamId,
    after: Month,
    before: Month,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select exists (select 1 from invoice where kind = 'invoice' and status = 'draft'
                          and team_id = $1 and period > $2 and period < $3) as "exists!""#,
        team as &TeamId,
        after.first_day(),
        before.first_day()
    )
    .fetch_one(&mut *conn)
    .await
}

/// The invoice's head, as it stands; no lock (the period's lock comes first).
pub async fn head(conn: &mut PgConnection, id: i64) -> Result<Option<Head>, sqlx::Error> {
    Ok(sqlx::query!(
        r#"select kind as "kind: InvoiceKind", status as "status: InvoiceStatus",
                  team_id as "team: TeamId", period, total
           from invoice where invoice_id = $1"#,
        id
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| Head {
        id,
        kind: r.kind,
        status: r.status,
        team: r.team,
        period: Month::from_first_day(r.period),
        total: r.total,
    }))
}

/// The invoice's status, its row locked until the transaction ends (under the period's lock).
pub async fn lock_status(
    conn: &mut PgConnection,
    id: i64,
) -> Result<Option<InvoiceStatus>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select status as "status: InvoiceStatus" from invoice where invoice_id = $1 for update"#,
        id
    )
    .fetch_optional(&mut *conn)
    .await
}

/// A draft's correction lines: the period each corrects, its key, and what had been billed for the
/// key when it was made.
pub async fn corrections_of(
    conn: &mut PgConnection,
    id: i64,
) -> Result<Vec<(Month, PricedKey, Decimal)>, sqlx::Error> {
    Ok(sqlx::query!(
        r#"select corrects_period as "corrects!", gpu_model, slice_kind as "slice_kind: SliceKind",
                  profile, rate_card_id as "rate_card_id!",
                  coalesce(billed_before, 0) as "billed_before!"
           from invoice_line
           where invoice_id = $1 and line_kind = 'correction' and rate_card_id is not null"#,
        id
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| {
        (
            Month::from_first_day(r.corrects),
            (r.gpu_model, r.slice_kind, r.profile, r.rate_card_id),
            r.billed_before,
        )
    })
    .collect())
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
    let mut billed_before: Vec<Option<Decimal>> = Vec::with_capacity(n);
    for (i, l) in lines.iter().enumerate() {
        no.push(i as i32 + 1);
        kind.push(l.key.kind);
        description.push(l.description());
        model.push(l.key.gpu_model.clone());
        slice_kind.push(l.key.slice_kind);
        profile.push(l.key.profile.clone());
        card.push(l.key.rate_card);
        source.push(l.price_source);
        slice_hours.push(l.slice_hours.round_dp(6));
        gpu_eq.push(l.gpu_equivalent_hours.round_dp(6));
        unit_price.push(l.unit_price);
        exact.push(l.exact_amount);
        amount.push(l.amount);
        windows.push(l.windows);
        corrects.push(l.corrects.map(Month::first_day));
        billed_before.push(l.billed_before);
    }
    sqlx::query!(
        "insert into invoice_line (invoice_id, line_no, line_kind, description, gpu_model, slice_kind,
                                   profile, rate_card_id, price_source, slice_hours,
                                   gpu_equivalent_hours, unit_price, exact_amount, amount, windows,
                                   corrects_period, billed_before)
         select $1, * from unnest($2::int4[], $3::text[], $4::text[], $5::text[], $6::text[],
                                  $7::text[], $8::int8[], $9::text[], $10::numeric[], $11::numeric[],
                                  $12::numeric[], $13::numeric[], $14::numeric[], $15::int8[],
                                  $16::date[], $17::numeric[])",
        id,
        &no,
        &kind as &[LineKind],
        &description,
        &model as &[Option<String>],
        &slice_kind as &[Option<SliceKind>],
        &profile as &[Option<String>],
        &card,
        &source as &[Option<PriceSource>],
        &slice_hours,
        &gpu_eq,
        &unit_price as &[Option<Decimal>],
        &exact,
        &amount,
        &windows,
        &corrects as &[Option<NaiveDate>],
        &billed_before as &[Option<Decimal>]
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Gives the draft `id` the next number of this year and marks it issued; returns the number.
pub async fn mark_issued(
    conn: &mut PgConnection,
    id: i64,
    by: Option<i64>,
) -> Result<String, sqlx::Error> {
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
    sqlx::query_scalar!(
        r#"update invoice set status = 'issued', number_year = $2, number_seq = $3, issued_at = now(),
                              issued_by = $4
           where invoice_id = $1
           returning number as "number!""#,
        id,
        year,
        seq,
        by
    )
    .fetch_one(&mut *conn)
    .await
}

/// Makes a draft credit note for the invoice `id` that reverses each of its lines; returns its id.
pub async fn insert_credit_note(conn: &mut PgConnection, id: i64) -> Result<i64, sqlx::Error> {
    let note = sqlx::query_scalar!(
        "insert into invoice (kind, team_id, period, currency, total, credits, team_name, cost_center, gl_account)
         select 'credit_note', team_id, period, currency, -total, invoice_id, team_name, cost_center, gl_account
         from invoice where invoice_id = $1 returning invoice_id",
        id
    )
    .fetch_one(&mut *conn)
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
    .execute(&mut *conn)
    .await?;
    Ok(note)
}

/// Marks the issued invoice `id` void; returns its number.
pub async fn mark_void(conn: &mut PgConnection, id: i64) -> Result<String, sqlx::Error> {
    sqlx::query_scalar!(
        r#"update invoice set status = 'void' where invoice_id = $1 returning number as "number!""#,
        id
    )
    .fetch_one(&mut *conn)
    .await
}

/// One invoice with its lines.
pub async fn get(pool: &PgPool, id: i64) -> Result<Option<Invoice>, sqlx::Error> {
    let Some(mut invoice) = list_where(pool, Some(id), None, None).await?.pop() else {
        return Ok(None);
    };
    invoice.lines = sqlx::query!(
        r#"select line_no, line_kind as "line_kind: LineKind", description, gpu_model,
                  slice_kind as "slice_kind: SliceKind", profile, rate_card_id,
                  price_source as "price_source: PriceSource", slice_hours, gpu_equivalent_hours,
                  unit_price, amount, windows, corrects_period
           from invoice_line where invoice_id = $1 order by line_no"#,
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
        r#"select i.invoice_id, i.number, i.kind as "kind: InvoiceKind", i.team_id as "team_id: TeamId",
                  i.period, i.status as "status: InvoiceStatus", i.currency, i.total,
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
