//! `scale`'s FOCUS export of the month: its first byte and all of it, against its own rows read
//! alone (issue 42: the export within 2x of that read).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use slicemeter::domain::time::Month;
use slicemeter::exports::focus::Version;
use slicemeter::exports::service::{self as exports, ExportConfig};
use slicemeter::reports::service::ReportCache;
use slicemeter::reports::store as report_store;

/// Times the month's FOCUS export, then its rows read alone, as the export reads them and nothing
/// more: after the export, so that the read finds the same pages cached. `line` prints each.
pub(super) async fn export(
    pool: &sqlx::PgPool,
    cache: &Arc<ReportCache>,
    month: Month,
    floor: Duration,
    line: fn(&str, Duration, Duration, &str),
) -> anyhow::Result<()> {
    let t = Instant::now();
    let mut stream = Box::pin(
        exports::focus(
            pool,
            cache,
            month,
            None,
            Arc::new(ExportConfig::default()),
            Version::default(),
        )
        .await?,
    );
    let mut first = None;
    let mut bytes = 0usize;
    while let Some(chunk) = stream.next().await {
        first.get_or_insert_with(|| t.elapsed());
        bytes += chunk?.len();
    }
    let total = t.elapsed();
    line(
        "FOCUS export, first byte",
        first.unwrap_or(total),
        floor,
        "",
    );
    let t = Instant::now();
    let mut conn = pool.acquire().await?;
    let mut rows = report_store::slice_days(&mut conn, month, false, None);
    let mut read = 0usize;
    while let Some(row) = rows.next().await {
        row?;
        read += 1;
    }
    drop(rows);
    let rows_alone = t.elapsed();
    line(
        "FOCUS export, all of it",
        total,
        floor,
        &format!(
            "({bytes} bytes; {:.2}x its rows read alone)",
            total.as_secs_f64() / rows_alone.as_secs_f64()
        ),
    );
    line(
        "FOCUS export's rows, read alone",
        rows_alone,
        floor,
        &format!("({read} slice-days)"),
    );
    Ok(())
}
