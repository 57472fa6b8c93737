//! Value tables: the values of a 16-bit dtype (bfloat16, float16) looked up by the top
//! [`BUCKET_BITS`] bits of their stream word instead of computed, for the samplers whose
//! value is a monotone function of the word. The same bits as the exact kernel, by
//! construction: the table holds the exact kernel's own values.
//!
//! Why a lookup is exact. For `Normal { mean, std }` the value of word `w` is
//! `round_T(round_f32(mean + std * PhiInv(U32(w))))`. The computed `PhiInv(U32(w))` is
//! non-decreasing over all 2^32 words (proved by an exhaustive test,
//! `phi_inv_of_every_u32_word_is_monotone_exhaustive`), and every later step (the
//! product by a constant, the sum with a constant, each correctly rounded, and the
//! roundings to float32 and to `T`) is monotone in IEEE-754's total order, so the value
//! is monotone in `w` (non-increasing for a negative `std`) as long as `mean` and `std`
//! are finite (no NaN: `std * x` is finite or infinite, and `mean` finite). Signed zeros
//! keep that order too: a sum is `-0` only when both terms are, a product's zero has the
//! product's sign, and the roundings keep the sign. A monotone function that has the
//! same bits at both ends of a range of words has them on the whole range, and one that
//! changes once in a range changes at one split point, found by bisection. So each
//! bucket (the words sharing their top bits) is stored as a value below a split and a
//! value from it on; a bucket where the value changes more than once is marked mixed,
//! and its words take the exact lanes, in batches (`kernel::table_steps`): 0.4% of the
//! words for bfloat16 at std 0.02, 3.6% for float16 (near zero, where the 16-bit values,
//! subnormals included, are denser than the words, and far in the tails).
//!
//! A table costs 2^[`BUCKET_BITS`] x 2 exact values and the mixed buckets' bisections
//! to build (3-7 ms on a 2-core EPYC, what the exact kernel takes for about a million
//! values): fills of fewer than [`TABLE_MIN_ELEMENTS`] elements use one only if it is
//! already built, and a small cache ([`table_for`]) keeps the last [`CACHED_TABLES`].

use std::any::Any;
use std::sync::{Arc, Mutex, TryLockError};

use half::{bf16, f16};

use crate::init::{Dtype, Element, Sampler};
use crate::kernel::{self, WordTable};

/// A bucket is the words sharing their top `BUCKET_BITS` bits.
pub(crate) const BUCKET_BITS: u32 = 16;
/// Buckets per table.
const BUCKETS: usize = 1 << BUCKET_BITS;
/// The bits of a word below its bucket.
const LOW_BITS: u32 = 32 - BUCKET_BITS;
/// A word's offset in its bucket: `word & LOW_MASK`.
const LOW_MASK: u32 = (1 << LOW_BITS) - 1;
/// The split of a bucket whose value changes more than once (no offset reaches it).
const EXACT: u32 = u32::MAX;

/// Fills of at least this many elements build a table (module docs: about the
/// break-even).
pub(crate) const TABLE_MIN_ELEMENTS: u64 = 1 << 20;
/// Tables kept (each `BUCKETS` x 8 bytes: 512 KiB).
const CACHED_TABLES: usize = 8;

/// The values of one bucket: `below` for offsets under `split`, `above` from it on;
/// [`EXACT`] when the words need the exact path.
#[derive(Clone, Copy)]
struct Bucket<T> {
    below: T,
    above: T,
    split: u32,
}

/// The value table of one sampler and one 16-bit dtype `T`.
pub(crate) struct ValueTable<T> {
    sampler: Sampler,
    buckets: Box<[Bucket<T>; BUCKETS]>,
}

/// Whether `sampler` has value tables: a normal with finite constants, whose one-word
/// value is monotone in the word (module docs). A uniform's value is monotone too, but
/// its lane code is faster than a lookup; a truncated normal switches formulas at
/// `t = 1/2`, which no exhaustive test covers for every interval.
pub(crate) fn is_monotone(sampler: &Sampler) -> bool {
    match *sampler {
        Sampler::Normal { mean, std } => mean.is_finite() && std.is_finite(),
        Sampler::Uniform { .. } | Sampler::Constant { .. } | Sampler::TruncNormal(_) => false,
    }
}

/// The bits of a value, as a key of equality (`-0` and `+0` differ).
#[inline(always)]
fn bits<T: Element>(value: T) -> u64 {
    value.widen().to_bits()
}

impl<T: Element> ValueTable<T> {
    /// The table of `sampler` (which must be [`is_monotone`]): each bucket's two ends
    /// computed by the exact kernel, then the split of every bucket whose ends differ.
    pub(crate) fn build(sampler: &Sampler) -> Self {
        assert!(is_monotone(sampler), "a table needs a monotone sampler");
        let firsts: Vec<u32> = (0..BUCKETS as u32).map(|b| b << LOW_BITS).collect();
        let lasts: Vec<u32> = firsts.iter().map(|first| first | LOW_MASK).collect();
        let first_values = exact_values(sampler, &firsts);
        let last_values = exact_values(sampler, &lasts);
        let mut buckets: Vec<Bucket<T>> = first_values
            .iter()
            .zip(&last_values)
            .map(|(&below, &above)| Bucket {
                below,
                above,
                split: 0,
            })
            .collect();
        let mixed: Vec<usize> = (0..BUCKETS)
            .filter(|&b| bits(first_values[b]) != bits(last_values[b]))
            .collect();
        for (b, split) in mixed.iter().zip(splits(sampler, &mixed, &first_values)) {
            buckets[*b].split = split;
        }
        let Ok(buckets) = buckets.into_boxed_slice().try_into() else {
            unreachable!("one bucket per top-bits value")
        };
        ValueTable {
            sampler: *sampler,
            buckets,
        }
    }
}

impl<T: Element> WordTable<T> for ValueTable<T> {
    /// Mixed buckets' words are the ones not held.
    fn values(&self, words: &[u32], out: &mut [T], mixed: &mut [u16]) -> usize {
        let buckets: &[Bucket<T>; BUCKETS] = &self.buckets;
        let mut count = 0;
        for (k, (&word, slot)) in words.iter().zip(out.iter_mut()).enumerate() {
            // In range: `word >> LOW_BITS < 2^BUCKET_BITS`, the array's length.
            let bucket = buckets[(word >> LOW_BITS) as usize];
            // A mixed bucket's split is above every offset: `below`, overwritten later.
            *slot = if word & LOW_MASK < bucket.split {
                bucket.below
            } else {
                bucket.above
            };
            if bucket.split == EXACT {
                mixed[count] = k as u16;
                count += 1;
            }
        }
        count
    }

    fn sampler(&self) -> &Sampler {
        &self.sampler
    }
}

/// The exact kernel's values of `words`.
fn exact_values<T: Element>(sampler: &Sampler, words: &[u32]) -> Vec<T> {
    let mut values = vec![T::from_f64(0.0); words.len()];
    kernel::values_of_words(sampler, words, &mut values);
    values
}

/// The split of each bucket of `mixed` (whose ends differ; `first_values[b]` the value of
/// bucket `b`'s first word): the first offset whose value is not the first word's, or
/// [`EXACT`] where the value there is not yet the last word's (it changes again). One
/// bisection per bucket, all buckets a step at a time through the exact kernel.
fn splits<T: Element>(sampler: &Sampler, mixed: &[usize], first_values: &[T]) -> Vec<u32> {
    let first_word = |b: usize| (b as u32) << LOW_BITS;
    // Invariant: offset `low` has the first word's value, offset `high` does not.
    let mut low = vec![0u32; mixed.len()];
    let mut high = vec![LOW_MASK; mixed.len()];
    for _ in 0..LOW_BITS {
        let middles: Vec<u32> = low
            .iter()
            .zip(&high)
            .map(|(l, h)| l + (h - l) / 2)
            .collect();
        let words: Vec<u32> = mixed
            .iter()
            .zip(&middles)
            .map(|(&b, m)| first_word(b) | m)
            .collect();
        let values: Vec<T> = exact_values(sampler, &words);
        for (i, &b) in mixed.iter().enumerate() {
            if bits(values[i]) == bits(first_values[b]) {
                low[i] = middles[i];
            } else {
                high[i] = middles[i];
            }
        }
    }
    let split_words: Vec<u32> = mixed
        .iter()
        .zip(&high)
        .map(|(&b, h)| first_word(b) | h)
        .collect();
    let split_values: Vec<T> = exact_values(sampler, &split_words);
    let last_words: Vec<u32> = mixed.iter().map(|&b| first_word(b) | LOW_MASK).collect();
    let last_values: Vec<T> = exact_values(sampler, &last_words);
    (0..mixed.len())
        .map(|i| {
            debug_assert_eq!(high[i] - low[i], 1, "bisection converged");
            if bits(split_values[i]) == bits(last_values[i]) {
                high[i]
            } else {
                EXACT
            }
        })
        .collect()
}

/// A value table of some dtype, as a fill's source holds it (downcast to
/// `ValueTable<T>` by the run writer of element type `T`).
pub(crate) type AnyTable = Arc<dyn Any + Send + Sync>;

/// The cache's key: the dtype and the normal's `mean` and `std`, by their exact bits.
type TableKey = (Dtype, u64, u64);

fn table_key(sampler: &Sampler, dtype: Dtype) -> Option<TableKey> {
    match *sampler {
        Sampler::Normal { mean, std } => Some((dtype, mean.to_bits(), std.to_bits())),
        Sampler::Uniform { .. } | Sampler::Constant { .. } | Sampler::TruncNormal(_) => None,
    }
}

/// The most recently used tables, newest first.
static CACHE: Mutex<Vec<(TableKey, AnyTable)>> = Mutex::new(Vec::new());

/// Tries to take the cache's lock before giving up on the cache.
const CACHE_TRIES: usize = 10_000;

/// `use_cache` on the cache, or `None` when its lock stays taken: the lock is held for
/// a lookup or an insertion only (never while a table is built), so only a forked
/// child whose parent held it at the fork finds it taken for good, and that child then
/// fills without the cache (the same values) instead of waiting forever.
fn with_cache<R>(use_cache: impl FnOnce(&mut Vec<(TableKey, AnyTable)>) -> R) -> Option<R> {
    for _ in 0..CACHE_TRIES {
        match CACHE.try_lock() {
            Ok(mut cache) => return Some(use_cache(&mut cache)),
            // A panic elsewhere while the lock was held leaves the cache whole (a
            // remove or an insertion): its contents stay valid.
            Err(TryLockError::Poisoned(poisoned)) => {
                return Some(use_cache(&mut poisoned.into_inner()))
            }
            Err(TryLockError::WouldBlock) => std::thread::yield_now(),
        }
    }
    None
}

/// The value table for a fill of `len` elements of `dtype` through `sampler`: a cached
/// one, or one built now when the fill is large enough to repay it; `None` when the
/// sampler or the dtype has none (not monotone, or not a 16-bit dtype).
pub(crate) fn table_for(sampler: &Sampler, dtype: Dtype, len: u64) -> Option<AnyTable> {
    if !is_monotone(sampler) {
        return None;
    }
    let key = table_key(sampler, dtype)?;
    let cached = with_cache(|cache| {
        let at = cache.iter().position(|(cached, _)| *cached == key)?;
        let entry = cache.remove(at);
        let table = Arc::clone(&entry.1);
        cache.insert(0, entry);
        Some(table)
    });
    if let Some(table) = cached.flatten() {
        return Some(table);
    }
    if len < TABLE_MIN_ELEMENTS {
        return None;
    }
    let table: AnyTable = match dtype {
        Dtype::BF16 => Arc::new(ValueTable::<bf16>::build(sampler)),
        Dtype::F16 => Arc::new(ValueTable::<f16>::build(sampler)),
        Dtype::F32 | Dtype::F64 => return None,
    };
    // Two fills may build the same table at once: the same values, kept once.
    with_cache(|cache| {
        if !cache.iter().any(|(cached, _)| *cached == key) {
            cache.insert(0, (key, Arc::clone(&table)));
            cache.truncate(CACHED_TABLES);
        }
    });
    Some(table)
}

#[cfg(test)]
mod tests {
    use rayon::prelude::*;

    use super::*;

    /// Normals with tables: the usual init, unit, negative and zero `std` (signed
    /// zeros), a nonzero mean, `std` so tiny that values are subnormal or zero, and so
    /// huge that they overflow float32 and float16 to infinities.
    fn normals() -> Vec<Sampler> {
        [
            (0.0, 0.02),
            (0.0, 1.0),
            (0.0, -0.02),
            (1.0, 0.02),
            (-3.5, 7.0),
            (1e-3, 1e-7),
            (0.0, 1e-30),
            (0.0, 5e-324),
            (-0.0, -0.0),
            (0.0, 0.0),
            (65504.0, 1000.0),
            (0.0, 1e300),
            (-1e38, 1e38),
        ]
        .into_iter()
        .map(|(mean, std)| Sampler::Normal { mean, std })
        .collect()
    }

    /// The scalar reference's value of `word` (stream-format.md §4), by its bits.
    fn reference_bits<T: Element>(sampler: &Sampler, word: u32) -> u64 {
        bits(T::from_f64(sampler.one_word(word)))
    }

    /// The table's value of `word` by its bits, `None` where its bucket is mixed.
    fn table_bits<T: Element>(table: &ValueTable<T>, word: u32) -> Option<u64> {
        let mut out = [T::from_f64(0.0)];
        let mut mixed = [0u16];
        match table.values(&[word], &mut out, &mut mixed) {
            0 => Some(bits(out[0])),
            _ => None,
        }
    }

    /// Every bucket's first and last word, the words on both sides of every split, and
    /// `words`: the table's value is the reference's wherever the table holds one, and
    /// it holds one everywhere but in mixed buckets. Returns (two-valued, mixed) counts.
    fn check_table<T: Element>(sampler: &Sampler, words: &[u32]) -> (usize, usize) {
        let table = ValueTable::<T>::build(sampler);
        let check = |word: u32| {
            let bucket = table.buckets[(word >> LOW_BITS) as usize];
            match table_bits(&table, word) {
                Some(got) => assert_eq!(got, reference_bits::<T>(sampler, word), "{word:#x}"),
                None => assert_eq!(bucket.split, EXACT, "{word:#x} held by no bucket"),
            }
        };
        let (mut two_valued, mut mixed) = (0, 0);
        for (b, bucket) in table.buckets.iter().enumerate() {
            let first = (b as u32) << LOW_BITS;
            check(first);
            check(first | LOW_MASK);
            match bucket.split {
                0 => {}
                EXACT => mixed += 1,
                split => {
                    two_valued += 1;
                    check(first | (split - 1));
                    check(first | split);
                    check(first | (split + 1).min(LOW_MASK));
                }
            }
        }
        words.iter().for_each(|&word| check(word));
        (two_valued, mixed)
    }

    /// Pseudo-random words (xorshift32): stands in for the stream's.
    fn random_words(count: usize, seed: u32) -> Vec<u32> {
        let mut x = seed | 1;
        (0..count)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x
            })
            .collect()
    }

    #[test]
    fn table_values_equal_the_scalar_reference_at_every_bucket_edge_and_random_words() {
        let cases: Vec<(usize, Sampler)> = normals().into_iter().enumerate().collect();
        cases.into_par_iter().for_each(|(i, sampler)| {
            let words = random_words(1 << 18, 0x9e37_79b9 ^ i as u32);
            let bf16_counts = check_table::<bf16>(&sampler, &words);
            let f16_counts = check_table::<f16>(&sampler, &words);
            if sampler
                == (Sampler::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
            {
                // Both kinds of bucket are exercised (about 2,400 and 270 for bfloat16).
                for (two_valued, mixed) in [bf16_counts, f16_counts] {
                    assert!(two_valued > 1000 && mixed > 100, "{two_valued} {mixed}");
                }
            }
        });
    }

    /// A cache lock that stays taken (a forked child's, whose parent held it at the fork)
    /// is passed by: no table from the cache, one built for a large fill, no waiting.
    #[test]
    fn a_cache_lock_that_stays_taken_is_passed_by() {
        let sampler = Sampler::Normal {
            mean: 0.25,
            std: 0.5,
        };
        let held = CACHE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        assert!(table_for(&sampler, Dtype::BF16, 0).is_none());
        assert!(table_for(&sampler, Dtype::BF16, TABLE_MIN_ELEMENTS).is_some());
        drop(held);
        assert!(table_for(&sampler, Dtype::BF16, 0).is_none(), "not cached");
        assert!(table_for(&sampler, Dtype::BF16, TABLE_MIN_ELEMENTS).is_some());
        assert!(table_for(&sampler, Dtype::BF16, 0).is_some(), "cached");
        assert!(table_for(&sampler, Dtype::F16, 0).is_none(), "one dtype's");
    }

    /// The premise of every normal table: the inverse normal CDF, as the kernel computes
    /// it, is non-decreasing (and finite and nonzero) over all 2^32 words of the U32 map.
    #[test]
    #[ignore = "2^32 inverse normal CDFs: about a minute in release; make test-slow runs it"]
    fn phi_inv_of_every_u32_word_is_monotone_exhaustive() {
        const CHUNK: u64 = 1 << 20;
        let unit = Sampler::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let ends: Vec<(f64, f64)> = (0..(1u64 << 32) / CHUNK)
            .into_par_iter()
            .map(|chunk| {
                let words: Vec<u32> = (chunk * CHUNK..(chunk + 1) * CHUNK)
                    .map(|word| word as u32)
                    .collect();
                let mut x = vec![0f64; CHUNK as usize];
                // `0 + 1 * x` is `x`: the kernel's PhiInv(U32(word)), exactly.
                kernel::values_of_words(&unit, &words, &mut x);
                for (k, pair) in x.windows(2).enumerate() {
                    assert!(pair[0] <= pair[1], "PhiInv decreases at {:#x}", words[k]);
                }
                assert!(x.iter().all(|v| v.is_finite() && *v != 0.0));
                (x[0], x[x.len() - 1])
            })
            .collect();
        for pair in ends.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "PhiInv decreases between chunks");
        }
    }
}
