//! A report's CPU-bound work spread over the machine's cores: a month's two million pod-hours are
//! sorted, summed and priced in parts, each on a thread of its own (scoped: the parts borrow the
//! rows), the parts' results given back in the parts' order so that what is put together from
//! them is what one thread would have made.

/// Below this many items a part is not worth a thread.
pub const PART_MIN: usize = 1 << 16;

/// The threads a report's work is spread over: the machine's cores.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How many parts `n` items are cut into: one per thread, none under [`PART_MIN`] items.
pub fn parts_of(n: usize) -> usize {
    (n / PART_MIN).clamp(1, threads())
}

/// `f` of each part, each on a thread (the last on the caller's), the results in the parts' order.
/// A panic in a part is the caller's.
pub fn each<T: Send, R: Send>(parts: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|scope| {
        let mut parts = parts.into_iter();
        let last = parts.next_back();
        let handles: Vec<_> = parts.map(|p| scope.spawn(move || f(p))).collect();
        let last = last.map(f);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .chain(last)
            .collect()
    })
}

/// Sorts `v` (unstably) on up to `threads` threads: its halves split around its median, then each
/// sorted on its own.
pub fn sort<T: Ord + Send>(v: &mut [T], threads: usize) {
    if threads <= 1 || v.len() < 2 * PART_MIN {
        v.sort_unstable();
        return;
    }
    let mid = v.len() / 2;
    v.select_nth_unstable(mid);
    let (low, high) = v.split_at_mut(mid);
    let half = threads / 2;
    std::thread::scope(|scope| {
        scope.spawn(|| sort(low, half));
        sort(high, threads - half);
    });
}

/// `items` dealt into `parts` groups of about equal `weight`: the heaviest first, each to the
/// lightest group so far.
pub fn balanced<T>(items: Vec<T>, parts: usize, weight: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut items: Vec<(usize, T)> = items.into_iter().map(|t| (weight(&t), t)).collect();
    items.sort_by_key(|item| std::cmp::Reverse(item.0));
    let mut groups: Vec<(usize, Vec<T>)> = (0..parts.max(1)).map(|_| (0, Vec::new())).collect();
    for (w, item) in items {
        let lightest = groups
            .iter_mut()
            .min_by_key(|(total, _)| *total)
            .expect("at least one group");
        lightest.0 += w;
        lightest.1.push(item);
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sort_on_several_threads_is_the_sort_on_one() {
        // A pseudo-random sequence with repeats, large enough to be cut.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let v: Vec<u32> = (0..5 * PART_MIN)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 10_007) as u32
            })
            .collect();
        let mut one = v.clone();
        one.sort_unstable();
        for threads in [2, 3, 4] {
            let mut many = v.clone();
            sort(&mut many, threads);
            assert_eq!(many, one, "{threads} threads");
        }
    }

    #[test]
    fn parts_come_back_in_their_order_and_weights_are_dealt_evenly() {
        assert_eq!(each(vec![1, 2, 3, 4], |p| p * 10), vec![10, 20, 30, 40]);
        assert_eq!(each(Vec::<u8>::new(), |p| p), Vec::<u8>::new());
        let groups = balanced(vec![5, 1, 4, 2, 3, 3], 2, |&w| w);
        let totals: Vec<usize> = groups.iter().map(|g| g.iter().sum()).collect();
        assert_eq!(totals, vec![9, 9]);
        assert_eq!(groups[0], vec![5, 3, 1]);
        assert_eq!(groups[1], vec![4, 3, 2]);
    }
}
