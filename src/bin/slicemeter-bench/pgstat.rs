//! What PostgreSQL did while a load ran (issue 42): its checkpoints (asked for, because WAL filled
//! `max_wal_size`, or timed), who wrote the shared buffers out (the checkpointer, the background
//! writer, or the backends themselves when neither kept up), the WAL written, and what the
//! sessions were waiting on, sampled every second. Printed beside the settings that bound them, so
//! a profile's effect is measured, not guessed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server-wide counters, read before and after: each column of `pg_stat_bgwriter` and
/// `pg_stat_wal` that is a number (PostgreSQL 17 moved the checkpoints' to
/// `pg_stat_checkpointer`; what a version lacks is left out).
async fn counters(pool: &sqlx::PgPool) -> anyhow::Result<BTreeMap<String, f64>> {
    let rows: Vec<(String, f64)> = sqlx::query_as(
        "select 'bgwriter.' || k, v::float8
         from pg_stat_bgwriter b, jsonb_each_text(to_jsonb(b)) e(k, v)
         where jsonb_typeof(to_jsonb(b) -> k) = 'number'
         union all
         select 'wal.' || k, v::float8
         from pg_stat_wal w, jsonb_each_text(to_jsonb(w)) e(k, v)
         where jsonb_typeof(to_jsonb(w) -> k) = 'number'",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// A load being watched: the counters at its start and the wait events sampled since.
pub struct Watch {
    pool: sqlx::PgPool,
    before: BTreeMap<String, f64>,
    waits: Arc<Mutex<BTreeMap<String, u64>>>,
    sampler: tokio::task::JoinHandle<()>,
}

/// Starts watching: the counters now, and every second each active session's wait event (`CPU`
/// when it waits on nothing).
pub async fn watch(pool: &sqlx::PgPool) -> anyhow::Result<Watch> {
    let before = counters(pool).await?;
    let waits = Arc::new(Mutex::new(BTreeMap::new()));
    let sampler = {
        let (pool, waits) = (pool.clone(), waits.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Ok(seen): Result<Vec<(String,)>, _> = sqlx::query_as(
                    "select coalesce(wait_event_type || ':' || wait_event, 'CPU')
                     from pg_stat_activity
                     where state = 'active' and backend_type = 'client backend'
                       and pid <> pg_backend_pid()",
                )
                .fetch_all(&pool)
                .await
                else {
                    continue;
                };
                let mut waits = waits.lock().expect("not poisoned");
                for (w,) in seen {
                    *waits.entry(w).or_default() += 1;
                }
            }
        })
    };
    Ok(Watch {
        pool: pool.clone(),
        before,
        waits,
        sampler,
    })
}

impl Watch {
    /// Stops sampling and prints what the load cost PostgreSQL.
    pub async fn print(self) -> anyhow::Result<()> {
        self.sampler.abort();
        let after = counters(&self.pool).await?;
        let delta = |k: &str| after.get(k).zip(self.before.get(k)).map(|(a, b)| a - b);
        let settings: Vec<(String, String)> = sqlx::query_as(
            "select name, current_setting(name) from pg_settings
             where name in ('shared_buffers', 'max_wal_size', 'checkpoint_timeout',
                            'wal_buffers', 'bgwriter_lru_maxpages', 'synchronous_commit')
             order by name",
        )
        .fetch_all(&self.pool)
        .await?;
        let settings: Vec<String> = settings.iter().map(|(n, v)| format!("{n} {v}")).collect();
        println!("PostgreSQL during the load ({}):", settings.join(", "));
        let show = |label: &str, keys: &[&str]| {
            let parts: Vec<String> = keys
                .iter()
                .filter_map(|k| {
                    delta(k).map(|d| format!("{} {d:.0}", k.rsplit('.').next().unwrap_or(k)))
                })
                .collect();
            if !parts.is_empty() {
                println!("  {label}: {}", parts.join(", "));
            }
        };
        show(
            "checkpoints",
            &["bgwriter.checkpoints_req", "bgwriter.checkpoints_timed"],
        );
        show(
            "buffers written by",
            &[
                "bgwriter.buffers_checkpoint",
                "bgwriter.buffers_clean",
                "bgwriter.buffers_backend",
                "bgwriter.buffers_backend_fsync",
            ],
        );
        if let Some(bytes) = delta("wal.wal_bytes") {
            println!(
                "  WAL: {:.2} GB, {:.0} times a backend waited for its buffers to be written (wal_buffers_full)",
                bytes / 1e9,
                delta("wal.wal_buffers_full").unwrap_or(0.0)
            );
        }
        let waits = self.waits.lock().expect("not poisoned").clone();
        let total: u64 = waits.values().sum();
        let mut top: Vec<(String, u64)> = waits.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let top: Vec<String> = top
            .iter()
            .take(6)
            .map(|(w, n)| format!("{w} {:.0} %", 100.0 * *n as f64 / total.max(1) as f64))
            .collect();
        println!(
            "  active sessions' waits, sampled each second ({total} samples): {}",
            top.join(", ")
        );
        Ok(())
    }
}
