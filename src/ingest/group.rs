//! Group commit: batches that arrive together are written in one transaction. A gatherer takes the
//! batches waiting (up to [`GroupCommit::wait`] for more while others are on their way, or until
//! [`GroupCommit::max_windows`]) and hands the group to one of [`GroupCommit::writers`] writers,
//! which stores it with set-based statements: one advisory-lock statement, one read of the GPUs'
//! registrations, the slices and consumers registered only where the [`Known`] cache has not seen
//! them (a group with a few new consumers registers those few), one presence check, one insert of
//! presence and its rollups, one `COPY` of every window and one upsert of the rollups.
//!
//! Each batch was validated on its own and is answered on its own. The fast path only stores
//! batches that are new and consistent; anything else a batch can meet (a re-sent period, a
//! duplicate window, another node's GPU, a changed slice, a database error) rolls the group back
//! and stores its batches one by one ([`store_batch`]), so that each gets
//! the answer it would have had alone and one bad batch never fails its neighbours. Batches that
//! report the same GPU are never in one group (a later one waits for the next), so a group never
//! checks a GPU's period against a period it is itself writing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::attribution;
use super::known::Known;
use super::registry::{self, RegisteredSlice};
use super::resent;
use super::validate::ValidBatch;
use super::{IngestError, store};
use crate::domain::batch::IngestOutcome;
use crate::domain::window::Rollup;

/// How batches are gathered into groups (`serve --ingest-group-*`).
#[derive(Debug, Clone)]
pub struct GroupCommit {
    /// How long the first batch of a group waits for others, while others are on their way
    /// (zero: every batch is written as soon as a writer is free).
    pub wait: Duration,
    /// A group is written once it holds this many windows.
    pub max_windows: usize,
    /// Groups written at once, each on its own connection.
    pub writers: usize,
    /// GPUs, slices and consumers the [`Known`] cache remembers (each, per generation: it keeps
    /// what was used in the last two generations, so at most twice this many).
    pub cache_entries: usize,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            wait: Duration::from_millis(2),
            max_windows: 20_000,
            writers: 2,
            cache_entries: 200_000,
        }
    }
}

struct Job {
    batch: ValidBatch,
    reply: oneshot::Sender<Result<IngestOutcome, IngestError>>,
}

/// Where validated batches are handed in to be stored; the gatherer runs until the last
/// `Committer` is dropped.
#[derive(Debug, Clone)]
pub struct Committer {
    queue: mpsc::Sender<Job>,
    arriving: Arc<AtomicUsize>,
}

/// Counts a batch on its way to the committer (being validated), so that the gatherer knows
/// whether waiting for more is worth it.
pub struct Arriving(Arc<AtomicUsize>);

impl Drop for Arriving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Committer {
    /// Starts the gatherer (on the current Tokio runtime).
    pub fn start(pool: PgPool, config: GroupCommit) -> Self {
        let (queue, jobs) = mpsc::channel(4096);
        let arriving = Arc::new(AtomicUsize::new(0));
        tokio::spawn(gather(jobs, pool, config, arriving.clone()));
        Committer { queue, arriving }
    }

    /// Marks a batch as on its way; the mark ends when the returned value is dropped.
    pub fn arriving(&self) -> Arriving {
        self.arriving.fetch_add(1, Ordering::Relaxed);
        Arriving(self.arriving.clone())
    }

    /// Stores a valid batch, in a group with whatever arrives with it.
    pub async fn store(
        &self,
        batch: ValidBatch,
        arriving: Arriving,
    ) -> Result<IngestOutcome, IngestError> {
        let (reply, answer) = oneshot::channel();
        let sent = self.queue.send(Job { batch, reply }).await;
        drop(arriving);
        sent.map_err(|_| IngestError::Db(sqlx::Error::PoolClosed))?;
        answer
            .await
            .map_err(|_| IngestError::Db(sqlx::Error::WorkerCrashed))?
    }
}

/// A group being gathered: its jobs, their windows and every GPU they report.
struct Group {
    jobs: Vec<Job>,
    windows: usize,
    gpus: HashSet<String>,
}

impl Group {
    fn new() -> Self {
        Group {
            jobs: Vec::new(),
            windows: 0,
            gpus: HashSet::new(),
        }
    }

    /// Adds a job unless it reports a GPU the group already reports; gives it back then.
    fn try_add(&mut self, job: Job) -> Option<Job> {
        if job.batch.gpus.iter().any(|g| self.gpus.contains(&g.uuid)) {
            return Some(job);
        }
        self.gpus
            .extend(job.batch.gpus.iter().map(|g| g.uuid.clone()));
        self.windows += job.batch.windows.len();
        self.jobs.push(job);
        None
    }
}

async fn gather(
    mut jobs: mpsc::Receiver<Job>,
    pool: PgPool,
    config: GroupCommit,
    arriving: Arc<AtomicUsize>,
) {
    let writers = Arc::new(Semaphore::new(config.writers.max(1)));
    let known = Arc::new(Known::new(config.cache_entries));
    // Jobs that reported a GPU of the group being gathered: first in the next group.
    let mut deferred: VecDeque<Job> = VecDeque::new();
    loop {
        let permit = writers
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let first = match deferred.pop_front() {
            Some(job) => job,
            None => match jobs.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let deadline = tokio::time::Instant::now() + config.wait;
        let mut group = Group::new();
        let mut later = VecDeque::new();
        for job in std::iter::once(first).chain(deferred.drain(..)) {
            if group.jobs.is_empty() || group.windows < config.max_windows {
                if let Some(job) = group.try_add(job) {
                    later.push_back(job);
                }
            } else {
                later.push_back(job);
            }
        }
        deferred = later;
        while group.windows < config.max_windows {
            let next = match jobs.try_recv() {
                Ok(job) => Some(job),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
                Err(mpsc::error::TryRecvError::Empty) => {
                    if config.wait.is_zero() || arriving.load(Ordering::Relaxed) == 0 {
                        None
                    } else {
                        tokio::time::timeout_at(deadline, jobs.recv())
                            .await
                            .ok()
                            .flatten()
                    }
                }
            };
            match next {
                None => break,
                Some(job) => {
                    if let Some(job) = group.try_add(job) {
                        deferred.push_back(job);
                    }
                }
            }
        }
        let (pool, known) = (pool.clone(), known.clone());
        tokio::spawn(async move {
            write(&pool, group.jobs, &known).await;
            drop(permit);
        });
    }
}

/// Why a group was stored batch by batch instead.
struct Fallback(&'static str);

impl From<sqlx::Error> for Fallback {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(d) if d.code().as_deref() == Some(store::UNIQUE_VIOLATION) => {
                Fallback("a stored window")
            }
            _ => {
                tracing::debug!(error = %e, "A group of batches met a database error; storing them one by one.");
                Fallback("database error")
            }
        }
    }
}

impl From<IngestError> for Fallback {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::Db(e) => e.into(),
            _ => Fallback("a batch refused"),
        }
    }
}

async fn write(pool: &PgPool, jobs: Vec<Job>, known: &Known) {
    metrics::histogram!("slicemeter_ingest_group_batches").record(jobs.len() as f64);
    let batches: Vec<&ValidBatch> = jobs.iter().map(|j| &j.batch).collect();
    let stored = store_group(pool, &batches, known).await;
    match stored {
        Ok(outcomes) => {
            for (job, outcome) in jobs.into_iter().zip(outcomes) {
                let _ = job.reply.send(Ok(outcome));
            }
        }
        Err(Fallback(reason)) => {
            metrics::counter!("slicemeter_ingest_group_fallbacks_total", "reason" => reason)
                .increment(1);
            if reason == "database error" {
                known.forget();
            }
            for job in jobs {
                let outcome = store_batch(pool, &job.batch).await;
                let _ = job.reply.send(outcome);
            }
        }
    }
}

/// Stores a group of new, consistent batches that report disjoint GPUs in one transaction, or
/// rolls it back and says why.
async fn store_group(
    pool: &PgPool,
    batches: &[&ValidBatch],
    known: &Known,
) -> Result<Vec<IngestOutcome>, Fallback> {
    let mut tx = pool.begin().await?;
    store::lock_gpus(&mut tx, batches).await?;
    let insert = !known.all_gpus_known(batches);
    let mut registered: HashMap<String, registry::RegisteredGpu> =
        store::register_gpus(&mut tx, batches, insert)
            .await?
            .into_iter()
            .map(|g| (g.gpu_uuid.clone(), g))
            .collect();
    let mut gpu_ids = Vec::with_capacity(batches.len());
    for b in batches {
        let own: Vec<_> = b
            .gpus
            .iter()
            .filter_map(|g| registered.remove(&g.uuid))
            .collect();
        let gpus = registry::check_gpus(b, &own)?;
        for &(gpu, mig) in &gpus.mig_changed {
            store::set_mig_mode(&mut tx, gpu, mig).await?;
        }
        gpu_ids.push(gpus.ids);
    }
    let placed: Vec<(&ValidBatch, &[i32])> = batches
        .iter()
        .copied()
        .zip(gpu_ids.iter().map(Vec::as_slice))
        .collect();
    let known_slices = known.slices(batches);
    let registered_slices = known_slices.is_none();
    let slices = match known_slices {
        Some(slices) => slices,
        None => store::register_slices(&mut tx, &placed).await?,
    };
    let mut by_uuid: HashMap<&str, &RegisteredSlice> =
        slices.iter().map(|s| (s.slice_uuid.as_str(), s)).collect();
    let mut slice_ids = Vec::with_capacity(batches.len());
    for (b, gpus) in &placed {
        let own: Vec<RegisteredSlice> = b
            .slices
            .iter()
            .filter_map(|s| by_uuid.remove(s.uuid.as_str()).cloned())
            .collect();
        slice_ids.push(registry::check_slices(b, gpus, &own)?);
    }
    let known_consumers = known.consumers(batches);
    let registered_consumers = if known_consumers.unknown.is_empty() {
        HashMap::new()
    } else {
        store::register_consumers(&mut tx, &known_consumers.unknown).await?
    };
    let consumer_ids: Vec<Vec<i64>> = known_consumers
        .ids
        .into_iter()
        .zip(batches)
        .map(|(ids, b)| {
            ids.into_iter()
                .zip(&b.consumers)
                .map(|(id, c)| {
                    id.or_else(|| registered_consumers.get(&c.fingerprint).copied())
                        .ok_or(sqlx::Error::RowNotFound)
                })
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    let (mut gpu, mut start, mut end) = (Vec::new(), Vec::new(), Vec::new());
    for (b, ids) in &placed {
        for &g in *ids {
            gpu.push(g);
            start.push(b.period_start);
            end.push(b.period_end);
        }
    }
    if !store::overlapping_periods(&mut tx, &gpu, &start, &end)
        .await?
        .is_empty()
    {
        return Err(Fallback("a re-sent or overlapping period"));
    }
    store::record_presence(&mut tx, &placed).await?;
    let owners = store::read_ownership(&mut tx, &attribution::namespaces(batches)).await?;
    let mut teams = attribution::Teams::default();
    let mut rows = String::new();
    let mut rollup = Rollup::new();
    for (i, (b, gpus)) in placed.iter().enumerate() {
        let slice_gpus = registry::slice_gpus(b, gpus);
        let ids = store::WindowIds {
            slices: &slice_ids[i],
            slice_gpus: &slice_gpus,
            consumers: &consumer_ids[i],
        };
        let windows: Vec<_> = b.windows.iter().collect();
        store::copy_rows(&mut rows, &windows, ids);
        // Validation bounds every figure, so these sums fit; were one not to, the group is
        // stored batch by batch, where the batch that overflows fails alone.
        attribution::add(&mut rollup, &mut teams, windows, ids, &b.consumers, &owners)
            .ok_or(Fallback("a rollup sum overflowed"))?;
    }
    if !rows.is_empty() {
        store::copy_windows(&mut tx, rows.as_bytes()).await?;
    }
    store::add_to_rollup(&mut tx, rollup, teams.names()).await?;
    tx.commit().await?;
    // An unchanged inventory costs nothing here either.
    if insert || registered_slices || !registered_consumers.is_empty() {
        known.remember(batches, &slices, &registered_consumers);
    }
    Ok(batches
        .iter()
        .map(|b| IngestOutcome {
            inserted: b.windows.len() as u64,
            duplicates: 0,
        })
        .collect())
}

/// Stores a valid batch in one transaction, with every check a batch can meet: the path a group of
/// batches falls back to. Batches that report the same GPU are serialised by the
/// GPUs' advisory locks (taken in one global order, so never a deadlock), so the presence and
/// re-sent checks cannot race.
async fn store_batch(pool: &PgPool, b: &ValidBatch) -> Result<IngestOutcome, IngestError> {
    let mut tx = pool.begin().await?;
    store::lock_gpus(&mut tx, &[b]).await?;
    let registered = store::register_gpus(&mut tx, &[b], true).await?;
    let gpus = registry::check_gpus(b, &registered).inspect_err(|e| {
        if let IngestError::Forbidden(foreign) = e {
            // Logged here, where the batch's answer is final (a group that met it falls back here).
            tracing::warn!(node = %b.node, gpus = foreign.len(), "A batch reported GPUs of another node; it was refused.");
        }
    })?;
    for &(gpu, mig) in &gpus.mig_changed {
        store::set_mig_mode(&mut tx, gpu, mig).await?;
    }
    let slices = store::register_slices(&mut tx, &[(b, &gpus.ids)]).await?;
    let slice_ids = registry::check_slices(b, &gpus.ids, &slices)?;
    let consumers: Vec<_> = b.consumers.iter().collect();
    let registered = store::register_consumers(&mut tx, &consumers).await?;
    let consumer_ids = b
        .consumers
        .iter()
        .map(|c| registered.get(&c.fingerprint).copied())
        .collect::<Option<Vec<i64>>>()
        .ok_or(sqlx::Error::RowNotFound)?;
    let n = gpus.ids.len();
    let overlapping = store::overlapping_periods(
        &mut tx,
        &gpus.ids,
        &vec![b.period_start; n],
        &vec![b.period_end; n],
    )
    .await?;
    let resent = registry::resent_gpus(b, &gpus.ids, &overlapping)?;
    let new_gpus: Vec<i32> = gpus
        .ids
        .iter()
        .copied()
        .filter(|g| !resent.contains(g))
        .collect();
    store::record_presence(&mut tx, &[(b, &new_gpus)]).await?;
    let fresh = if resent.is_empty() {
        b.windows.iter().collect()
    } else {
        let stored = store::stored_windows(&mut tx, &resent, b.period_start, b.period_end).await?;
        let ids = resent::BatchIds {
            gpus: &gpus.ids,
            slices: &slice_ids,
            consumers: &consumer_ids,
        };
        resent::check(b, ids, &resent, &stored)?
    };
    let slice_gpus = registry::slice_gpus(b, &gpus.ids);
    let ids = store::WindowIds {
        slices: &slice_ids,
        slice_gpus: &slice_gpus,
        consumers: &consumer_ids,
    };
    // Before the windows are written, as a group does: a batch writes windows and rollups only
    // while it holds the owners' lock, so that, holding it, it never waits on a batch that waits
    // for a change of ownership.
    let owners = store::read_ownership(&mut tx, &attribution::namespaces(&[b])).await?;
    let new = store::insert_windows(&mut tx, &fresh, ids).await?;
    let mut teams = attribution::Teams::default();
    let mut rollup = Rollup::new();
    // Validation bounds every figure, so these sums fit; were one not to, the batch fails whole.
    attribution::add(
        &mut rollup,
        &mut teams,
        new.iter().copied(),
        ids,
        &b.consumers,
        &owners,
    )
    .ok_or_else(|| {
        IngestError::Db(sqlx::Error::Protocol(
            "an hourly rollup sum overflowed".into(),
        ))
    })?;
    store::add_to_rollup(&mut tx, rollup, teams.names()).await?;
    tx.commit().await?;
    let inserted = new.len() as u64;
    Ok(IngestOutcome {
        inserted,
        duplicates: b.windows.len() as u64 - inserted,
    })
}
