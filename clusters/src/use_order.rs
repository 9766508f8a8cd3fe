//! The order in which a bounded cache's entries were last used, so that the least
//! recently used is found in a B-tree step.
//!
//! The caches of decoded revisions and of region objects each found it by a scan of every
//! entry, on every insert once their byte bound was reached: at 10,000 rollouts that was
//! tens of thousands of entries per insert, a fifth of the controller's CPU during a wave
//! (`perf` on `make scale-bench`).

use std::collections::BTreeMap;

/// When each key was last used, as a tick of this order's own counter.
#[derive(Debug)]
pub struct UseOrder<K> {
    by_tick: BTreeMap<u64, K>,
    ticks: u64,
}

impl<K> Default for UseOrder<K> {
    fn default() -> Self {
        Self {
            by_tick: BTreeMap::new(),
            ticks: 0,
        }
    }
}

impl<K> UseOrder<K> {
    /// Notes that `key` is used now: it becomes the most recently used. `previous` is the
    /// tick this order gave it before (`None` for a new key). Returns its new tick.
    pub fn used(&mut self, previous: Option<u64>, key: K) -> u64 {
        if let Some(previous) = previous {
            self.by_tick.remove(&previous);
        }
        self.ticks = self.ticks.wrapping_add(1);
        self.by_tick.insert(self.ticks, key);
        self.ticks
    }

    /// Forgets the key given `tick` (removed from the cache).
    pub fn forget(&mut self, tick: u64) {
        self.by_tick.remove(&tick);
    }

    /// Takes the least recently used key out of the order.
    pub fn take_oldest(&mut self) -> Option<K> {
        self.by_tick.pop_first().map(|(_, key)| key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_comes_out_first() {
        let mut order = UseOrder::default();
        let a = order.used(None, "a");
        let b = order.used(None, "b");
        let _c = order.used(None, "c");
        // "a" used again: "b" is now the oldest.
        order.used(Some(a), "a");
        assert_eq!(order.take_oldest(), Some("b"));
        order.forget(b);
        assert_eq!(order.take_oldest(), Some("c"));
        assert_eq!(order.take_oldest(), Some("a"));
        assert_eq!(order.take_oldest(), None);
    }
}
