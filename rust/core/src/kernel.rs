//! The batched fill kernels: Philox words, the transform to values and the rounding to
//! the target dtype, fused per step of [`BIG_STEP`] words (64 blocks; [`SMALL_STEP`]
//! words at the ends of a range) whose intermediates never leave the L1 cache.
//!
//! Every transform is written as loops over fixed-size lane arrays, so the compiler
//! turns them into SIMD instructions; each lane performs exactly the operations of the
//! scalar reference ([`Sampler::one_word`], [`Sampler::two_words`],
//! [`Element::from_f64`]) in the same order. Rust never contracts `a * b + c` into a
//! fused multiply-add and never reassociates floating-point arithmetic, and the vector
//! `+ - * / sqrt` are the same correctly rounded IEEE-754 operations as the scalar ones,
//! so vectorizing cannot change a bit (tested: every backend equals [`Backend::Scalar`]).
//!
//! The inverse normal CDF is the one transform with branches (AS 241's central region
//! and two tails). All lanes first run the branch-free central approximation; the
//! lanes outside it (about 15% for U32) are then compacted and run through the tail
//! formula, again in lanes ([`math::phi_inv_tail_slice`]), with the rare lanes that
//! formula does not cover handed to the scalar [`math::phi_inv_tail`].
//!
//! A fill may instead look its one-word values up in a value table ([`WordTable`],
//! [`crate::table`]: bfloat16 and float16 normals): [`table_steps`] takes the same
//! Philox steps, and the words the table does not hold go through these exact lanes in
//! batches.

use crate::init::{Element, Sampler, TruncNormal};
use crate::math;
use crate::philox::{philox_batch, Backend, BATCH_BLOCKS};

/// Stream words per full kernel step (64 blocks): 256 one-word or 128 float64
/// elements. Large enough that the compacted tail lanes of the inverse normal CDF
/// (about 15%) fill whole vector groups.
const BIG_STEP: usize = 256;
/// Stream words per step at the ends of a range (16 blocks), so that short runs of a
/// box do not pay for a full step.
const SMALL_STEP: usize = 64;
/// Words of one Philox batch.
const BATCH_WORDS: usize = 4 * BATCH_BLOCKS;

/// 2^-24: the U24 map's scale.
const TWO_POW_M24: f64 = 1.0 / 16_777_216.0;
/// 2^-53.
const TWO_POW_M53: f64 = 1.0 / 9_007_199_254_740_992.0;

/// A source of consecutive stream words.
trait WordSource: Copy {
    /// Words `4 * first_block .. 4 * first_block + out.len()` of the stream of `key`,
    /// in stream order; `out.len()` is a multiple of a batch (32 words).
    fn step(self, first_block: u64, key: [u32; 2], out: &mut [u32]);
}

/// The portable lane code.
#[derive(Clone, Copy)]
struct PortableWords;

impl WordSource for PortableWords {
    #[inline(always)]
    fn step(self, first_block: u64, key: [u32; 2], out: &mut [u32]) {
        for (batch, words) in out.chunks_exact_mut(BATCH_WORDS).enumerate() {
            let first = first_block.wrapping_add((batch * BATCH_BLOCKS) as u64);
            philox_batch(first, key, words.try_into().expect("a batch of words"));
        }
    }
}

/// AVX2 intrinsics. Only constructed after AVX2 was detected on this CPU.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx2Words(());

#[cfg(target_arch = "x86_64")]
impl WordSource for Avx2Words {
    #[inline(always)]
    fn step(self, first_block: u64, key: [u32; 2], out: &mut [u32]) {
        // Two batches at a time: their rounds interleave (more independent work).
        const PAIR: usize = 2 * BATCH_WORDS;
        for (pair, words) in out.chunks_exact_mut(PAIR).enumerate() {
            let first = first_block.wrapping_add((pair * 2 * BATCH_BLOCKS) as u64);
            // SAFETY: an `Avx2Words` exists only once AVX2 support has been detected
            // (see `fill_lanes`).
            unsafe { crate::philox::x86::philox_avx2::<2>(first, key, words) };
        }
    }
}

/// `U24(w)` as the lanes compute it: `w >> 8` fits an `i32`, whose conversion to f64
/// vectorizes (the unsigned one does not on AVX2); the value is the same, exactly.
#[inline(always)]
fn u24_lane(word: u32) -> f64 {
    f64::from((word >> 8) as i32) * TWO_POW_M24
}

/// `U32(w) = (w + 0.5) * 2^-32` as the lanes compute it: the bit pattern of
/// `1 + (2w + 1) * 2^-33` minus 1. Both steps are exact, so this is the same value as
/// [`crate::init::u32_open`], without an unsigned integer conversion.
#[inline(always)]
fn u32_open_lane(word: u32) -> f64 {
    f64::from_bits(0x3ff0_0000_0000_0000 | (u64::from(word) << 20) | (1 << 19)) - 1.0
}

/// `U52(w0, w1) = (2m + 1) * 2^-53` as the lanes compute it: `(1 + m * 2^-52) - 1`
/// is exactly `m * 2^-52`, and adding `2^-53` is exact because the sum `(2m + 1) *
/// 2^-53 < 1` has at most 53 significant bits. The same value as
/// [`crate::init::u52_open`], without a 64-bit integer conversion.
#[inline(always)]
fn u52_open_lane(word0: u32, word1: u32) -> f64 {
    let m = (u64::from(word0 >> 6) << 26) | u64::from(word1 >> 6);
    (f64::from_bits(0x3ff0_0000_0000_0000 | m) - 1.0) + TWO_POW_M53
}

/// The words whose `U32` lies in [`math::phi_inv_central`]'s region, `|U32(w) - 0.5| <=
/// 0.425`, are `U32_CENTRAL_FIRST ..= U32_CENTRAL_LAST` (`U32` is increasing and
/// `U32(w) - 0.5` is exact; tested at both edges).
const U32_CENTRAL_FIRST: u32 = 0x1333_3333;
/// See [`U32_CENTRAL_FIRST`].
const U32_CENTRAL_LAST: u32 = 0xeccc_cccc;
/// `w` is outside the central region exactly when `w - U32_CENTRAL_FIRST` (mod 2^32)
/// exceeds this: one unsigned compare.
const U32_CENTRAL_FIRST_TO_LAST: u32 = U32_CENTRAL_LAST - U32_CENTRAL_FIRST;

/// `PhiInv(p[i])` into `x[i]` (with `q = 1 - p[i]`), exactly as [`math::phi_inv`].
#[inline(always)]
fn phi_inv_lanes<const N: usize>(p: &[f64; N], x: &mut [f64; N]) {
    for i in 0..N {
        x[i] = math::phi_inv_central(p[i]);
    }
    // Compact the tail lanes (|p - 0.5| > 0.425, or NaN: phi_inv's NaN check is
    // subsumed, since the central formula of a NaN is NaN) through a bit mask, which
    // the compiler builds with vector compares.
    let mut is_tail = [false; N];
    for i in 0..N {
        is_tail[i] = (p[i] - 0.5).abs() > math::PHI_INV_SPLIT1;
    }
    let mut tail_index = [0u16; N];
    let mut tail_p = [0f64; N];
    let mut count = 0;
    let mut gather = |chunk: usize, mut mask: u64| {
        while mask != 0 {
            let i = 64 * chunk + mask.trailing_zeros() as usize;
            tail_index[count] = i as u16;
            tail_p[count] = p[i];
            count += 1;
            mask &= mask - 1;
        }
    };
    for (chunk, flags) in is_tail.chunks(64).enumerate() {
        gather(chunk, bit_mask(flags));
    }
    if count == 0 {
        return;
    }
    let mut tail_x = [0f64; N];
    math::phi_inv_tail_slice(&tail_p[..count], &mut tail_x);
    for k in 0..count {
        x[usize::from(tail_index[k])] = tail_x[k];
    }
}

/// Bit `i` set where `flags[i]` (a multiple of 8 flags, at most 64): eight flags at a
/// time, gathered by one multiplication (bytes `b_0 .. b_7`, each 0 or 1, times
/// `0x0102_0408_1020_4080` put `b_i` at bit `56 + i` without carries; tested on all
/// 256 patterns). Compilers turn a plain shift-or loop into slow vector code here.
#[inline(always)]
fn bit_mask(flags: &[bool]) -> u64 {
    assert!(
        flags.len() % 8 == 0 && flags.len() <= 64,
        "whole bytes of a u64"
    );
    let mut mask = 0u64;
    for (i, eight) in flags.chunks_exact(8).enumerate() {
        let eight: &[bool; 8] = eight.try_into().expect("8 flags");
        let bytes = u64::from_le_bytes(eight.map(u8::from));
        mask |= (bytes.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * i);
    }
    mask
}

/// `Sampler::Normal` over lanes of uniforms `u`.
#[inline(always)]
fn normal_lanes<const N: usize>(mean: f64, std: f64, u: &[f64; N], value: &mut [f64; N]) {
    let mut x = [0f64; N];
    phi_inv_lanes(u, &mut x);
    for i in 0..N {
        value[i] = mean + std * x[i];
    }
}

/// [`TruncNormal::sample`] over lanes of uniforms `u`.
#[inline(always)]
fn trunc_normal_lanes<const N: usize>(t: &TruncNormal, u: &[f64; N], value: &mut [f64; N]) {
    let TruncNormal {
        mean,
        std,
        a,
        b,
        lower_cdf,
        upper_tail,
        mass,
    } = *t;
    let mut p = [0f64; N];
    let mut upper = [false; N];
    for i in 0..N {
        let lower_t = lower_cdf + u[i] * mass;
        let upper_q = upper_tail + (1.0 - u[i]) * mass;
        // Exactly the scalar `if t <= 0.5 { lower } else { upper }`.
        let lower = lower_t <= 0.5;
        upper[i] = !lower;
        p[i] = if upper[i] { upper_q } else { lower_t };
    }
    let mut x = [0f64; N];
    phi_inv_lanes(&p, &mut x);
    for i in 0..N {
        let x = if upper[i] { -x[i] } else { x[i] };
        value[i] = (mean + std * x).max(a).min(b);
    }
}

/// Lanes per group of the uniform pass: values stay in L1 between the map and the
/// rounding, and the 16-bit roundings run on full 64-lane chunks.
const GROUP: usize = 64;

/// Scratch arrays of the one-word kernels, kept for all the steps of one call so that
/// they are not re-zeroed per step (zeroed stack arrays per step cost ~10% of a step).
struct Scratch {
    /// Binary64 values of a step, before the rounding.
    value: [f64; BIG_STEP],
    /// Index in the step of each tail lane of the inverse normal CDF.
    tail_index: [u16; BIG_STEP],
    /// Its uniform `p`.
    tail_p: [f64; BIG_STEP],
    /// Its `PhiInv(p)`.
    tail_x: [f64; BIG_STEP],
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            value: [0.0; BIG_STEP],
            tail_index: [0; BIG_STEP],
            tail_p: [0.0; BIG_STEP],
            tail_x: [0.0; BIG_STEP],
        }
    }
}

/// `Sampler::Uniform` of a one-word dtype, per group of lanes.
#[inline(always)]
fn uniform_one_word<T: Element, const N: usize>(
    a: f64,
    width: f64,
    words: &[u32; N],
    out: &mut [T; N],
) {
    // Finite `a` and `width` and `U24` in [0, 1): no NaN (an infinite width, from
    // `b - a` overflowing, would give inf * 0 = NaN at `U24 = 0`).
    if a.is_finite() && width.is_finite() {
        // `width * U24(w)` is `width * 2^-24` times the integer `w >> 8`: the same real
        // product, so the same rounding, whenever `width * 2^-24` is exact (it is
        // unless it lands below the normal range). One multiplication instead of two.
        let scaled = width * TWO_POW_M24;
        if scaled / TWO_POW_M24 == width {
            uniform_groups(
                a,
                scaled,
                words,
                out,
                |word| f64::from((word >> 8) as i32),
                true,
            );
        } else {
            uniform_groups(a, width, words, out, u24_lane, true);
        }
    } else {
        uniform_groups(a, width, words, out, u24_lane, false);
    }
}

/// `a + scale * map(word)` per group of lanes, rounded to `T` (`not_nan`: the caller
/// knows no value is NaN).
#[inline(always)]
fn uniform_groups<T: Element, const N: usize>(
    a: f64,
    scale: f64,
    words: &[u32; N],
    out: &mut [T; N],
    map: impl Fn(u32) -> f64,
    not_nan: bool,
) {
    const { assert!(N % GROUP == 0, "whole groups") };
    for (words, out) in words.chunks_exact(GROUP).zip(out.chunks_exact_mut(GROUP)) {
        let words: &[u32; GROUP] = words.try_into().expect("a group of words");
        let mut value = [0f64; GROUP];
        for k in 0..GROUP {
            value[k] = a + scale * map(words[k]);
        }
        if not_nan {
            T::from_f64_lanes_not_nan(&value, out);
        } else {
            T::from_f64_lanes(&value, out);
        }
    }
}

/// `Sampler::Normal` of a one-word dtype: [`math::phi_inv`] of `U32`, the affine map
/// and the rounding, exactly as the scalar reference, in passes over the step:
///
/// 1. every lane: `U32`, the branch-free central `PhiInv`, `mean + std * x`;
/// 2. the lanes outside the central region (about 15%) are found with a bit mask,
///    compacted, run through the vectorized tail ([`math::phi_inv_tail_slice`]), and
///    their values replaced;
/// 3. every lane is rounded to `T` and written to `out`.
///
/// `U32` is never NaN, 0 or 1, so [`math::phi_inv`]'s special cases reduce to the
/// central/tail split.
#[inline(always)]
fn normal_one_word<T: Element, const N: usize>(
    mean: f64,
    std: f64,
    words: &[u32; N],
    out: &mut [T; N],
    scratch: &mut Scratch,
) {
    const { assert!(N % 64 == 0 && N <= BIG_STEP, "whole 64-lane mask words") };
    let value: &mut [f64; N] = (&mut scratch.value[..N]).try_into().expect("N values");
    for k in 0..N {
        value[k] = mean + std * math::phi_inv_central(u32_open_lane(words[k]));
    }
    let mut count = 0;
    for (chunk, words) in words.chunks_exact(64).enumerate() {
        let words: &[u32; 64] = words.try_into().expect("64 words");
        let mut is_tail = [false; 64];
        for k in 0..64 {
            is_tail[k] = words[k].wrapping_sub(U32_CENTRAL_FIRST) > U32_CENTRAL_FIRST_TO_LAST;
        }
        let mut mask = bit_mask(&is_tail);
        while mask != 0 {
            let lane = mask.trailing_zeros() as usize;
            scratch.tail_index[count] = (64 * chunk + lane) as u16;
            scratch.tail_p[count] = u32_open_lane(words[lane]);
            count += 1;
            mask &= mask - 1;
        }
    }
    math::phi_inv_tail_slice(&scratch.tail_p[..count], &mut scratch.tail_x[..count]);
    for k in 0..count {
        value[usize::from(scratch.tail_index[k])] = mean + std * scratch.tail_x[k];
    }
    // `U32` is in (0, 1), so `PhiInv` is finite; with finite `mean` and `std` no value
    // is NaN (at worst `std * x` overflows to an infinity).
    if mean.is_finite() && std.is_finite() {
        T::from_f64_lanes_not_nan(value, out);
    } else {
        T::from_f64_lanes(value, out);
    }
}

/// Values of one step of a one-word dtype: element `k` from word `words[k]`.
#[inline(always)]
fn transform_one_word<T: Element, const N: usize>(
    sampler: &Sampler,
    words: &[u32; N],
    out: &mut [T; N],
    scratch: &mut Scratch,
) {
    match *sampler {
        Sampler::Uniform { a, width } => uniform_one_word(a, width, words, out),
        Sampler::Normal { mean, std } => normal_one_word(mean, std, words, out, scratch),
        Sampler::TruncNormal(ref t) => {
            let mut u = [0f64; N];
            for k in 0..N {
                u[k] = u32_open_lane(words[k]);
            }
            let mut value = [0f64; N];
            trunc_normal_lanes(t, &u, &mut value);
            T::from_f64_lanes(&value, out);
        }
        Sampler::Constant { value: c } => out.fill(T::from_f64(c)),
    }
}

/// Values of one step of float64: element `k` from words `words[2k]`, `words[2k + 1]`
/// (`words.len() == 2 * N`).
#[inline(always)]
fn transform_two_word<T: Element, const N: usize>(
    sampler: &Sampler,
    words: &[u32],
    out: &mut [T; N],
) {
    assert_eq!(words.len(), 2 * N, "two words per element");
    let mut u = [0f64; N];
    for k in 0..N {
        u[k] = u52_open_lane(words[2 * k], words[2 * k + 1]);
    }
    let mut value = [0f64; N];
    match *sampler {
        Sampler::Uniform { a, width } => {
            for k in 0..N {
                value[k] = a + width * u[k];
            }
        }
        Sampler::Normal { mean, std } => normal_lanes(mean, std, &u, &mut value),
        Sampler::TruncNormal(ref t) => trunc_normal_lanes(t, &u, &mut value),
        Sampler::Constant { value: c } => value.fill(c),
    }
    T::from_f64_lanes(&value, out);
}

/// One step of a run ([`word_steps`]): `BIG` elements that start a Philox block, or the
/// elements of a small step from its element `skip` on.
enum WordStep<'a, T, const BIG: usize> {
    Big(&'a mut [T; BIG]),
    Small { dest: &'a mut [T], skip: usize },
}

/// What writes each step of a run ([`word_steps`]). A trait and not a closure: its
/// `#[inline(always)]` method is inlined into the target-feature function that runs the
/// walk (`x86::avx2`), so the lane code is compiled for its features. A closure is a
/// function of its own, compiled for the baseline CPU whenever LLVM does not inline it,
/// which it did not for these large bodies: the AVX2 kernels ran SSE2 lane code.
trait StepWriter<T, const BIG: usize> {
    /// Writes `step`, whose first element is in Philox block `block`.
    fn step(&mut self, block: u64, step: WordStep<'_, T, BIG>);
}

/// The one walk of a run, `out` holding elements `[start, start + out.len())`, for a
/// dtype of `PER_BLOCK` elements per Philox block: a big step of `BIG` elements where the
/// run is at a block's start with `BIG` elements left, else a small step of at most
/// `SMALL` (only the first step can start mid-block: after it every step starts one).
/// `writer` is given each step's first block and its elements.
#[inline(always)]
fn word_steps<T, const PER_BLOCK: u64, const BIG: usize, const SMALL: usize>(
    start: u64,
    out: &mut [T],
    writer: &mut impl StepWriter<T, BIG>,
) {
    let mut index = start;
    let mut done = 0;
    while done < out.len() {
        let skip = (index % PER_BLOCK) as usize;
        let remaining = out.len() - done;
        let take = if skip == 0 && remaining >= BIG {
            let dest: &mut [T; BIG] = (&mut out[done..done + BIG])
                .try_into()
                .expect("a full step");
            writer.step(index / PER_BLOCK, WordStep::Big(dest));
            BIG
        } else {
            let take = (SMALL - skip).min(remaining);
            let dest = &mut out[done..done + take];
            writer.step(index / PER_BLOCK, WordStep::Small { dest, skip });
            take
        };
        done += take;
        index += take as u64;
    }
}

/// The steps of a one-word dtype ([`one_word_steps`]), with the arrays every step reuses
/// (written in full before each use).
struct OneWordSteps<'s, W> {
    words_of: W,
    key: [u32; 2],
    sampler: &'s Sampler,
    big_words: [u32; BIG_STEP],
    small_words: [u32; SMALL_STEP],
    scratch: Scratch,
}

impl<T: Element, W: WordSource> StepWriter<T, BIG_STEP> for OneWordSteps<'_, W> {
    #[inline(always)]
    fn step(&mut self, block: u64, step: WordStep<'_, T, BIG_STEP>) {
        match step {
            WordStep::Big(dest) => {
                self.words_of.step(block, self.key, &mut self.big_words);
                transform_one_word(self.sampler, &self.big_words, dest, &mut self.scratch);
            }
            WordStep::Small { dest, skip } => {
                self.words_of.step(block, self.key, &mut self.small_words);
                if let Ok(whole) = <&mut [T; SMALL_STEP]>::try_from(&mut *dest) {
                    transform_one_word(self.sampler, &self.small_words, whole, &mut self.scratch);
                } else {
                    // The first or the last step of a run: all of it into a scratch
                    // array, of which a part is kept.
                    let mut values = [T::from_f64(0.0); SMALL_STEP];
                    transform_one_word(
                        self.sampler,
                        &self.small_words,
                        &mut values,
                        &mut self.scratch,
                    );
                    dest.copy_from_slice(&values[skip..skip + dest.len()]);
                }
            }
        }
    }
}

/// Elements `[start, start + out.len())` of a one-word dtype (element `i` uses word `i`).
#[inline(always)]
fn one_word_steps<T: Element, W: WordSource>(
    words_of: W,
    key: [u32; 2],
    sampler: &Sampler,
    start: u64,
    out: &mut [T],
) {
    let mut steps = OneWordSteps {
        words_of,
        key,
        sampler,
        big_words: [0u32; BIG_STEP],
        small_words: [0u32; SMALL_STEP],
        scratch: Scratch::new(),
    };
    word_steps::<T, 4, BIG_STEP, SMALL_STEP>(start, out, &mut steps);
}

/// Values of one-word elements looked up by their word (a value table:
/// [`crate::table`]), which must equal the exact kernel's.
pub(crate) trait WordTable<T>: Sync {
    /// `out[k]` = the value of `words[k]` where the table holds it; the other `k` (whose
    /// words take the exact path) go to `mixed`, in order; returns their count.
    fn values(&self, words: &[u32], out: &mut [T], mixed: &mut [u16]) -> usize;
    /// The sampler whose values the table holds.
    fn sampler(&self) -> &Sampler;
}

/// The words of a run whose values a table does not hold ([`WordTable::values`]), and
/// their positions in the run's output: computed [`BIG_STEP`] at a time by the exact
/// lane code, so that the rare lanes cost what they cost in the exact kernel.
struct ExactLanes<T> {
    words: [u32; BIG_STEP],
    positions: [usize; BIG_STEP],
    values: [T; BIG_STEP],
    count: usize,
    scratch: Scratch,
}

impl<T: Element> ExactLanes<T> {
    fn new() -> Self {
        ExactLanes {
            words: [0; BIG_STEP],
            positions: [0; BIG_STEP],
            values: [T::from_f64(0.0); BIG_STEP],
            count: 0,
            scratch: Scratch::new(),
        }
    }

    /// Adds the word of `out[position]`; computes the pending lanes into `out` once a
    /// step's worth is pending.
    #[inline(always)]
    fn push(&mut self, sampler: &Sampler, position: usize, word: u32, out: &mut [T]) {
        self.words[self.count] = word;
        self.positions[self.count] = position;
        self.count += 1;
        if self.count == BIG_STEP {
            self.flush(sampler, out);
        }
    }

    /// Computes the pending lanes into `out` (the words after them are left from an
    /// earlier batch: computed, not written).
    #[inline(always)]
    fn flush(&mut self, sampler: &Sampler, out: &mut [T]) {
        if self.count == 0 {
            return;
        }
        transform_one_word(sampler, &self.words, &mut self.values, &mut self.scratch);
        for k in 0..self.count {
            out[self.positions[k]] = self.values[k];
        }
        self.count = 0;
    }
}

/// Elements `[start, start + out.len())` of a one-word dtype looked up in `table`
/// ([`crate::table`]): a step's words, then each element from the table, the words it
/// does not hold batched through the exact lane code ([`ExactLanes`]). Steps as
/// [`word_steps`] takes them (big from a block's start, else small).
#[inline(always)]
fn table_steps<T: Element, W: WordSource>(
    words_of: W,
    key: [u32; 2],
    table: &dyn WordTable<T>,
    start: u64,
    out: &mut [T],
) {
    let mut big_words = [0u32; BIG_STEP];
    let mut small_words = [0u32; SMALL_STEP];
    let mut mixed = [0u16; BIG_STEP];
    // Set up at the first mixed word: a short run (a box's narrow rows) may have none.
    let mut exact: Option<ExactLanes<T>> = None;
    let mut index = start;
    let mut done = 0;
    while done < out.len() {
        let skip = (index % 4) as usize;
        let remaining = out.len() - done;
        let (words, take): (&[u32], usize) = if skip == 0 && remaining >= BIG_STEP {
            words_of.step(index / 4, key, &mut big_words);
            (&big_words, BIG_STEP)
        } else {
            words_of.step(index / 4, key, &mut small_words);
            (&small_words[skip..], (SMALL_STEP - skip).min(remaining))
        };
        let count = table.values(&words[..take], &mut out[done..done + take], &mut mixed);
        for &k in &mixed[..count] {
            let k = usize::from(k);
            let exact = exact.get_or_insert_with(ExactLanes::new);
            exact.push(table.sampler(), done + k, words[k], out);
        }
        done += take;
        index += take as u64;
    }
    if let Some(mut exact) = exact {
        exact.flush(table.sampler(), out);
    }
}

/// The steps of float64 ([`two_word_steps`]): half as many elements per step as words.
/// The big words are zeroed on the first big step only: a short run (a box's narrow
/// rows) takes none.
struct TwoWordSteps<'s, W> {
    words_of: W,
    key: [u32; 2],
    sampler: &'s Sampler,
    big_words: Option<[u32; BIG_STEP]>,
    small_words: [u32; SMALL_STEP],
}

impl<T: Element, W: WordSource> StepWriter<T, { BIG_STEP / 2 }> for TwoWordSteps<'_, W> {
    #[inline(always)]
    fn step(&mut self, block: u64, step: WordStep<'_, T, { BIG_STEP / 2 }>) {
        const SMALL: usize = SMALL_STEP / 2;
        match step {
            WordStep::Big(dest) => {
                let words = self.big_words.get_or_insert([0u32; BIG_STEP]);
                self.words_of.step(block, self.key, words);
                transform_two_word(self.sampler, words, dest);
            }
            WordStep::Small { dest, skip } => {
                self.words_of.step(block, self.key, &mut self.small_words);
                if let Ok(whole) = <&mut [T; SMALL]>::try_from(&mut *dest) {
                    transform_two_word(self.sampler, &self.small_words, whole);
                } else {
                    let mut values = [T::from_f64(0.0); SMALL];
                    transform_two_word(self.sampler, &self.small_words, &mut values);
                    dest.copy_from_slice(&values[skip..skip + dest.len()]);
                }
            }
        }
    }
}

/// Elements `[start, start + out.len())` of float64 (element `i` uses words `2i`,
/// `2i + 1`: half of block `i >> 1`).
#[inline(always)]
fn two_word_steps<T: Element, W: WordSource>(
    words_of: W,
    key: [u32; 2],
    sampler: &Sampler,
    start: u64,
    out: &mut [T],
) {
    let mut steps = TwoWordSteps {
        words_of,
        key,
        sampler,
        big_words: None,
        small_words: [0u32; SMALL_STEP],
    };
    word_steps::<T, 2, { BIG_STEP / 2 }, { SMALL_STEP / 2 }>(start, out, &mut steps);
}

/// [`one_word_steps`] (`TWO_WORDS` false; through `table` when given) or
/// [`two_word_steps`] with the word source `W`; the lane code is compiled for the target
/// features of the caller.
#[inline(always)]
fn steps<T: Element, W: WordSource, const TWO_WORDS: bool>(
    words_of: W,
    key: [u32; 2],
    sampler: &Sampler,
    table: Option<&dyn WordTable<T>>,
    start: u64,
    out: &mut [T],
) {
    match table {
        _ if TWO_WORDS => two_word_steps(words_of, key, sampler, start, out),
        Some(table) => table_steps(words_of, key, table, start, out),
        None => one_word_steps(words_of, key, sampler, start, out),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{steps, Avx2Words, Element, Sampler, WordTable};

    /// [`steps`] with AVX2 words and AVX2 lane code.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2<T: Element, const TWO_WORDS: bool>(
        key: [u32; 2],
        sampler: &Sampler,
        table: Option<&dyn WordTable<T>>,
        start: u64,
        out: &mut [T],
    ) {
        steps::<T, _, TWO_WORDS>(Avx2Words(()), key, sampler, table, start, out);
    }

    /// [`steps`] with AVX2 words and AVX-512 lane code: the fill kernel of
    /// [`Backend::Avx2PhiloxAvx512Lanes`](crate::Backend::Avx2PhiloxAvx512Lanes).
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX2.
    #[cfg(shardinit_avx512)] // Rust >= 1.89: see build.rs
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn avx2_philox_avx512_lanes<T: Element, const TWO_WORDS: bool>(
        key: [u32; 2],
        sampler: &Sampler,
        table: Option<&dyn WordTable<T>>,
        start: u64,
        out: &mut [T],
    ) {
        steps::<T, _, TWO_WORDS>(Avx2Words(()), key, sampler, table, start, out);
    }
}

/// Panics unless this CPU can run `backend` (a forced backend in a test or benchmark).
pub(crate) fn check_available(backend: Backend) {
    assert!(
        backend.is_available(),
        "backend {backend:?} is not supported by this CPU"
    );
}

/// Elements `[start, start + out.len())` with a batched backend (not
/// [`Backend::Scalar`], which the caller handles): one word per element, or two
/// (`TWO_WORDS`, float64); one-word values looked up in `table` when given (the same
/// bits: [`crate::table`]).
///
/// # Panics
/// If this CPU cannot run `backend`.
pub(crate) fn fill_lanes<T: Element, const TWO_WORDS: bool>(
    backend: Backend,
    key: [u32; 2],
    sampler: &Sampler,
    table: Option<&dyn WordTable<T>>,
    start: u64,
    out: &mut [T],
) {
    check_available(backend);
    match backend {
        // SAFETY: AVX2 support was just checked.
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => unsafe { x86::avx2::<T, TWO_WORDS>(key, sampler, table, start, out) },
        // SAFETY: AVX-512F and AVX2 support were just checked (`available` lists
        // `Avx2PhiloxAvx512Lanes` only when both are present). Builds without this arm
        // (Rust < 1.89) report it unavailable, so `check_available` has already panicked.
        #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
        Backend::Avx2PhiloxAvx512Lanes => unsafe {
            x86::avx2_philox_avx512_lanes::<T, TWO_WORDS>(key, sampler, table, start, out)
        },
        _ => steps::<T, _, TWO_WORDS>(PortableWords, key, sampler, table, start, out),
    }
}

/// The values of any `words` of a one-word dtype (element `k` from `words[k]`, `out`
/// as long as `words`) by the portable lane code: the exact values a value table is
/// built from.
pub(crate) fn values_of_words<T: Element>(sampler: &Sampler, words: &[u32], out: &mut [T]) {
    assert_eq!(words.len(), out.len(), "one value per word");
    let mut scratch = Scratch::new();
    let mut step_words = [0u32; BIG_STEP];
    let mut values = [T::from_f64(0.0); BIG_STEP];
    for (words, out) in words.chunks(BIG_STEP).zip(out.chunks_mut(BIG_STEP)) {
        // A short last chunk: the words after it are left from the one before (or 0).
        step_words[..words.len()].copy_from_slice(words);
        transform_one_word(sampler, &step_words, &mut values, &mut scratch);
        out.copy_from_slice(&values[..out.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::{u24, u32_open, u52_open};

    #[test]
    fn lane_uniform_maps_equal_the_definitions() {
        let mut words = vec![0u32, 1, 2, 255, 256, 0x7fff_ffff, 0x8000_0000, u32::MAX];
        let mut x = 0x9e37_79b9u32;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            words.push(x);
        }
        for (i, &w) in words.iter().enumerate() {
            assert_eq!(u24_lane(w).to_bits(), u24(w).to_bits(), "{w:#x}");
            assert_eq!(u32_open_lane(w).to_bits(), u32_open(w).to_bits(), "{w:#x}");
            let w1 = words[(i * 7 + 3) % words.len()];
            assert_eq!(
                u52_open_lane(w, w1).to_bits(),
                u52_open(w, w1).to_bits(),
                "{w:#x} {w1:#x}"
            );
        }
        for (w0, w1) in [(0, 0), (u32::MAX, u32::MAX), (0, u32::MAX), (u32::MAX, 0)] {
            assert_eq!(u52_open_lane(w0, w1), u52_open(w0, w1));
        }
    }

    /// The integer test of the normal kernel agrees with `phi_inv`'s own split around
    /// both edges and at the ends (both sides are monotone in `w`, so the edges decide).
    #[test]
    fn u32_central_range_is_phi_inv_central_region() {
        let is_central = |w: u32| (u32_open(w) - 0.5).abs() <= math::PHI_INV_SPLIT1;
        let edges = [0u32, U32_CENTRAL_FIRST, 1 << 31, U32_CENTRAL_LAST, u32::MAX];
        for &edge in &edges {
            for w in edge.saturating_sub(3000)..=edge.saturating_add(3000) {
                let by_range = w.wrapping_sub(U32_CENTRAL_FIRST) <= U32_CENTRAL_FIRST_TO_LAST;
                assert_eq!(by_range, is_central(w), "{w:#x}");
            }
        }
        assert!(is_central(U32_CENTRAL_FIRST) && !is_central(U32_CENTRAL_FIRST - 1));
        assert!(is_central(U32_CENTRAL_LAST) && !is_central(U32_CENTRAL_LAST + 1));
    }

    #[test]
    fn bit_mask_sets_bit_i_for_flag_i() {
        for pattern in 0u32..256 {
            let flags: [bool; 8] = core::array::from_fn(|i| pattern >> i & 1 == 1);
            assert_eq!(bit_mask(&flags), u64::from(pattern), "{pattern:#010b}");
        }
        let mut flags = [false; 64];
        for (i, flag) in flags.iter_mut().enumerate() {
            *flag = i % 3 == 0 || i == 63;
        }
        let want = (0..64)
            .filter(|i| i % 3 == 0 || *i == 63)
            .fold(0u64, |m, i| m | 1 << i);
        assert_eq!(bit_mask(&flags), want);
    }
}
