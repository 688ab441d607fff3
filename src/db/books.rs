//! A period's books (migrations/0007_books.sql): the usage and presence its invoice run priced,
//! written by each run while none of the period's invoices is issued and frozen by the first issue,
//! so that an issued period's invoices, report and exports are read from what was issued.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::domain::time::Month;

/// Where a period's books stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Books {
    /// No invoice run yet (or none since the last credit note unfroze them).
    None,
    /// Written by a run; drafts may be made again.
    Drafted,
    /// Issued: read from here, whatever arrives later.
    Frozen { at: DateTime<Utc> },
}

impl Books {
    /// Whether figures of the period are read from the books rather than the rollups.
    pub fn frozen(self) -> bool {
        matches!(self, Books::Frozen { .. })
    }
}

pub async fn state(conn: &mut PgConnection, month: Month) -> Result<Books, sqlx::Error> {
    let row = sqlx::query!(
        "select frozen_at from book where period = $1",
        month.first_day()
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match row {
        None => Books::None,
        Some(r) => match r.frozen_at {
            Some(at) => Books::Frozen { at },
            None => Books::Drafted,
        },
    })
}

/// Replaces the period's unfrozen books with what the rollups hold now, in one statement (one
/// snapshot: usage and presence from the same instant).
pub async fn write(conn: &mut PgConnection, month: Month) -> Result<(), sqlx::Error> {
    let p = month.first_day();
    sqlx::query!("delete from book where period = $1", p)
        .execute(&mut *conn)
        .await?;
    sqlx::query!(
        "with b as (insert into book (period) values ($1) returning period),
              u as (insert into book_slice_day select * from period_slice_day($1, false) returning 1),
              m as (insert into book_model_day select * from period_model_day($1, false) returning 1)
         select (select count(*) from u) as usage_rows, (select count(*) from m) as presence_rows
         from b",
        p
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// Freezes the period's books (its first invoice is being issued); `false` if there are none.
pub async fn freeze(conn: &mut PgConnection, month: Month) -> Result<bool, sqlx::Error> {
    let p = month.first_day();
    sqlx::query!(
        "update book set frozen_at = now() where period = $1 and frozen_at is null",
        p
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query_scalar!(
        r#"select exists (select 1 from book where period = $1) as "exists!""#,
        p
    )
    .fetch_one(&mut *conn)
    .await
}

/// Unfreezes the books when no issued invoice of the period is left (a credit note voided the last),
/// so that the next run prices what the rollups hold then.
pub async fn unfreeze_if_nothing_issued(
    conn: &mut PgConnection,
    month: Month,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "update book set frozen_at = null
         where period = $1 and frozen_at is not null
           and not exists (select 1 from invoice i where i.period = $1
                           and i.kind = 'invoice' and i.status = 'issued')",
        month.first_day()
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}
