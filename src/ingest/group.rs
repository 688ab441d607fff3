//! Group commit: batches that arrive together are written in one transaction. A gatherer takes the
//! batches waiting (up to [`GroupCommit::wait`] for more while others are on their way, or until
//! [`GroupCommit::max_windows`]) and hands the group to one of [`GroupCommit::writers`] writers,
//! which stores it with set-based statements: one advisory-lock statement, one read of the GPUs'
//! registrations, the slices and consumers registered only where the [`Known`] cache has not seen
//! them (a group with a few new consumers registers those few), one presence check, one insert of
//! presence and its rollups, one `COPY` of every window and one upsert of the rollups.
//!
//! Each batch was validated on its own and is answered on its own. Groups and single batches are
//! written by one path (`write_batches`), in one of two modes: a group ([`Mode::Group`]) stores
//! only batches that are new and consistent; anything else a batch can meet (a re-sent period, a
//! duplicate window, another node's GPU, a changed slice, a database error) rolls the group back
//! (the reason is a [`Fallback`]) and its batches are written one by one, each alone in its own
//! transaction with every check ([`Mode::Alone`]), so that each gets the answer it would have had
//! alone and one bad batch never fails its neighbours. Batches that report the same GPU are never
//! in one group (a later one waits for the next), so a group never checks a GPU's period against a
//! period it is itself writing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::Utc;
use sqlx::{PgConnection, PgPool};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::attribution;
use super::known::{Consumers, Known};
use super::registry::{self, RegisteredGpu, RegisteredSlice};
use super::resent;
use super::validate::ValidBatch;
use super::{IngestError, store};
use crate::domain::batch::IngestOutcome;
use crate::domain::window::{Rollup, Window};

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
    /// Whether a write to a closed UTC day marks it for right-sizing's day summaries to be made
    /// again ([`store::mark_closed_days`]). Always, but in `slicemeter-bench ingest`'s baseline,
    /// which measures what the marks cost: without them a summarised day goes on being read from
    /// its summary after a late write, without it.
    pub evidence_marks: bool,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            wait: Duration::from_millis(2),
            max_windows: 20_000,
            writers: 2,
            cache_entries: 200_000,
            evidence_marks: true,
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
        let (pool, known, marks) = (pool.clone(), known.clone(), config.evidence_marks);
        tokio::spawn(async move {
            write(&pool, group.jobs, &known, marks).await;
            drop(permit);
        });
    }
}

/// Why a group was rolled back and its batches written alone: the `reason` label of
/// `slicemeter_ingest_group_fallbacks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fallback {
    /// A window of the group was already stored.
    StoredWindow,
    /// The database failed, or holds what ingest never writes: what was committed is in doubt,
    /// so the [`Known`] cache is forgotten.
    DatabaseError,
    /// A batch is refused (another node's GPU, a changed GPU or slice): alone, it gets its answer.
    BatchRefused,
    /// A batch re-sends or overlaps a period already stored for one of its GPUs.
    StoredPeriod,
    /// A rollup sum overflowed: alone, only the batch that overflows fails.
    RollupOverflow,
}

impl Fallback {
    fn label(self) -> &'static str {
        match self {
            Fallback::StoredWindow => "a stored window",
            Fallback::DatabaseError => "database error",
            Fallback::BatchRefused => "a batch refused",
            Fallback::StoredPeriod => "a re-sent or overlapping period",
            Fallback::RollupOverflow => "a rollup sum overflowed",
        }
    }
}

impl From<Stop> for Fallback {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::StoredPeriod => Fallback::StoredPeriod,
            Stop::Refused(IngestError::Db(sqlx::Error::Database(d)))
                if d.code().as_deref() == Some(store::UNIQUE_VIOLATION) =>
            {
                Fallback::StoredWindow
            }
            Stop::Refused(e @ (IngestError::Db(_) | IngestError::BadFingerprint(_))) => {
                tracing::debug!(error = %e, "A group of batches met a database error; storing them one by one.");
                Fallback::DatabaseError
            }
            Stop::Refused(IngestError::RollupOverflow) => Fallback::RollupOverflow,
            Stop::Refused(_) => Fallback::BatchRefused,
        }
    }
}

/// Why a write was rolled back.
enum Stop {
    /// The batch's answer when it is written alone; in a group, a reason to fall back.
    Refused(IngestError),
    /// A group met a period already stored for one of its GPUs: only a batch written alone is
    /// checked against one.
    StoredPeriod,
}

impl From<IngestError> for Stop {
    fn from(e: IngestError) -> Self {
        Stop::Refused(e)
    }
}

impl From<sqlx::Error> for Stop {
    fn from(e: sqlx::Error) -> Self {
        Stop::Refused(IngestError::Db(e))
    }
}

/// How a write meets what is already stored.
#[derive(Clone, Copy)]
enum Mode<'k> {
    /// A group of batches taken to be new and consistent: registrations the cache knows are not
    /// registered again, and a stored period, a stored window or a refusal rolls it back.
    Group(&'k Known),
    /// One batch, after its group fell back: everything registered, a re-sent period checked
    /// against the stored windows (a repeated window left out as a duplicate), a refusal its
    /// answer.
    Alone,
}

/// Writes a group; if it is rolled back, writes its batches alone, each answered with what it
/// would have had on its own.
async fn write(pool: &PgPool, jobs: Vec<Job>, known: &Known, marks: bool) {
    metrics::histogram!("slicemeter_ingest_group_batches").record(jobs.len() as f64);
    let batches: Vec<&ValidBatch> = jobs.iter().map(|j| &j.batch).collect();
    let reason = match write_batches(pool, &batches, Mode::Group(known), marks).await {
        Ok(outcomes) => {
            for (job, outcome) in jobs.into_iter().zip(outcomes) {
                let _ = job.reply.send(Ok(outcome));
            }
            return;
        }
        Err(stop) => Fallback::from(stop),
    };
    metrics::counter!("slicemeter_ingest_group_fallbacks_total", "reason" => reason.label())
        .increment(1);
    if reason == Fallback::DatabaseError {
        known.forget();
    }
    for job in jobs {
        let outcome = match write_batches(pool, &[&job.batch], Mode::Alone, marks).await {
            // One outcome per batch written.
            Ok(outcomes) => Ok(outcomes[0]),
            Err(Stop::Refused(e)) => Err(e),
            Err(Stop::StoredPeriod) => {
                unreachable!("a batch written alone is checked against a stored period")
            }
        };
        let _ = job.reply.send(outcome);
    }
}

/// Writes batches that report disjoint GPUs in one transaction (a group, or one batch alone: see
/// [`Mode`]) and returns each one's outcome, or rolls it back and says why. Batches that report
/// the same GPU are serialised by the GPUs' advisory locks (taken in one global order, so never a
/// deadlock), so the presence and re-sent checks cannot race.
async fn write_batches(
    pool: &PgPool,
    batches: &[&ValidBatch],
    mode: Mode<'_>,
    marks: bool,
) -> Result<Vec<IngestOutcome>, Stop> {
    let known = match mode {
        Mode::Group(known) => Some(known),
        Mode::Alone => None,
    };
    let mut tx = pool.begin().await?;
    store::lock_gpus(&mut tx, batches).await?;
    let registered = register(&mut tx, batches, known).await?;
    let fresh = record_periods(&mut tx, batches, &registered, mode).await?;
    let slice_gpus: Vec<Vec<i32>> = batches
        .iter()
        .zip(&registered.gpus)
        .map(|(b, gpus)| registry::slice_gpus(b, gpus))
        .collect();
    let ids: Vec<store::WindowIds> = (0..batches.len())
        .map(|i| store::WindowIds {
            slices: &registered.slices[i],
            slice_gpus: &slice_gpus[i],
            consumers: &registered.consumers[i],
        })
        .collect();
    // Before the windows are written: a batch writes windows and rollups only while it holds the
    // owners' lock, so that, holding it, it never waits on a batch that waits for a change of
    // ownership.
    let owners = store::read_ownership(&mut tx, &attribution::namespaces(batches)).await?;
    let new: Vec<Vec<&Window>> = match mode {
        // One `COPY` of every window; a stored one fails it (and the group falls back).
        Mode::Group(_) => {
            let mut rows = String::new();
            for (windows, ids) in fresh.iter().zip(&ids) {
                store::copy_rows(&mut rows, windows, *ids);
            }
            if !rows.is_empty() {
                store::copy_windows(&mut tx, rows.as_bytes()).await?;
            }
            fresh
        }
        Mode::Alone => {
            let mut new = Vec::with_capacity(fresh.len());
            for (windows, ids) in fresh.iter().zip(&ids) {
                new.push(store::insert_windows(&mut tx, windows, *ids).await?);
            }
            new
        }
    };
    let mut teams = attribution::Teams::default();
    let mut rollup = Rollup::new();
    for ((b, windows), ids) in batches.iter().zip(&new).zip(&ids) {
        // Validation bounds every figure, so these sums fit; were one not to, a group is written
        // batch by batch, where the batch that overflows fails alone.
        attribution::add(
            &mut rollup,
            &mut teams,
            windows.iter().copied(),
            *ids,
            &b.consumers,
            &owners,
        )
        .ok_or(IngestError::RollupOverflow)?;
    }
    if marks {
        // Presence too: idle cards change the month rollup's presence per GPU (`usage_month_gpu`).
        let present = batches.iter().flat_map(|b| {
            crate::domain::time::seconds_by_hour(b.period_start, b.period_end)
                .into_iter()
                .map(|(h, _)| h)
        });
        store::mark_closed_days(
            &mut tx,
            rollup.rows.keys().map(|(hour, _)| *hour).chain(present),
            Utc::now(),
        )
        .await?;
    }
    store::add_to_rollup(&mut tx, rollup, teams.teams()).await?;
    tx.commit().await?;
    // An unchanged inventory costs nothing here either.
    if let Some(known) = known
        && (registered.gpus_inserted
            || registered.slices_registered
            || !registered.new_consumers.is_empty())
    {
        known.remember(batches, &registered.slice_rows, &registered.new_consumers);
    }
    Ok(batches
        .iter()
        .zip(&new)
        .map(|(b, new)| {
            let inserted = new.len() as u64;
            IngestOutcome {
                inserted,
                duplicates: b.windows.len() as u64 - inserted,
            }
        })
        .collect())
}

/// The batches' GPUs, slices and consumers, registered and checked against their registrations.
struct Registered {
    /// Each batch's GPU ids, slice ids and consumer ids, by the batch's own indexes.
    gpus: Vec<Vec<i32>>,
    slices: Vec<Vec<i32>>,
    consumers: Vec<Vec<i64>>,
    /// What a group's cache is to remember once it commits: whether the GPUs were inserted, the
    /// slices' rows and whether they were registered, the consumers registered.
    gpus_inserted: bool,
    slice_rows: Vec<RegisteredSlice>,
    slices_registered: bool,
    new_consumers: HashMap<[u8; 32], i64>,
}

/// Registers the batches' GPUs, slices and consumers where `known` (a group's cache; none for a
/// batch alone) has not seen them committed, and checks each batch's against their registrations
/// (another node's GPU, a changed GPU or slice: the batch is refused).
async fn register(
    tx: &mut PgConnection,
    batches: &[&ValidBatch],
    known: Option<&Known>,
) -> Result<Registered, Stop> {
    let gpus_inserted = !known.is_some_and(|k| k.all_gpus_known(batches));
    let mut stored_gpus: HashMap<String, RegisteredGpu> =
        store::register_gpus(tx, batches, gpus_inserted)
            .await?
            .into_iter()
            .map(|g| (g.gpu_uuid.clone(), g))
            .collect();
    let mut gpus = Vec::with_capacity(batches.len());
    for b in batches {
        let own: Vec<_> = b
            .gpus
            .iter()
            .filter_map(|g| stored_gpus.remove(&g.uuid))
            .collect();
        let checked = registry::check_gpus(b, &own)?;
        for &(gpu, mig) in &checked.mig_changed {
            store::set_mig_mode(tx, gpu, mig).await?;
        }
        gpus.push(checked.ids);
    }
    let placed: Vec<(&ValidBatch, &[i32])> = batches
        .iter()
        .copied()
        .zip(gpus.iter().map(Vec::as_slice))
        .collect();
    let known_slices = known.and_then(|k| k.slices(batches));
    let slices_registered = known_slices.is_none();
    let slice_rows = match known_slices {
        Some(rows) => rows,
        None => store::register_slices(tx, &placed).await?,
    };
    let mut by_uuid: HashMap<&str, &RegisteredSlice> = slice_rows
        .iter()
        .map(|s| (s.slice_uuid.as_str(), s))
        .collect();
    let mut slices = Vec::with_capacity(batches.len());
    for (b, gpus) in &placed {
        let own: Vec<RegisteredSlice> = b
            .slices
            .iter()
            .filter_map(|s| by_uuid.remove(s.uuid.as_str()).cloned())
            .collect();
        slices.push(registry::check_slices(b, gpus, &own)?);
    }
    let known_consumers = match known {
        Some(known) => known.consumers(batches),
        None => Consumers::none_known(batches),
    };
    let new_consumers = if known_consumers.unknown.is_empty() {
        HashMap::new()
    } else {
        store::register_consumers(tx, &known_consumers.unknown).await?
    };
    let consumers: Vec<Vec<i64>> = known_consumers
        .ids
        .into_iter()
        .zip(batches)
        .map(|(ids, b)| {
            ids.into_iter()
                .zip(&b.consumers)
                .map(|(id, c)| {
                    id.or_else(|| new_consumers.get(&c.fingerprint).copied())
                        .ok_or(sqlx::Error::RowNotFound)
                })
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    Ok(Registered {
        gpus,
        slices,
        consumers,
        gpus_inserted,
        slice_rows,
        slices_registered,
        new_consumers,
    })
}

/// Records each batch's GPUs as present for its period and returns each batch's windows to
/// write. A group stops at a period already stored; a batch alone re-sending its period records
/// no presence again for the GPUs it re-sends, and its windows are checked against the stored
/// ones (`resent`), a repeated one left out.
async fn record_periods<'b>(
    tx: &mut PgConnection,
    batches: &[&'b ValidBatch],
    registered: &Registered,
    mode: Mode<'_>,
) -> Result<Vec<Vec<&'b Window>>, Stop> {
    let (mut gpu, mut start, mut end) = (Vec::new(), Vec::new(), Vec::new());
    for (b, ids) in batches.iter().zip(&registered.gpus) {
        for &g in ids {
            gpu.push(g);
            start.push(b.period_start);
            end.push(b.period_end);
        }
    }
    let overlapping = store::overlapping_periods(tx, &gpu, &start, &end).await?;
    if matches!(mode, Mode::Group(_)) && !overlapping.is_empty() {
        return Err(Stop::StoredPeriod);
    }
    // Each batch's GPUs whose period it re-sends (none in a group).
    let resent: Vec<Vec<i32>> = batches
        .iter()
        .zip(&registered.gpus)
        .map(|(b, gpus)| registry::resent_gpus(b, gpus, &overlapping))
        .collect::<Result<_, _>>()?;
    let new_gpus: Vec<Vec<i32>> = registered
        .gpus
        .iter()
        .zip(&resent)
        .map(|(gpus, resent)| {
            gpus.iter()
                .copied()
                .filter(|g| !resent.contains(g))
                .collect()
        })
        .collect();
    let present: Vec<(&ValidBatch, &[i32])> = batches
        .iter()
        .copied()
        .zip(new_gpus.iter().map(Vec::as_slice))
        .collect();
    store::record_presence(tx, &present).await?;
    let mut fresh = Vec::with_capacity(batches.len());
    for (i, &b) in batches.iter().enumerate() {
        fresh.push(if resent[i].is_empty() {
            b.windows.iter().collect()
        } else {
            let stored =
                store::stored_windows(tx, &resent[i], b.period_start, b.period_end).await?;
            let ids = resent::BatchIds {
                gpus: &registered.gpus[i],
                slices: &registered.slices[i],
                consumers: &registered.consumers[i],
            };
            resent::check(b, ids, &resent[i], &stored)?
        });
    }
    Ok(fresh)
}
