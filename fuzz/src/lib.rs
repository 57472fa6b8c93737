//! Invariants of `shardinit-core`'s geometry and fill functions on arbitrary input, for
//! the libFuzzer target (`fuzz_targets/geometry_fill.rs`) and the stable random-input
//! test (`tests/random_inputs.rs`).
//!
//! Whatever the input: no panic, no overflow (built with overflow checks and debug
//! assertions), errors exactly when the arguments are invalid, and every region equals
//! the same region of the whole tensor, bit for bit:
//!
//! * `chunk_range`: torch.chunk geometry, chunks tile the dim;
//! * `box_numel` / `checked_numel`: the exact product or the right error, on any u64s;
//! * `ParamStream::fill_box` / `fill_box_part` / `fill_flat` on small shapes (<= 5 dims
//!   of <= 7): equal to slices of the full tensor, for every dtype and thread count;
//! * virtual shapes of arbitrary u64 dims (up to 2^64 - 1 elements): every element of a
//!   small box equals the element filled alone by its flat index;
//! * the samplers and `math::phi` / `phi_inv` on arbitrary parameters and words.

use arbitrary::Arbitrary;
use half::{bf16, f16};
use shardinit_core::init::u52_open;
use shardinit_core::{
    box_numel, checked_numel, chunk_range, math, Element, Error, Init, ParamStream, Threads,
};

/// One fuzz case (derived from the fuzzer's bytes by `arbitrary`).
#[derive(Arbitrary, Debug)]
pub struct Input {
    /// The key (stream-format.md §1).
    pub key64: u64,
    /// Small global shape: each byte % 8 is a size; at most 5 dims are used.
    pub small_shape: Vec<u8>,
    /// Box of the small shape: raw (start, stop), taken % (size + 2) so that some are
    /// out of bounds or reversed.
    pub region: Vec<(u8, u8)>,
    /// Whether the box keeps its raw number of dims (possibly wrong) or is padded.
    pub raw_rank: bool,
    /// The initializer.
    pub init: InitChoice,
    /// Output dtype (% 4: f32, f64, bf16, f16).
    pub dtype: u8,
    /// Threads for region fills (% 4 + 1).
    pub threads: u8,
    /// Flat range (start, len), taken % (numel + 2).
    pub flat: (u16, u16),
    /// Piece length (% 13 + 1) for `fill_box_part`.
    pub piece: u8,
    /// Raw `chunk_range` arguments (size, rank, world).
    pub chunk: (u64, u64, u64),
    /// Virtual shape: arbitrary u64 sizes (0 becomes 1), at most 5 dims.
    pub big_shape: Vec<u64>,
    /// Virtual box: per dim (raw start, raw length - 1 % 3).
    pub big_region: Vec<(u64, u8)>,
    /// Raw words for the samplers.
    pub words: [u32; 2],
    /// A raw argument for `math::phi`.
    pub x: f64,
}

/// An initializer: raw parameters (mostly invalid: NaN, inf, reversed) or a valid one.
#[derive(Arbitrary, Debug)]
pub enum InitChoice {
    /// `Init::Constant` with a raw value.
    Constant(f64),
    /// `Init::Uniform` with raw bounds.
    Uniform(f64, f64),
    /// `Init::Normal` with raw parameters.
    Normal(f64, f64),
    /// `Init::TruncNormal` with raw parameters.
    TruncNormal(f64, f64, f64, f64),
    /// One of a few valid initializers (so most cases reach the fill kernels).
    Valid(u8),
}

impl InitChoice {
    fn to_init(&self) -> Init {
        match *self {
            InitChoice::Constant(value) => Init::Constant { value },
            InitChoice::Uniform(a, b) => Init::Uniform { a, b },
            InitChoice::Normal(mean, std) => Init::Normal { mean, std },
            InitChoice::TruncNormal(mean, std, a, b) => Init::TruncNormal { mean, std, a, b },
            InitChoice::Valid(which) => [
                Init::Constant { value: -1.5 },
                Init::Uniform { a: -0.5, b: 2.0 },
                Init::Normal {
                    mean: 0.1,
                    std: 0.02,
                },
                Init::TruncNormal {
                    mean: 0.0,
                    std: 1.0,
                    a: -2.0,
                    b: 2.0,
                },
                Init::TruncNormal {
                    mean: 0.0,
                    std: 1.0,
                    a: 5.0,
                    b: 7.0,
                },
            ][usize::from(which) % 5],
        }
    }
}

/// An element type whose bits can be compared (so NaN == NaN and -0.0 != 0.0).
trait Bits: Element + Default + Copy {
    fn bits(self) -> u64;
}

impl Bits for f32 {
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl Bits for f64 {
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

impl Bits for bf16 {
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl Bits for f16 {
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

fn bits<T: Bits>(values: &[T]) -> Vec<u64> {
    values.iter().map(|&v| v.bits()).collect()
}

/// Checks every invariant on one input; panics (a fuzzer finding) if one fails.
pub fn check(input: &Input) {
    check_chunk_range(input.chunk);
    check_numel(&input.big_shape, &input.big_region);
    let init = input.init.to_init();
    check_sampler(&init, input.words, input.x);
    match input.dtype % 4 {
        0 => {
            check_small::<f32>(input, init);
            check_virtual::<f32>(input, init);
        }
        1 => {
            check_small::<f64>(input, init);
            check_virtual::<f64>(input, init);
        }
        2 => {
            check_small::<bf16>(input, init);
            check_virtual::<bf16>(input, init);
        }
        _ => {
            check_small::<f16>(input, init);
            check_virtual::<f16>(input, init);
        }
    }
}

fn check_chunk_range((size, rank, world): (u64, u64, u64)) {
    match chunk_range(size, rank, world) {
        Err(Error::InvalidShard { .. }) => assert!(world == 0 || rank >= world),
        Err(other) => panic!("unexpected error {other:?}"),
        Ok((start, stop)) => {
            assert!(world > 0 && rank < world);
            assert!(start <= stop && stop <= size);
            let chunk = u128::from(size.div_ceil(world));
            let expected_start = (u128::from(rank) * chunk).min(u128::from(size));
            assert_eq!(u128::from(start), expected_start);
            assert_eq!(
                u128::from(stop),
                (expected_start + chunk).min(u128::from(size))
            );
        }
    }
    // Small sizes: the chunks of every rank tile [0, size) in order.
    let (size, world) = (size % 300, world % 20 + 1);
    let mut next = 0;
    for rank in 0..world {
        let (start, stop) = chunk_range(size, rank, world).unwrap();
        assert_eq!(start, next);
        next = stop;
    }
    assert_eq!(next, size);
}

fn check_numel(shape: &[u64], raw_region: &[(u64, u8)]) {
    let shape: Vec<u64> = shape.iter().take(6).copied().collect();
    // The exact element count (None: past u128), 0 whenever a size is 0.
    let product = if shape.contains(&0) {
        Some(0)
    } else {
        shape
            .iter()
            .try_fold(1u128, |acc, &s| acc.checked_mul(u128::from(s)))
    };
    for max_numel in [u64::MAX, 1 << 63] {
        match checked_numel(&shape, max_numel) {
            Ok(numel) => assert_eq!(Some(u128::from(numel)), product),
            Err(Error::ShapeTooLarge { .. }) => {
                assert!(product.is_none_or(|p| p > u128::from(max_numel)))
            }
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    // Boxes, valid or not (a raw start may exceed the size, a length may overrun it).
    let region: Vec<(u64, u64)> = raw_region
        .iter()
        .take(6)
        .zip(shape.iter().chain(std::iter::repeat(&0)))
        .map(|(&(start, len), &size)| {
            let start = start % size.saturating_add(2).max(1);
            (start, start.saturating_add(u64::from(len % 4)))
        })
        .collect();
    let valid = region.len() == shape.len()
        && region
            .iter()
            .zip(&shape)
            .all(|(&(a, b), &s)| a <= b && b <= s);
    match box_numel(&shape, &region) {
        Ok(numel) => {
            assert!(valid);
            let exact: u128 = region.iter().map(|&(a, b)| u128::from(b - a)).product();
            assert_eq!(u128::from(numel), exact.min(u128::from(u64::MAX)));
        }
        Err(Error::BoxRankMismatch { .. }) => assert_ne!(region.len(), shape.len()),
        Err(Error::BoxOutOfBounds { .. }) => assert!(!valid),
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

fn check_sampler(init: &Init, words: [u32; 2], x: f64) {
    let phi = math::phi(x);
    assert!(x.is_nan() || (0.0..=1.0).contains(&phi), "phi({x}) = {phi}");
    let u = u52_open(words[0], words[1]);
    let z = math::phi_inv(u, 1.0 - u);
    assert!(z.is_finite() && z.abs() < 9.0, "phi_inv({u}) = {z}");
    match (init.validate(), init.prepare()) {
        (Ok(()), Ok(sampler)) => {
            let one = sampler.one_word(words[0]);
            let two = sampler.two_words(words[0], words[1]);
            if let Init::TruncNormal { a, b, .. } = *init {
                assert!(
                    (a..=b).contains(&one) && (a..=b).contains(&two),
                    "{one} {two}"
                );
            }
            if let Init::Uniform { a, b } = *init {
                if (b - a).is_finite() {
                    assert!(
                        (a..=b).contains(&one) && (a..=b).contains(&two),
                        "{one} {two}"
                    );
                }
            }
        }
        (Err(first), Err(second)) => assert_eq!(first.to_string(), second.to_string()),
        (valid, prepared) => panic!("validate {valid:?} but prepare {:?}", prepared.err()),
    }
}

fn strides(shape: &[u64]) -> Vec<u128> {
    let mut strides = vec![1u128; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * u128::from(shape[d + 1]);
    }
    strides
}

/// Global flat indices of a box's elements, in C order.
fn flat_indices(shape: &[u64], region: &[(u64, u64)]) -> Vec<u128> {
    let strides = strides(shape);
    let mut indices = vec![0u128];
    for (&(start, stop), &stride) in region.iter().zip(&strides) {
        indices = indices
            .iter()
            .flat_map(|&base| (start..stop).map(move |i| base + u128::from(i) * stride))
            .collect();
    }
    indices
}

fn check_small<T: Bits>(input: &Input, init: Init) {
    let shape: Vec<u64> = input
        .small_shape
        .iter()
        .take(5)
        .map(|&s| u64::from(s % 8))
        .collect();
    let numel: u64 = shape.iter().product();
    let param = ParamStream {
        key64: input.key64,
        global_shape: shape.clone(),
        init,
    };
    let threads = Threads::Count(usize::from(input.threads % 4) + 1);
    let init_ok = init.validate().is_ok();

    let mut whole = vec![T::default(); numel as usize];
    let result = param.fill_flat(0, &mut whole, Threads::Count(1));
    assert_eq!(result.is_ok(), init_ok, "{result:?}");

    // The box: raw pairs % (size + 2), padded with full ranges unless raw_rank.
    let mut region: Vec<(u64, u64)> = input
        .region
        .iter()
        .zip(shape.iter().chain(std::iter::repeat(&5)))
        .take(if input.raw_rank { 6 } else { shape.len() })
        .map(|(&(a, b), &size)| (u64::from(a) % (size + 2), u64::from(b) % (size + 2)))
        .collect();
    if !input.raw_rank {
        region.extend(shape[region.len()..].iter().map(|&size| (0, size)));
    }
    let region_ok = region.len() == shape.len()
        && region
            .iter()
            .zip(&shape)
            .all(|(&(a, b), &s)| a <= b && b <= s);
    let box_len: u64 = if region_ok {
        region.iter().map(|&(a, b)| b - a).product()
    } else {
        3
    };

    let mut got = vec![T::default(); box_len as usize];
    let result = param.fill_box(&region, &mut got, threads);
    assert_eq!(
        result.is_ok(),
        init_ok && region_ok,
        "{result:?} {region:?} {shape:?}"
    );
    if init_ok && region_ok {
        let expected: Vec<u64> = flat_indices(&shape, &region)
            .iter()
            .map(|&i| whole[i as usize].bits())
            .collect();
        assert_eq!(bits(&got), expected, "fill_box {shape:?} {region:?}");

        // A wrong-length out is refused, not overrun.
        let mut longer = vec![T::default(); box_len as usize + 1];
        assert!(param.fill_box(&region, &mut longer, threads).is_err());

        // The same box streamed in pieces.
        let piece = usize::from(input.piece % 13) + 1;
        let mut pieces = vec![T::default(); box_len as usize];
        for (i, chunk) in pieces.chunks_mut(piece).enumerate() {
            param
                .fill_box_part(&region, (i * piece) as u64, chunk, threads)
                .unwrap();
        }
        assert_eq!(bits(&pieces), expected, "fill_box_part");
        let mut past = vec![T::default(); piece];
        assert!(param
            .fill_box_part(&region, box_len, &mut past, threads)
            .is_err());
    }

    // A flat range, valid or not.
    let start = u64::from(input.flat.0) % (numel + 2);
    let len = u64::from(input.flat.1) % (numel + 2);
    let mut range = vec![T::default(); len as usize];
    let result = param.fill_flat(start, &mut range, threads);
    let range_ok = start + len <= numel;
    assert_eq!(result.is_ok(), init_ok && range_ok, "{result:?}");
    if init_ok && range_ok {
        assert_eq!(
            bits(&range),
            bits(&whole[start as usize..(start + len) as usize])
        );
    }
}

fn check_virtual<T: Bits>(input: &Input, init: Init) {
    if init.validate().is_err() || input.big_shape.is_empty() {
        return;
    }
    let shape: Vec<u64> = input.big_shape.iter().take(5).map(|&s| s.max(1)).collect();
    let region: Vec<(u64, u64)> = shape
        .iter()
        .zip(
            input
                .big_region
                .iter()
                .chain(std::iter::repeat(&(u64::MAX, 0))),
        )
        .map(|(&size, &(start, len))| {
            let len = (u64::from(len % 3) + 1).min(size);
            let start = start % (size - len + 1);
            (start, start + len)
        })
        .collect();
    let param = ParamStream {
        key64: input.key64,
        global_shape: shape.clone(),
        init,
    };
    let box_len: u64 = region.iter().map(|&(a, b)| b - a).product();
    let mut got = vec![T::default(); box_len as usize];
    let result = param.fill_box(&region, &mut got, Threads::Count(1));
    let fits = checked_numel(&shape, T::DTYPE.max_numel()).is_ok();
    assert_eq!(result.is_ok(), fits, "{result:?} {shape:?}");
    if !fits {
        return;
    }
    for (position, &index) in flat_indices(&shape, &region).iter().enumerate() {
        let mut one = [T::default()];
        param
            .fill_flat(index as u64, &mut one, Threads::Count(1))
            .unwrap();
        assert_eq!(
            one[0].bits(),
            got[position].bits(),
            "element {index} of {shape:?}"
        );
    }
}
