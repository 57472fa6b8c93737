//! Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
//! 1, 2, 3", SC'11) and the stream-v1 word stream built on it.
//!
//! Units used throughout this module:
//! * a **word** is one `u32` of output; words are numbered from 0 by a `u64` *word
//!   position* `j`;
//! * a **block** is one call of the Philox block function: four words. Word `j` is
//!   output word `j & 3` of block `j >> 2`;
//! * block `b` uses the 128-bit counter `(b as u32, (b >> 32) as u32, 0, 0)`, so the
//!   carry from the low into the high counter word happens every 2^32 blocks
//!   (2^34 words).

/// Philox round multiplier for counter words 0 and 1.
const PHILOX_M0: u32 = 0xD251_1F53;
/// Philox round multiplier for counter words 2 and 3.
const PHILOX_M1: u32 = 0xCD9E_8D57;
/// Weyl increment of key word 0 (golden ratio).
const PHILOX_W0: u32 = 0x9E37_79B9;
/// Weyl increment of key word 1 (sqrt(3) - 1).
const PHILOX_W1: u32 = 0xBB67_AE85;
/// Number of rounds: the "-10" in Philox4x32-10.
const PHILOX_ROUNDS: usize = 10;

/// Full 32x32 -> 64 bit product split into (high, low) words.
#[inline(always)]
fn mul_hi_lo(a: u32, b: u32) -> (u32, u32) {
    let product = u64::from(a) * u64::from(b);
    ((product >> 32) as u32, product as u32)
}

/// The Philox4x32-10 block function: one 128-bit counter and a 64-bit key to four
/// output words. This is the scalar reference; every batched path must agree with it.
///
/// ```
/// // Random123 known-answer vector (kat_vectors, philox4x32_10, all zeros).
/// let out = shardinit_core::philox::philox4x32_10([0; 4], [0; 2]);
/// assert_eq!(out, [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
/// ```
#[inline(always)]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for round in 0..PHILOX_ROUNDS {
        if round > 0 {
            k0 = k0.wrapping_add(PHILOX_W0);
            k1 = k1.wrapping_add(PHILOX_W1);
        }
        let (hi0, lo0) = mul_hi_lo(PHILOX_M0, c0);
        let (hi1, lo1) = mul_hi_lo(PHILOX_M1, c2);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
    }
    [c0, c1, c2, c3]
}

/// Number of blocks computed together by [`Backend::blocks`]; chosen so the
/// lane loops below map onto 8 x 32-bit SIMD registers (AVX2) or two NEON registers.
pub const BATCH_BLOCKS: usize = 8;

/// Philox over [`BATCH_BLOCKS`] consecutive blocks starting at `first_block`, written as
/// lane-parallel loops so the compiler can vectorize them. Output is in stream order:
/// `out[4 * i + w]` is word `w` of block `first_block + i`. Bit-identical to calling
/// [`philox4x32_10`] per block (tested).
#[inline(always)]
pub(crate) fn philox_batch(first_block: u64, key: [u32; 2], out: &mut [u32; 4 * BATCH_BLOCKS]) {
    let mut c0 = [0u32; BATCH_BLOCKS];
    let mut c1 = [0u32; BATCH_BLOCKS];
    let mut c2 = [0u32; BATCH_BLOCKS];
    let mut c3 = [0u32; BATCH_BLOCKS];
    for lane in 0..BATCH_BLOCKS {
        let block = first_block.wrapping_add(lane as u64);
        c0[lane] = block as u32;
        c1[lane] = (block >> 32) as u32;
    }
    let [mut k0, mut k1] = key;
    for round in 0..PHILOX_ROUNDS {
        if round > 0 {
            k0 = k0.wrapping_add(PHILOX_W0);
            k1 = k1.wrapping_add(PHILOX_W1);
        }
        for lane in 0..BATCH_BLOCKS {
            let p0 = u64::from(PHILOX_M0) * u64::from(c0[lane]);
            let p1 = u64::from(PHILOX_M1) * u64::from(c2[lane]);
            let n0 = ((p1 >> 32) as u32) ^ c1[lane] ^ k0;
            let n1 = p1 as u32;
            let n2 = ((p0 >> 32) as u32) ^ c3[lane] ^ k1;
            let n3 = p0 as u32;
            c0[lane] = n0;
            c1[lane] = n1;
            c2[lane] = n2;
            c3[lane] = n3;
        }
    }
    for lane in 0..BATCH_BLOCKS {
        out[4 * lane] = c0[lane];
        out[4 * lane + 1] = c1[lane];
        out[4 * lane + 2] = c2[lane];
        out[4 * lane + 3] = c3[lane];
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::{BATCH_BLOCKS, PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1};
    use core::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_blend_epi32, _mm256_cmpgt_epi32, _mm256_mul_epu32,
        _mm256_permute2x128_si256, _mm256_set1_epi32, _mm256_setr_epi32, _mm256_setzero_si256,
        _mm256_slli_epi64, _mm256_srli_epi64, _mm256_storeu_si256, _mm256_sub_epi32,
        _mm256_unpackhi_epi32, _mm256_unpackhi_epi64, _mm256_unpacklo_epi32, _mm256_unpacklo_epi64,
        _mm256_xor_si256,
    };

    /// `(high, low)` 32-bit halves of the eight 32x32-bit products `a[lane] * m`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    // An `unsafe fn` with its intrinsics in an `unsafe` block because the workspace's
    // rust-version (1.85) allows `#[target_feature]` only on unsafe fns (safe ones since
    // 1.86) and treats these intrinsics as unsafe fns even here (safe inside an AVX2
    // function since 1.87, where the block is unused).
    #[allow(unused_unsafe)]
    unsafe fn mul_hi_lo_x8(a: __m256i, m: __m256i) -> (__m256i, __m256i) {
        // SAFETY: these intrinsics only need AVX2, which the caller guarantees.
        unsafe {
            // vpmuludq multiplies the even 32-bit lanes into 64-bit products; the odd
            // lanes are shifted down and multiplied separately, then the halves are
            // blended back.
            let even = _mm256_mul_epu32(a, m);
            let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), m);
            let lo = _mm256_blend_epi32::<0b1010_1010>(even, _mm256_slli_epi64::<32>(odd));
            let hi = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
            (hi, lo)
        }
    }

    /// Philox over `8 * S` consecutive blocks with explicit AVX2 instructions (one
    /// block per 32-bit lane, `S` independent sets of registers whose rounds
    /// interleave), transposed to stream order: `out[4 * i + w]` is word `w` of block
    /// `first_block + i`. Bit-identical to `philox_batch` (tested).
    ///
    /// # Panics
    /// If `out.len() != 32 * S`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn philox_avx2<const S: usize>(
        first_block: u64,
        key: [u32; 2],
        out: &mut [u32],
    ) {
        // One block for the whole body: before Rust 1.87 every intrinsic here is an unsafe
        // fn, and the stores are unsafe on any version, so the block is always needed.
        // SAFETY: the arithmetic intrinsics and `mul_hi_lo_x8` only need AVX2, which the
        // caller guarantees; the stores write inside `out` (bounds at each store), and
        // `storeu` has no alignment requirement.
        unsafe {
            assert_eq!(out.len(), 4 * BATCH_BLOCKS * S, "words for {S} batches");
            let flip = _mm256_set1_epi32(i32::MIN);
            let lane_offsets = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let mut c0 = [_mm256_setzero_si256(); S];
            let mut c1 = [_mm256_setzero_si256(); S];
            let mut c2 = [_mm256_setzero_si256(); S];
            let mut c3 = [_mm256_setzero_si256(); S];
            for set in 0..S {
                let first = first_block.wrapping_add((set * BATCH_BLOCKS) as u64);
                let base = _mm256_set1_epi32(first as u32 as i32);
                c0[set] = _mm256_add_epi32(base, lane_offsets);
                // A lane whose low counter word wrapped past 2^32 carries into the high
                // word: unsigned `c0 < base`, as a signed compare after flipping sign bits.
                let wrapped = _mm256_cmpgt_epi32(
                    _mm256_xor_si256(base, flip),
                    _mm256_xor_si256(c0[set], flip),
                );
                // `wrapped` is -1 where the carry happened: subtracting it adds 1 (mod 2^32).
                c1[set] = _mm256_sub_epi32(_mm256_set1_epi32((first >> 32) as u32 as i32), wrapped);
            }
            let m0 = _mm256_set1_epi32(PHILOX_M0 as i32);
            let m1 = _mm256_set1_epi32(PHILOX_M1 as i32);
            let [mut k0, mut k1] = key;
            for round in 0..PHILOX_ROUNDS {
                if round > 0 {
                    k0 = k0.wrapping_add(PHILOX_W0);
                    k1 = k1.wrapping_add(PHILOX_W1);
                }
                let key0 = _mm256_set1_epi32(k0 as i32);
                let key1 = _mm256_set1_epi32(k1 as i32);
                for set in 0..S {
                    let (hi0, lo0) = mul_hi_lo_x8(c0[set], m0);
                    let (hi1, lo1) = mul_hi_lo_x8(c2[set], m1);
                    let n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[set]), key0);
                    let n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[set]), key1);
                    (c0[set], c1[set], c2[set], c3[set]) = (n0, lo1, n2, lo0);
                }
            }
            for set in 0..S {
                // 4 x 8 transpose: register w holds word w of blocks 0..7; stream order
                // wants the four words of block 0, then of block 1, ...
                let t0 = _mm256_unpacklo_epi32(c0[set], c1[set]); // a0 b0 a1 b1 | a4 b4 a5 b5
                let t1 = _mm256_unpackhi_epi32(c0[set], c1[set]); // a2 b2 a3 b3 | a6 b6 a7 b7
                let t2 = _mm256_unpacklo_epi32(c2[set], c3[set]); // c0 d0 c1 d1 | c4 d4 c5 d5
                let t3 = _mm256_unpackhi_epi32(c2[set], c3[set]); // c2 d2 c3 d3 | c6 d6 c7 d7
                let u0 = _mm256_unpacklo_epi64(t0, t2); // block 0 | block 4
                let u1 = _mm256_unpackhi_epi64(t0, t2); // block 1 | block 5
                let u2 = _mm256_unpacklo_epi64(t1, t3); // block 2 | block 6
                let u3 = _mm256_unpackhi_epi64(t1, t3); // block 3 | block 7
                let rows = [
                    _mm256_permute2x128_si256::<0x20>(u0, u1),
                    _mm256_permute2x128_si256::<0x20>(u2, u3),
                    _mm256_permute2x128_si256::<0x31>(u0, u1),
                    _mm256_permute2x128_si256::<0x31>(u2, u3),
                ];
                let words = &mut out[32 * set..32 * set + 32];
                for (i, row) in rows.into_iter().enumerate() {
                    // In bounds: `words` holds 32 words; row `i` covers words 8i .. 8i + 8.
                    _mm256_storeu_si256(words.as_mut_ptr().add(8 * i).cast::<__m256i>(), row);
                }
            }
        }
    }

    /// The portable lane code of `philox_batch`, compiled for AVX-512F: the word output
    /// of [`Backend::Avx2PhiloxAvx512Lanes`] (its fill kernels use the AVX2 Philox).
    ///
    /// # Safety
    /// The CPU must support AVX-512F (checked by the caller).
    #[cfg(shardinit_avx512)] // Rust >= 1.89: see build.rs
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn philox_batch_avx512(
        first_block: u64,
        key: [u32; 2],
        out: &mut [u32; 4 * BATCH_BLOCKS],
    ) {
        super::philox_batch(first_block, key, out);
    }
}

/// Which implementation of the batched block function (and of the fill kernels built
/// on it) runs. All give the same bits; only speed differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The scalar reference: one block and one element at a time, straight from the
    /// definitions ([`philox4x32_10`], [`crate::Sampler::one_word`]). Slow; every other
    /// backend is tested against it.
    Scalar,
    /// Portable lane code (auto-vectorized for the baseline target features).
    Portable,
    /// x86-64 AVX2, selected at run time.
    Avx2,
    /// x86-64 with AVX-512F, selected at run time: **the AVX2 Philox** of
    /// [`Backend::Avx2`] (there is no AVX-512 Philox: its 32x32 -> 64-bit products gain
    /// nothing from wider vectors here), with the transform and rounding lane code
    /// compiled for AVX-512F (512-bit vectors). Its word output ([`Backend::blocks`]) is
    /// the portable lane Philox compiled for AVX-512F.
    ///
    /// Built only by Rust 1.89 or newer (the first with a stable `avx512f` target
    /// feature; see build.rs): builds by older compilers report it unavailable, and
    /// [`Backend::detect`] picks [`Backend::Avx2`].
    Avx2PhiloxAvx512Lanes,
}

impl Backend {
    /// A short name: `"scalar"`, `"portable"`, `"avx2"` or
    /// `"avx2-philox-avx512-lanes"` (what the Python module reports as `backend`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Portable => "portable",
            Backend::Avx2 => "avx2",
            Backend::Avx2PhiloxAvx512Lanes => "avx2-philox-avx512-lanes",
        }
    }

    /// The fastest backend this CPU supports (detected once, then cached).
    #[inline]
    pub fn detect() -> Backend {
        static DETECTED: std::sync::OnceLock<Backend> = std::sync::OnceLock::new();
        *DETECTED.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                #[cfg(shardinit_avx512)]
                if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx2")
                {
                    return Backend::Avx2PhiloxAvx512Lanes;
                }
                if std::is_x86_feature_detected!("avx2") {
                    return Backend::Avx2;
                }
            }
            Backend::Portable
        })
    }

    /// Every backend this CPU can run, the scalar reference first (for tests and
    /// benchmarks that force a path).
    pub fn available() -> Vec<Backend> {
        [
            Backend::Scalar,
            Backend::Portable,
            Backend::Avx2,
            Backend::Avx2PhiloxAvx512Lanes,
        ]
        .into_iter()
        .filter(|backend| backend.is_available())
        .collect()
    }

    /// Whether this CPU, and this build, can run `self` (a cached feature check, cheap).
    #[inline]
    pub fn is_available(self) -> bool {
        match self {
            Backend::Scalar | Backend::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
            Backend::Avx2PhiloxAvx512Lanes => {
                std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx2")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Backend::Avx2 => false,
            #[cfg(not(all(target_arch = "x86_64", shardinit_avx512)))]
            Backend::Avx2PhiloxAvx512Lanes => false,
        }
    }

    /// Computes [`BATCH_BLOCKS`] blocks starting at `first_block` with this backend.
    ///
    /// # Panics
    /// If this CPU or build cannot run `self` (see [`Backend::is_available`]).
    #[inline]
    pub fn blocks(self, first_block: u64, key: [u32; 2], out: &mut [u32; 4 * BATCH_BLOCKS]) {
        match self {
            Backend::Scalar => {
                for (lane, words) in out.chunks_exact_mut(4).enumerate() {
                    let block = first_block.wrapping_add(lane as u64);
                    words.copy_from_slice(&philox4x32_10(
                        [block as u32, (block >> 32) as u32, 0, 0],
                        key,
                    ));
                }
            }
            Backend::Portable => philox_batch(first_block, key, out),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => {
                assert!(std::is_x86_feature_detected!("avx2"), "no AVX2 on this CPU");
                // SAFETY: AVX2 support was just checked.
                unsafe { x86::philox_avx2::<1>(first_block, key, out) }
            }
            #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
            Backend::Avx2PhiloxAvx512Lanes => {
                assert!(
                    std::is_x86_feature_detected!("avx512f"),
                    "no AVX-512F on this CPU"
                );
                // SAFETY: AVX-512F support was just checked.
                unsafe { x86::philox_batch_avx512(first_block, key, out) }
            }
            #[cfg(not(target_arch = "x86_64"))]
            Backend::Avx2 => panic!("{self:?} needs an x86-64 CPU"),
            #[cfg(not(all(target_arch = "x86_64", shardinit_avx512)))]
            Backend::Avx2PhiloxAvx512Lanes => {
                panic!("{self:?} needs an x86-64 CPU and a build by Rust 1.89+")
            }
        }
    }
}

/// The stream-v1 word stream of one key: an infinite sequence of `u32` words addressed
/// by a `u64` word position (see the module docs for the units).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    key: [u32; 2],
}

impl Stream {
    /// The stream of `key64` (stream-format.md §1): key words `k0 = key64 & 0xFFFFFFFF`,
    /// `k1 = key64 >> 32`.
    pub fn new(key64: u64) -> Stream {
        Stream {
            key: [key64 as u32, (key64 >> 32) as u32],
        }
    }

    /// The two 32-bit Philox key words.
    pub fn key_words(&self) -> [u32; 2] {
        self.key
    }

    /// Block `block` (a block index, four words) of the stream.
    #[inline]
    pub fn block(&self, block: u64) -> [u32; 4] {
        philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], self.key)
    }

    /// Word at word position `word_pos` (a word index, not a byte or block index).
    pub fn word(&self, word_pos: u64) -> u32 {
        self.block(word_pos >> 2)[(word_pos & 3) as usize]
    }

    /// Fills `out` with the words at word positions `start_word .. start_word +
    /// out.len()`. Positions wrap modulo 2^64 (the stream is periodic with period 2^66
    /// words in principle, but v1 only addresses the first 2^64).
    pub fn fill_words(&self, start_word: u64, out: &mut [u32]) {
        let backend = Backend::detect();
        let mut pos = start_word;
        let mut written = 0usize;
        let mut batch = [0u32; 4 * BATCH_BLOCKS];
        while written < out.len() {
            let first_block = pos >> 2;
            let skip = (pos & 3) as usize;
            backend.blocks(first_block, self.key, &mut batch);
            let take = (batch.len() - skip).min(out.len() - written);
            out[written..written + take].copy_from_slice(&batch[skip..skip + take]);
            written += take;
            pos = pos.wrapping_add(take as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Known-answer vectors from Random123 (kat_vectors: "philox4x32 10"), as quoted in
    // stream-format.md §2: counter words c0..c3, key words k0 k1 -> output words.
    const RANDOM123_KAT: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        (
            [0, 0, 0, 0],
            [0, 0],
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
        ),
        (
            [0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff],
            [0xffffffff, 0xffffffff],
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
        ),
        (
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0],
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
        ),
    ];

    #[test]
    fn random123_known_answers() {
        for (counter, key, expected) in RANDOM123_KAT {
            assert_eq!(
                philox4x32_10(counter, key),
                expected,
                "counter {counter:x?}"
            );
        }
    }

    #[test]
    fn spec_golden_words_key_w_seed_0() {
        // stream-format.md §6: words 0..7 of key64(0, "w") = 0x47a94443d83ccf19.
        let stream = Stream::new(0x47a9_4443_d83c_cf19);
        let mut words = [0u32; 8];
        stream.fill_words(0, &mut words);
        assert_eq!(
            words,
            [
                0x2bc9fb9e, 0xfacb47fe, 0x3673388e, 0xb56d6438, 0x1330000a, 0x2d5a56bb, 0xaf195d98,
                0xad0fe342
            ]
        );
    }

    #[test]
    fn spec_golden_words_cross_the_high_counter_carry() {
        // stream-format.md §6: words 2^34-2 .. 2^34+1 of key64(2^64-1, "layers.0.attention.wq.weight").
        let stream = Stream::new(0x6b59_ead9_09d7_045b);
        let mut words = [0u32; 4];
        stream.fill_words((1u64 << 34) - 2, &mut words);
        assert_eq!(words, [0x30594d3f, 0xcdcb0eab, 0x508c2186, 0x1973be7f]);
        // Block 2^32 uses counter (0, 1, 0, 0): the carry went into c1.
        assert_eq!(
            stream.block(1 << 32),
            philox4x32_10([0, 1, 0, 0], stream.key_words())
        );
        assert_eq!(stream.word((1u64 << 34) + 1), 0x1973be7f);
    }

    #[test]
    fn backend_names_say_what_runs() {
        let all = [
            Backend::Scalar,
            Backend::Portable,
            Backend::Avx2,
            Backend::Avx2PhiloxAvx512Lanes,
        ];
        let names: Vec<_> = all.iter().map(|backend| backend.name()).collect();
        assert_eq!(
            names,
            ["scalar", "portable", "avx2", "avx2-philox-avx512-lanes"]
        );
        // `available` lists only these, the scalar reference first, and `detect` picks
        // one of them.
        let available = Backend::available();
        assert_eq!(available[0], Backend::Scalar);
        assert!(available.iter().all(|backend| all.contains(backend)));
        assert!(available.contains(&Backend::detect()));
    }

    #[test]
    fn every_backend_matches_the_scalar_reference() {
        let key = [0x1234_5678, 0x9abc_def0];
        for backend in Backend::available() {
            for first_block in [0u64, 1, 7, (1 << 32) - 3, u64::MAX - 3] {
                let mut batch = [0u32; 4 * BATCH_BLOCKS];
                backend.blocks(first_block, key, &mut batch);
                for lane in 0..BATCH_BLOCKS {
                    let block = first_block.wrapping_add(lane as u64);
                    let expected = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], key);
                    assert_eq!(
                        &batch[4 * lane..4 * lane + 4],
                        &expected,
                        "{backend:?} {block}"
                    );
                }
            }
        }
    }

    #[test]
    fn fill_words_slices_agree_with_a_longer_fill() {
        let stream = Stream::new(42);
        let mut long = vec![0u32; 200];
        stream.fill_words(5, &mut long);
        for start in [5u64, 6, 7, 8, 9, 36, 37, 100] {
            for len in [0usize, 1, 3, 4, 5, 31, 33, 64] {
                let offset = (start - 5) as usize;
                if offset + len > long.len() {
                    continue;
                }
                let mut part = vec![0u32; len];
                stream.fill_words(start, &mut part);
                assert_eq!(part, long[offset..offset + len], "start {start} len {len}");
                if len > 0 {
                    assert_eq!(stream.word(start), part[0]);
                }
            }
        }
    }
}
