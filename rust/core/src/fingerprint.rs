//! The per-element hash of shardinit's tensor fingerprints (format "fp1", defined in
//! `python/shardinit/_integration/fingerprint.py`), for the hot path where a writer
//! hashes every byte it writes (seed checkpoints).
//!
//! The fingerprint of a tensor is the sum, mod 2^64, over its elements of
//! `H(i, b) = mix64((i * GOLDEN + SALT) xor b)`, where `i` is the element's global flat
//! index, `b` its raw bit pattern (unsigned) and `mix64` the SplitMix64 finalizer.
//! Addition commutes, so a range's term can be computed anywhere and added to the
//! others'; this module computes the term of one contiguous flat range.

/// The index multiplier (the golden ratio's 64-bit fraction).
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// The index salt (`"SHARDINI"` in ASCII).
pub const SALT: u64 = 0x5348_4152_4449_4E49;
const MIX1: u64 = 0xBF58_476D_1CE4_E5B9;
const MIX2: u64 = 0x94D0_49BB_1331_11EB;

/// The SplitMix64 finalizer, a bijection of 64-bit words.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z ^= z >> 30;
    z = z.wrapping_mul(MIX1);
    z ^= z >> 27;
    z = z.wrapping_mul(MIX2);
    z ^ (z >> 31)
}

/// `H(index, bits)`: for a fixed index a bijection of `bits`, so changing one element
/// always changes the sum.
#[inline(always)]
pub fn element_hash(index: u64, bits: u64) -> u64 {
    mix64(index.wrapping_mul(GOLDEN).wrapping_add(SALT) ^ bits)
}

/// The fingerprint term of the elements whose raw bit patterns are `bits` (unsigned
/// integers of the element's width: `u16` for bfloat16 and float16), at flat indices
/// `start, start + 1, ...` of their tensor: the sum of [`element_hash`] mod 2^64.
///
/// ```
/// use shardinit_core::fingerprint::{element_hash, flat_range_term};
///
/// let bits: [u16; 3] = [0x3f80, 0, 0xbf80];
/// let split = flat_range_term(&bits[..1], 7).wrapping_add(flat_range_term(&bits[1..], 8));
/// assert_eq!(flat_range_term(&bits, 7), split);
/// assert_eq!(flat_range_term(&bits[2..], 9), element_hash(9, 0xbf80));
/// ```
pub fn flat_range_term<T: Copy + Into<u64>>(bits: &[T], start: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 support was just detected.
        return unsafe { x86::avx2_term(bits, start) };
    }
    lanes_term(bits, start)
}

/// Independent sums of [`lanes_term`]: enough that the compiler keeps whole vectors of
/// them busy (measured on AVX2: 32 lanes hash a bfloat16 at ~0.65 ns, the 4 scalar
/// sums this replaced at ~1.2 ns).
const LANES: usize = 32;

/// [`flat_range_term`] in [`LANES`] lanes: lane `l` sums elements `l, l + LANES, ...`,
/// its key `index * GOLDEN + SALT` advanced by `LANES * GOLDEN` per step (mod 2^64:
/// the same key the multiplication gives), so each step is one [`mix64`] a lane,
/// which vectorizes. Integer arithmetic mod 2^64: the same sum in any order.
#[inline(always)]
fn lanes_term<T: Copy + Into<u64>>(bits: &[T], start: u64) -> u64 {
    let mut sums = [0u64; LANES];
    let mut keys = [0u64; LANES];
    for (lane, key) in keys.iter_mut().enumerate() {
        *key = start
            .wrapping_add(lane as u64)
            .wrapping_mul(GOLDEN)
            .wrapping_add(SALT);
    }
    let step = (LANES as u64).wrapping_mul(GOLDEN);
    let mut blocks = bits.chunks_exact(LANES);
    for block in &mut blocks {
        for lane in 0..LANES {
            sums[lane] = sums[lane].wrapping_add(mix64(keys[lane] ^ block[lane].into()));
            keys[lane] = keys[lane].wrapping_add(step);
        }
    }
    let done = (bits.len() - blocks.remainder().len()) as u64;
    let mut total = sums
        .iter()
        .fold(0u64, |total, &sum| total.wrapping_add(sum));
    for (offset, &value) in blocks.remainder().iter().enumerate() {
        let index = start.wrapping_add(done).wrapping_add(offset as u64);
        total = total.wrapping_add(element_hash(index, value.into()));
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// [`super::lanes_term`] compiled for AVX2 (64-bit lanes, four to a vector).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2_term<T: Copy + Into<u64>>(bits: &[T], start: u64) -> u64 {
        super::lanes_term(bits, start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash written out as the Python module defines it (numpy's wrapping uint64
    /// operations), one element at a time.
    fn reference(index: u64, bits: u64) -> u64 {
        let mut z = (index.wrapping_mul(GOLDEN).wrapping_add(SALT)) ^ bits;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }

    #[test]
    fn known_answers_of_the_python_definition() {
        // Computed with python/shardinit/_integration/fingerprint.py's numpy code:
        // _element_hash_(np.array([i], np.uint64), np.array([b], np.uint64)).
        assert_eq!(element_hash(0, 0), 0xB1CD_ACDD_2367_48CC);
        assert_eq!(element_hash(1, 0x3f80), 0x6D19_EC76_7EB7_4678);
        assert_eq!(element_hash(u64::MAX, u64::MAX), 0x4966_3FBC_7AE3_8E88);
    }

    #[test]
    fn the_term_is_the_wrapping_sum_over_every_width_and_split() {
        let words: Vec<u64> = (0..1031u64)
            .map(|i| mix64(i ^ 0x1234_5678).wrapping_mul(3))
            .collect();
        let start = u64::MAX - 500; // the index wraps mid-range, as numpy's would
        let expected = |width: u32| {
            words.iter().enumerate().fold(0u64, |sum, (i, &w)| {
                let bits = if width == 64 {
                    w
                } else {
                    w & ((1u64 << width) - 1)
                };
                sum.wrapping_add(reference(start.wrapping_add(i as u64), bits))
            })
        };
        let u8s: Vec<u8> = words.iter().map(|&w| w as u8).collect();
        let u16s: Vec<u16> = words.iter().map(|&w| w as u16).collect();
        let u32s: Vec<u32> = words.iter().map(|&w| w as u32).collect();
        assert_eq!(flat_range_term(&u8s, start), expected(8));
        assert_eq!(flat_range_term(&u16s, start), expected(16));
        assert_eq!(flat_range_term(&u32s, start), expected(32));
        assert_eq!(flat_range_term(&words, start), expected(64));
        // The portable lanes too (flat_range_term takes the AVX2 build where it can).
        assert_eq!(lanes_term(&u16s, start), expected(16));
        assert_eq!(lanes_term(&words, start), expected(64));
        for cut in [0, 1, 3, 4, 5, 31, 32, 33, 517, 1030, 1031] {
            let (head, tail) = u16s.split_at(cut);
            let split = flat_range_term(head, start)
                .wrapping_add(flat_range_term(tail, start.wrapping_add(cut as u64)));
            assert_eq!(split, expected(16), "cut at {cut}");
            let split = lanes_term(head, start)
                .wrapping_add(lanes_term(tail, start.wrapping_add(cut as u64)));
            assert_eq!(split, expected(16), "portable, cut at {cut}");
        }
        assert_eq!(flat_range_term::<u16>(&[], 5), 0);
    }
}
