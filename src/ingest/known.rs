//! The registrations a group commit has seen committed ([`Known`]), so that a group whose GPUs,
//! slices and consumers are known costs no statement to register them, and one with a few new
//! consumers registers those few only.
//!
//! Each kind is kept in two generations ([`Generations`]): what is looked up or added goes into
//! the current one; when that is full it becomes the previous one and the one before is dropped.
//! What a fleet keeps using stays known however many pods come and go, and memory stays bounded.

use std::collections::HashMap;
use std::hash::Hash;

use super::registry::RegisteredSlice;
use super::validate::{ValidBatch, ValidConsumer};

/// A map of at most twice `cap` entries that keeps what was used since the last-but-one rotation.
#[derive(Debug)]
struct Generations<K, V> {
    cap: usize,
    current: HashMap<K, V>,
    previous: HashMap<K, V>,
}

impl<K: Eq + Hash + Clone, V: Clone> Generations<K, V> {
    fn new(cap: usize) -> Self {
        Generations {
            cap: cap.max(1),
            current: HashMap::new(),
            previous: HashMap::new(),
        }
    }

    /// The value of `key`, moved to the current generation if it was in the previous one.
    fn get(&mut self, key: &K) -> Option<V> {
        if let Some(v) = self.current.get(key) {
            return Some(v.clone());
        }
        let v = self.previous.remove(key)?;
        self.insert(key.clone(), v.clone());
        Some(v)
    }

    fn insert(&mut self, key: K, value: V) {
        if self.current.len() >= self.cap && !self.current.contains_key(&key) {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }

    fn clear(&mut self) {
        self.current.clear();
        self.previous.clear();
    }
}

/// Registrations seen committed. Slices and consumers are never changed once stored, so what is
/// remembered stays true; a GPU's registration can change (an admin moves it, its MIG mode
/// flips), so only the fact that it exists is remembered and its row is read in every group.
#[derive(Debug)]
pub struct Known {
    inner: std::sync::Mutex<Rows>,
}

#[derive(Debug)]
struct Rows {
    gpus: Generations<String, ()>,
    slices: Generations<String, RegisteredSlice>,
    consumers: Generations<[u8; 32], i64>,
}

/// Each batch's consumer ids (in the batch's order) where known, and the consumers that are not,
/// once each.
pub struct Consumers<'b> {
    pub ids: Vec<Vec<Option<i64>>>,
    pub unknown: Vec<&'b ValidConsumer>,
}

impl<'b> Consumers<'b> {
    /// Every batch's consumers as unknown: what a batch written without the cache registers.
    pub fn none_known(batches: &[&'b ValidBatch]) -> Self {
        let mut unknown: Vec<&ValidConsumer> = batches.iter().flat_map(|b| &b.consumers).collect();
        unknown.sort_unstable_by_key(|c| c.fingerprint);
        unknown.dedup_by_key(|c| c.fingerprint);
        Consumers {
            ids: batches
                .iter()
                .map(|b| vec![None; b.consumers.len()])
                .collect(),
            unknown,
        }
    }
}

impl Known {
    /// A cache of at most `cap` entries of each kind per generation.
    pub fn new(cap: usize) -> Self {
        Known {
            inner: std::sync::Mutex::new(Rows {
                gpus: Generations::new(cap),
                slices: Generations::new(cap),
                consumers: Generations::new(cap),
            }),
        }
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, Rows> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn all_gpus_known(&self, batches: &[&ValidBatch]) -> bool {
        let mut rows = self.rows();
        batches
            .iter()
            .flat_map(|b| &b.gpus)
            .all(|g| rows.gpus.get(&g.uuid).is_some())
    }

    /// The registrations of every batch's slices, if all are known.
    pub fn slices(&self, batches: &[&ValidBatch]) -> Option<Vec<RegisteredSlice>> {
        let mut rows = self.rows();
        batches
            .iter()
            .flat_map(|b| &b.slices)
            .map(|s| rows.slices.get(&s.uuid))
            .collect()
    }

    /// Every batch's consumer ids as far as known, and the consumers still to register.
    pub fn consumers<'b>(&self, batches: &[&'b ValidBatch]) -> Consumers<'b> {
        let mut rows = self.rows();
        let mut unknown: Vec<&ValidConsumer> = Vec::new();
        let ids = batches
            .iter()
            .map(|b| {
                b.consumers
                    .iter()
                    .map(|c| {
                        let id = rows.consumers.get(&c.fingerprint);
                        if id.is_none() {
                            unknown.push(c);
                        }
                        id
                    })
                    .collect()
            })
            .collect();
        unknown.sort_unstable_by_key(|c| c.fingerprint);
        unknown.dedup_by_key(|c| c.fingerprint);
        Consumers { ids, unknown }
    }

    /// Remembers what a committed group registered.
    pub fn remember(
        &self,
        batches: &[&ValidBatch],
        slices: &[RegisteredSlice],
        consumers: &HashMap<[u8; 32], i64>,
    ) {
        let mut rows = self.rows();
        for g in batches.iter().flat_map(|b| &b.gpus) {
            rows.gpus.insert(g.uuid.clone(), ());
        }
        for s in slices {
            rows.slices.insert(s.slice_uuid.clone(), s.clone());
        }
        for (&fingerprint, &id) in consumers {
            rows.consumers.insert(fingerprint, id);
        }
    }

    /// Forgets everything (after a database error, when what was committed is in doubt).
    pub fn forget(&self) {
        let mut rows = self.rows();
        rows.gpus.clear();
        rows.slices.clear();
        rows.consumers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Generations;

    #[test]
    fn what_is_used_survives_rotations_and_memory_stays_bounded() {
        let mut g = Generations::new(3);
        for k in 0..3 {
            g.insert(k, k * 10);
        }
        // Full: the next key starts a new generation; 0..3 are the previous one.
        g.insert(3, 30);
        assert_eq!(
            g.get(&0),
            Some(0),
            "found in the previous generation, moved up"
        );
        g.insert(4, 40);
        // Current (3, 0, 4) is full: 5 rotates it, dropping what was not used (1 and 2).
        g.insert(5, 50);
        assert_eq!(g.get(&1), None);
        assert_eq!(g.get(&2), None);
        assert_eq!(g.get(&0), Some(0));
        assert_eq!(g.get(&3), Some(30));
        assert!(g.current.len() + g.previous.len() <= 6);
        for k in 100..1000 {
            g.insert(k, k);
            assert!(g.current.len() <= 3 && g.previous.len() <= 3);
        }
    }

    #[test]
    fn re_adding_a_current_key_does_not_rotate() {
        let mut g = Generations::new(2);
        g.insert("a", 1);
        g.insert("b", 2);
        g.insert("b", 3);
        assert_eq!(g.get(&"a"), Some(1));
        assert_eq!(g.get(&"b"), Some(3));
        assert!(g.previous.is_empty());
    }
}
