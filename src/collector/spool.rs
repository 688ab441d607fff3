//! The collector's on-disk spool: every closed window's batch is written here (fsync'd, then renamed
//! into place, then the folder fsync'd) before it is shipped, and removed only after the server's
//! 2xx. Batches ship oldest first; a collector killed at any instant finds, when restarted, every
//! batch it had not yet had acknowledged, and the server's idempotency makes re-sending harmless.
//! The spool is bounded in bytes: when full, the newest batch is dropped, loudly.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use tokio::sync::Notify;

use crate::domain::batch::Batch;

const SUFFIX: &str = ".batch.gz";

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("spool file {0} is not a batch: {1}")]
    Corrupt(PathBuf, String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_owned(),
        source,
    }
}

struct State {
    next: u64,
    bytes: u64,
    /// The batches waiting, by sequence number, oldest first.
    queue: VecDeque<u64>,
}

pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<State>,
    /// Woken when a batch arrives.
    pub arrived: Notify,
}

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

impl Spool {
    /// Opens (or creates) the spool in `dir`, finishing what a crash left: half-written files are
    /// removed, complete ones kept.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Spool, SpoolError> {
        fs::create_dir_all(dir.join("rejected")).map_err(io(dir))?;
        let mut state = State {
            next: 0,
            bytes: 0,
            queue: VecDeque::new(),
        };
        let mut found = Vec::new();
        for entry in fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                fs::remove_file(entry.path()).map_err(io(&entry.path()))?;
            } else if let Some(seq) = name
                .strip_suffix(SUFFIX)
                .and_then(|s| s.parse::<u64>().ok())
            {
                state.next = state.next.max(seq + 1);
                state.bytes += entry.metadata().map_err(io(&entry.path()))?.len();
                found.push(seq);
            }
        }
        found.sort_unstable();
        state.queue = found.into();
        if !state.queue.is_empty() {
            tracing::info!(
                batches = state.queue.len(),
                bytes = state.bytes,
                "The spool holds batches from before; they ship first."
            );
        }
        let spool = Spool {
            dir: dir.to_owned(),
            max_bytes,
            state: Mutex::new(state),
            arrived: Notify::new(),
        };
        spool.gauges();
        Ok(spool)
    }

    fn gauges(&self) {
        let s = self.state.lock().expect("not poisoned");
        metrics::gauge!("slicemeter_collector_spool_bytes").set(s.bytes as f64);
        metrics::gauge!("slicemeter_collector_spool_batches").set(s.queue.len() as f64);
    }

    /// Batches waiting.
    pub fn len(&self) -> usize {
        self.state.lock().expect("not poisoned").queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes a batch durably. `Ok(false)`: the spool is full and the batch was dropped.
    pub fn push(&self, batch: &Batch) -> Result<bool, SpoolError> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        serde_json::to_writer(&mut gz, batch).expect("a batch serialises");
        let bytes = gz.finish().expect("writing to memory");
        let mut state = self.state.lock().expect("not poisoned");
        if state.bytes + bytes.len() as u64 > self.max_bytes {
            tracing::error!(
                held = state.bytes,
                limit = self.max_bytes,
                start = %batch.period.start,
                "The spool is full: the server has not taken batches for a while; this batch is dropped."
            );
            metrics::counter!("slicemeter_collector_spool_dropped_total").increment(1);
            return Ok(false);
        }
        let seq = state.next;
        let tmp = self.dir.join(format!("{seq:020}.tmp"));
        let path = self.dir.join(format!("{seq:020}{SUFFIX}"));
        let mut f = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&tmp)
            .map_err(io(&tmp))?;
        f.write_all(&bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        fs::rename(&tmp, &path).map_err(io(&path))?;
        sync_dir(&self.dir)?;
        state.next += 1;
        state.bytes += bytes.len() as u64;
        state.queue.push_back(seq);
        drop(state);
        self.gauges();
        self.arrived.notify_one();
        Ok(true)
    }

    fn path_of(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}{SUFFIX}"))
    }

    /// The oldest batch, if any. A file that does not read as a batch is an error naming it (set
    /// it aside with [`Spool::reject`]).
    pub fn oldest(&self) -> Result<Option<(PathBuf, Batch)>, SpoolError> {
        let Some(seq) = self
            .state
            .lock()
            .expect("not poisoned")
            .queue
            .front()
            .copied()
        else {
            return Ok(None);
        };
        let path = self.path_of(seq);
        let mut json = Vec::new();
        GzDecoder::new(File::open(&path).map_err(io(&path))?)
            .read_to_end(&mut json)
            .map_err(|e| SpoolError::Corrupt(path.clone(), e.to_string()))?;
        let batch = serde_json::from_slice(&json)
            .map_err(|e| SpoolError::Corrupt(path.clone(), e.to_string()))?;
        Ok(Some((path, batch)))
    }

    /// Forgets a batch the server took.
    pub fn remove(&self, path: &Path) -> Result<(), SpoolError> {
        let len = fs::metadata(path).map_err(io(path))?.len();
        fs::remove_file(path).map_err(io(path))?;
        sync_dir(&self.dir)?;
        self.forget(path, len);
        Ok(())
    }

    /// Sets aside a batch the server refused (or that does not read), for a person to look at.
    pub fn reject(&self, path: &Path) -> Result<PathBuf, SpoolError> {
        let len = fs::metadata(path).map_err(io(path))?.len();
        let to = self
            .dir
            .join("rejected")
            .join(path.file_name().expect("a file"));
        fs::rename(path, &to).map_err(io(&to))?;
        sync_dir(&self.dir)?;
        self.forget(path, len);
        Ok(to)
    }

    /// Queues every set-aside batch again, after those waiting (`collect --resend-rejected`, once
    /// whatever made the server refuse them is fixed). Returns how many.
    pub fn requeue_rejected(&self) -> Result<usize, SpoolError> {
        let aside = self.dir.join("rejected");
        let mut names: Vec<PathBuf> = fs::read_dir(&aside)
            .map_err(io(&aside))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(SUFFIX))
            .collect();
        names.sort();
        let mut state = self.state.lock().expect("not poisoned");
        for from in &names {
            let seq = state.next;
            let to = self.path_of(seq);
            let len = fs::metadata(from).map_err(io(from))?.len();
            fs::rename(from, &to).map_err(io(&to))?;
            state.next += 1;
            state.bytes += len;
            state.queue.push_back(seq);
        }
        drop(state);
        sync_dir(&self.dir)?;
        sync_dir(&aside)?;
        self.gauges();
        if !names.is_empty() {
            self.arrived.notify_one();
        }
        Ok(names.len())
    }

    /// Takes a batch that left the spool out of the queue and the byte count.
    fn forget(&self, path: &Path, len: u64) {
        let mut s = self.state.lock().expect("not poisoned");
        s.bytes -= len.min(s.bytes);
        if let Some(i) = s.queue.iter().position(|&seq| self.path_of(seq) == path) {
            s.queue.remove(i);
        }
        drop(s);
        self.gauges();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::batch::Period;

    fn batch(minute: u32) -> Batch {
        let start: chrono::DateTime<chrono::Utc> =
            format!("2026-09-01T00:{minute:02}:00Z").parse().unwrap();
        Batch {
            node: "n".into(),
            period: Period {
                start,
                end: start + chrono::Duration::minutes(1),
            },
            gpus: vec![],
            slices: vec![],
            windows: vec![],
        }
    }

    #[test]
    fn batches_come_out_oldest_first_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        for m in 0..3 {
            assert!(spool.push(&batch(m)).unwrap());
        }
        drop(spool);
        // A crash mid-write leaves a temporary file: it is cleaned up, the rest kept.
        std::fs::write(dir.path().join("00000000000000000003.tmp"), b"half").unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(spool.len(), 3);
        let (path, first) = spool.oldest().unwrap().unwrap();
        assert_eq!(first, batch(0));
        spool.remove(&path).unwrap();
        assert_eq!(spool.oldest().unwrap().unwrap().1, batch(1));
        assert!(spool.push(&batch(9)).unwrap());
        assert!(!dir.path().join("00000000000000000003.tmp").exists());
        assert!(
            dir.path().join("00000000000000000003.batch.gz").exists(),
            "numbering goes on after the last batch"
        );
    }

    #[test]
    fn a_full_spool_drops_the_newest_batch_and_a_refused_one_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 150).unwrap();
        assert!(spool.push(&batch(0)).unwrap());
        let mut stored = 1;
        while spool.push(&batch(stored)).unwrap() {
            stored += 1;
        }
        assert_eq!(spool.len(), stored as usize);
        let (path, _) = spool.oldest().unwrap().unwrap();
        let aside = spool.reject(&path).unwrap();
        assert!(aside.starts_with(dir.path().join("rejected")));
        assert_eq!(spool.len(), stored as usize - 1);
    }

    #[test]
    fn set_aside_batches_are_queued_again_after_the_waiting_ones() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        for m in 0..3 {
            assert!(spool.push(&batch(m)).unwrap());
        }
        let (path, _) = spool.oldest().unwrap().unwrap();
        spool.reject(&path).unwrap();
        assert_eq!(spool.len(), 2);
        assert_eq!(spool.requeue_rejected().unwrap(), 1);
        assert_eq!(spool.len(), 3);
        assert_eq!(
            std::fs::read_dir(dir.path().join("rejected"))
                .unwrap()
                .count(),
            0
        );
        // Queued durably: a restarted collector finds it, after the two that waited.
        drop(spool);
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        let mut order = Vec::new();
        while let Some((path, b)) = spool.oldest().unwrap() {
            order.push(b.period.start.format("%M").to_string());
            spool.remove(&path).unwrap();
        }
        assert_eq!(order, ["01", "02", "00"]);
    }

    #[test]
    fn a_batch_that_does_not_read_is_named_and_can_be_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("00000000000000000000.batch.gz"),
            b"not gzip",
        )
        .unwrap();
        let spool = Spool::open(dir.path(), 1 << 20).unwrap();
        assert!(spool.push(&batch(1)).unwrap());
        assert_eq!(spool.len(), 2);
        let Err(SpoolError::Corrupt(path, _)) = spool.oldest() else {
            panic!("the unreadable batch comes first");
        };
        assert!(path.ends_with("00000000000000000000.batch.gz"));
        spool.reject(&path).unwrap();
        assert_eq!(spool.oldest().unwrap().unwrap().1, batch(1));
        assert_eq!(spool.len(), 1);
    }
}
