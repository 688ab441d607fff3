//! Results kept while the database has not changed. A result is stored with the snapshot
//! PostgreSQL reported before it was read (`pg_current_snapshot()`: the transactions running and
//! the next to start); a reader takes the current one, and while it is the same, no transaction
//! that writes has started or ended since, in this process or any other, so the result is what a
//! new read would give. Read-only transactions are given no transaction id and leave the snapshot
//! as it was, so readers alone never invalidate each other.
//!
//! When the snapshot has moved, one reader reads anew; readers arriving meanwhile get the result
//! before it if it is at most `max_stale` old (otherwise they wait for the new one), so a slow read
//! under load makes one request slow, not all of them.
//!
//! A cache made [`revalidating`](SnapshotCache::revalidating) goes one step further for reads too
//! slow for any request to wait on (right-sizing's percentiles over a month of a large fleet): a
//! result at most that old is returned at once even when the snapshot has moved, and the read
//! anew runs behind it, in a task of its own, so that under steady ingest no request waits but the
//! first. That first may bound its wait
//! ([`get_revalidating_within`](SnapshotCache::get_revalidating_within)): past the bound it goes
//! without, and the read it started goes on and is kept.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;

/// The database's snapshot as text: equal snapshots mean no write transaction started or ended
/// in between.
pub async fn snapshot(pool: &PgPool) -> Result<String, sqlx::Error> {
    sqlx::query_scalar!(r#"select pg_current_snapshot()::text as "snapshot!""#)
        .fetch_one(pool)
        .await
}

/// Results of `read`s by key. `A`, where a key's read takes more than the key says (the exact
/// hours of a range that moves with the clock, kept under the range's days), is what it was
/// asked with: a result asked otherwise is never served as new.
#[derive(Debug)]
pub struct SnapshotCache<K, V, A = ()> {
    max_stale: Duration,
    revalidate_within: Duration,
    capacity: usize,
    slots: Mutex<HashMap<K, Arc<Slot<V, A>>>>,
}

#[derive(Debug)]
struct Slot<V, A> {
    kept: Mutex<Option<Kept<V, A>>>,
    reading: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug)]
struct Kept<V, A> {
    value: Arc<V>,
    snapshot: String,
    read_at: Instant,
    exact: A,
}

impl<V, A> Slot<V, A> {
    /// Keeps `value`, read at `read_at` on the database as of `snapshot`, asked with `exact`.
    fn keep(&self, value: Arc<V>, snapshot: String, read_at: Instant, exact: A) {
        *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(Kept {
            value,
            snapshot,
            read_at,
            exact,
        });
    }
}

impl<K: Eq + Hash + Clone, V, A: PartialEq + Clone + Default> SnapshotCache<K, V, A> {
    /// A cache of at most `capacity` keys (past it, it starts over).
    pub fn new(max_stale: Duration, capacity: usize) -> Self {
        SnapshotCache {
            max_stale,
            revalidate_within: Duration::ZERO,
            capacity: capacity.max(1),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Results at most `within` old are returned at once and read anew behind the request (see
    /// [`get_revalidating`](Self::get_revalidating)).
    pub fn revalidating(mut self, within: Duration) -> Self {
        self.revalidate_within = within;
        self
    }

    fn slot(&self, key: &K) -> Arc<Slot<V, A>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.get(key) {
            return slot.clone();
        }
        if slots.len() >= self.capacity {
            slots.clear();
        }
        let slot = Arc::new(Slot {
            kept: Mutex::new(None),
            reading: Arc::new(tokio::sync::Mutex::new(())),
        });
        slots.insert(key.clone(), slot.clone());
        slot
    }

    /// `read()`'s result for `key`, read anew only if the database changed since it was kept.
    pub async fn get<F, Fut, E>(&self, pool: &PgPool, key: K, read: F) -> Result<Arc<V>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
        E: From<sqlx::Error>,
    {
        read_slot(self.slot(&key), self.max_stale, pool, A::default(), read).await
    }

    /// As [`get`](Self::get) of a read asked with `exact`, except that a kept result of `key` at
    /// most `revalidate_within` old is returned at once when the database changed since it was
    /// read or it was asked otherwise (an hour earlier, for a range ending now); unless another
    /// read is already under way, one starts in a task of its own and replaces it when done. A
    /// read that fails there is logged and leaves the kept result, which ages out; requests then
    /// read anew themselves, and see the error.
    pub async fn get_revalidating<F, Fut, E>(
        &self,
        pool: &PgPool,
        key: K,
        exact: A,
        read: F,
    ) -> Result<Arc<V>, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: From<sqlx::Error> + std::fmt::Display + Send + 'static,
        V: Send + Sync + 'static,
        A: Send + Sync + 'static,
    {
        let slot = self.slot(&key);
        match self.serve_young(pool, &slot, &exact, read).await? {
            Ok(value) => Ok(value),
            Err(read) => read_slot(slot, self.max_stale, pool, exact, read).await,
        }
    }

    /// As [`get_revalidating`](Self::get_revalidating), except that a request that finds nothing
    /// young enough to serve waits for its read at most `wait`: past it, `None`, while the read
    /// goes on in a task of its own and keeps its result for the requests after.
    pub async fn get_revalidating_within<F, Fut, E>(
        &self,
        pool: &PgPool,
        key: K,
        exact: A,
        read: F,
        wait: Duration,
    ) -> Result<Option<Arc<V>>, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: From<sqlx::Error> + std::fmt::Display + Send + 'static,
        V: Send + Sync + 'static,
        A: Send + Sync + 'static,
    {
        let slot = self.slot(&key);
        let read = match self.serve_young(pool, &slot, &exact, read).await? {
            Ok(value) => return Ok(Some(value)),
            Err(read) => read,
        };
        let (pool, max_stale) = (pool.clone(), self.max_stale);
        let reading = tokio::spawn(async move {
            let read = read_slot(slot, max_stale, &pool, exact, read).await;
            if let Err(e) = &read {
                tracing::warn!(error = %e, "a result could not be read");
            }
            read
        });
        match tokio::time::timeout(wait, reading).await {
            Ok(joined) => joined
                .map_err(|_| E::from(sqlx::Error::WorkerCrashed))?
                .map(Some),
            Err(_) => Ok(None),
        }
    }

    /// A kept result of `slot` at most `revalidate_within` old, as
    /// [`get_revalidating`](Self::get_revalidating) serves it (starting a read anew behind it when
    /// the database changed or it was asked otherwise); or `read` back, when there is none.
    async fn serve_young<F, Fut, E>(
        &self,
        pool: &PgPool,
        slot: &Arc<Slot<V, A>>,
        exact: &A,
        read: F,
    ) -> Result<Result<Arc<V>, F>, sqlx::Error>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
        V: Send + Sync + 'static,
        A: Send + Sync + 'static,
    {
        let young = {
            let kept = slot.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.as_ref()
                .filter(|k| k.read_at.elapsed() <= self.revalidate_within)
                .map(|k| (k.value.clone(), k.snapshot.clone(), k.exact == *exact))
        };
        let Some((value, kept_snapshot, same)) = young else {
            return Ok(Err(read));
        };
        if same && snapshot(pool).await? == kept_snapshot {
            metrics::counter!("slicemeter_cache_total", "result" => "hit").increment(1);
            return Ok(Ok(value));
        }
        if let Ok(reading) = slot.reading.clone().try_lock_owned() {
            let pool = pool.clone();
            let slot = slot.clone();
            let exact = exact.clone();
            tokio::spawn(async move {
                let before = match snapshot(&pool).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "a kept result could not be read anew");
                        return;
                    }
                };
                let read_at = Instant::now();
                metrics::counter!("slicemeter_cache_total", "result" => "read").increment(1);
                match read().await {
                    Ok(value) => slot.keep(Arc::new(value), before, read_at, exact),
                    Err(e) => tracing::warn!(error = %e, "a kept result could not be read anew"),
                }
                drop(reading);
            });
        }
        metrics::counter!("slicemeter_cache_total", "result" => "stale").increment(1);
        Ok(Ok(value))
    }
}

/// [`SnapshotCache::get`]'s read of one key's slot, on its own so that a task can run it.
async fn read_slot<V, A: PartialEq, F, Fut, E>(
    slot: Arc<Slot<V, A>>,
    max_stale: Duration,
    pool: &PgPool,
    exact: A,
    read: F,
) -> Result<Arc<V>, E>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<V, E>>,
    E: From<sqlx::Error>,
{
    let asked = Instant::now();
    let now = snapshot(pool).await?;
    let kept = |fresh: &dyn Fn(&Kept<V, A>) -> bool| {
        let kept = slot.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.as_ref()
            .filter(|k| k.exact == exact && fresh(k))
            .map(|k| k.value.clone())
    };
    if let Some(v) = kept(&|k| k.snapshot == now) {
        metrics::counter!("slicemeter_cache_total", "result" => "hit").increment(1);
        return Ok(v);
    }
    // The snapshot the read goes with is taken before it: a write that lands during the read
    // makes the next reader read again, so what is kept is never newer than its snapshot says.
    let (reading, before, read_at) = match slot.reading.try_lock() {
        Ok(guard) => (guard, now, asked),
        Err(_) => {
            if let Some(v) = kept(&|k| k.read_at.elapsed() <= max_stale) {
                metrics::counter!("slicemeter_cache_total", "result" => "stale").increment(1);
                return Ok(v);
            }
            let guard = slot.reading.lock().await;
            // What was read while this one waited is as new as a read of its own if it saw
            // the database as this request found it, or began after this request asked.
            if let Some(v) = kept(&|k| k.snapshot == now || k.read_at >= asked) {
                metrics::counter!("slicemeter_cache_total", "result" => "waited").increment(1);
                return Ok(v);
            }
            (guard, snapshot(pool).await?, Instant::now())
        }
    };
    metrics::counter!("slicemeter_cache_total", "result" => "read").increment(1);
    let value = Arc::new(read().await?);
    slot.keep(value.clone(), before, read_at, exact);
    drop(reading);
    Ok(value)
}
