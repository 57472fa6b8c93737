//! Initializers (stream-format.md §3–4): how stream words become element values.
//!
//! Every value is computed in binary64 by a fixed sequence of operations and then
//! rounded to the target dtype (float32 once; bfloat16 and float16 via float32, which
//! is what torch's `.to()` does).

use half::{bf16, f16};

use crate::math;
use crate::Error;

/// 2^-24: the U24 map's scale.
const TWO_POW_M24: f64 = 1.0 / 16_777_216.0;
/// 2^-32: the U32 map's scale.
const TWO_POW_M32: f64 = 1.0 / 4_294_967_296.0;
/// 2^-53: the U52 map's scale.
const TWO_POW_M53: f64 = 1.0 / 9_007_199_254_740_992.0;

/// `U24(w) = (w >> 8) * 2^-24`, in [0, 1) (stream-format.md §3).
#[inline(always)]
pub fn u24(word: u32) -> f64 {
    f64::from(word >> 8) * TWO_POW_M24
}

/// `U32(w) = (w + 0.5) * 2^-32`, in (0, 1), never 0 or 1 (stream-format.md §3).
#[inline(always)]
pub fn u32_open(word: u32) -> f64 {
    (f64::from(word) + 0.5) * TWO_POW_M32
}

/// `U52(w0, w1) = (2m + 1) * 2^-53` with `m = ((w0 >> 6) << 26) | (w1 >> 6)`, in
/// (0, 1), never 0 or 1 (stream-format.md §3).
#[inline(always)]
pub fn u52_open(word0: u32, word1: u32) -> f64 {
    let m = (u64::from(word0 >> 6) << 26) | u64::from(word1 >> 6);
    (2 * m + 1) as f64 * TWO_POW_M53
}

/// Elements per pass of the two-pass 16-bit roundings.
const LANE_CHUNK: usize = 64;

/// A floating-point element type the core can write.
pub trait Element: Copy + Send + Sync + 'static {
    /// The stream-v1 dtype of this element type.
    const DTYPE: Dtype;
    /// Rounds a binary64 value to this type as stream-format.md §4 prescribes.
    fn from_f64(value: f64) -> Self;
    /// The value as binary64 (exact: every value of these types is one).
    fn widen(self) -> f64;
    /// Rounds `values[i]` into `out[i]` for every `i` (the shorter length wins),
    /// exactly as [`Element::from_f64`] does, written so the loop vectorizes.
    #[inline(always)]
    fn from_f64_lanes(values: &[f64], out: &mut [Self]) {
        for (slot, &value) in out.iter_mut().zip(values) {
            *slot = Self::from_f64(value);
        }
    }
    /// As [`Element::from_f64_lanes`] for values that are not NaN (the caller knows:
    /// finite sampler constants). The same bits; bfloat16 skips its NaN handling.
    #[inline(always)]
    fn from_f64_lanes_not_nan(values: &[f64], out: &mut [Self]) {
        Self::from_f64_lanes(values, out);
    }
    /// The buffer as its run-time-typed [`OutBuf`], the form every fill takes inside
    /// this crate (so that the kernels are compiled here once, not again in each crate
    /// that names an element type).
    fn out_buf(out: &mut [Self]) -> OutBuf<'_>;
}

impl Element for f64 {
    const DTYPE: Dtype = Dtype::F64;
    fn out_buf(out: &mut [Self]) -> OutBuf<'_> {
        OutBuf::F64(out)
    }
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(value: f64) -> Self {
        value
    }
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    fn out_buf(out: &mut [Self]) -> OutBuf<'_> {
        OutBuf::F32(out)
    }
    #[inline(always)]
    fn widen(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn from_f64(value: f64) -> Self {
        // `as` rounds to nearest, ties to even (IEEE-754 default).
        value as f32
    }
}

impl Element for bf16 {
    const DTYPE: Dtype = Dtype::BF16;
    fn out_buf(out: &mut [Self]) -> OutBuf<'_> {
        OutBuf::BF16(out)
    }
    #[inline(always)]
    fn widen(self) -> f64 {
        self.to_f64()
    }
    #[inline(always)]
    fn from_f64(value: f64) -> Self {
        // Via float32, as torch's `.to(torch.bfloat16)` of a float32 tensor.
        bf16::from_f32(value as f32)
    }
    #[inline(always)]
    fn from_f64_lanes(values: &[f64], out: &mut [Self]) {
        via_f32_lanes(values, out, |x| bf16::from_bits(bf16_bits_from_f32(x)));
    }
    #[inline(always)]
    fn from_f64_lanes_not_nan(values: &[f64], out: &mut [Self]) {
        via_f32_lanes(values, out, |x| {
            bf16::from_bits(bf16_bits_from_f32_not_nan(x))
        });
    }
}

impl Element for f16 {
    const DTYPE: Dtype = Dtype::F16;
    fn out_buf(out: &mut [Self]) -> OutBuf<'_> {
        OutBuf::F16(out)
    }
    #[inline(always)]
    fn widen(self) -> f64 {
        self.to_f64()
    }
    #[inline(always)]
    fn from_f64(value: f64) -> Self {
        // Via float32, as torch's `.to(torch.float16)` of a float32 tensor.
        f16::from_f32(value as f32)
    }
    #[inline(always)]
    fn from_f64_lanes(values: &[f64], out: &mut [Self]) {
        via_f32_lanes(values, out, |x| f16::from_bits(f16_bits_from_f32(x)));
    }
}

/// `out[i] = round(values[i] as f32)` in two passes per chunk of [`LANE_CHUNK`], so that
/// the 16-bit rounding runs on full-width 32-bit lanes rather than on the four floats
/// one f64 -> f32 conversion yields.
#[inline(always)]
fn via_f32_lanes<T>(values: &[f64], out: &mut [T], round: impl Fn(f32) -> T) {
    for (values, out) in values.chunks(LANE_CHUNK).zip(out.chunks_mut(LANE_CHUNK)) {
        let mut singles = [0f32; LANE_CHUNK];
        for (single, &value) in singles.iter_mut().zip(values) {
            *single = value as f32;
        }
        for (slot, &single) in out.iter_mut().zip(&singles) {
            *slot = round(single);
        }
    }
}

/// `bf16::from_f32(x).to_bits()` (round to nearest even; NaN stays NaN with the quiet
/// bit set, as `half` does) written without branches, so that lane loops vectorize.
/// Tested against `half` on every f32 bit pattern class.
#[inline(always)]
pub fn bf16_bits_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    let is_nan = (bits & 0x7fff_ffff) > 0x7f80_0000;
    // Round to nearest even: adding 0x7fff plus the lowest kept bit carries into the
    // kept bits exactly when the dropped half is above half way, or at half way with
    // an odd kept part. No overflow: without NaNs, bits + 0x8000 < 2^32.
    let rounded = (bits.wrapping_add(0x7fff + ((bits >> 16) & 1))) >> 16;
    let nan = (bits >> 16) | 0x0040;
    (if is_nan { nan } else { rounded }) as u16
}

/// [`bf16_bits_from_f32`] of an `x` that is not NaN: the rounding alone (infinities
/// come out right: `0x7f80_0000 + 0x7fff` keeps the high half).
#[inline(always)]
pub fn bf16_bits_from_f32_not_nan(x: f32) -> u16 {
    let bits = x.to_bits();
    (bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// `f16::from_f32(x).to_bits()` (IEEE round to nearest even, subnormals, overflow to
/// infinity; NaN keeps its top mantissa bits with the quiet bit set, as `half`'s
/// software conversion and the F16C instruction do) written without branches, so that
/// lane loops vectorize. Tested against `half` on every f32 bit pattern class.
#[inline(always)]
pub fn f16_bits_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let exp = bits & 0x7f80_0000;
    let man = bits & 0x007f_ffff;
    // Infinity and NaN.
    let inf_nan = 0x7c00 | if man != 0 { 0x0200 } else { 0 } | (man >> 13);
    // Exponent rebiased for binary16 (may be out of range; selected away below).
    let half_exp = (exp >> 23) as i32 - 127 + 15;
    // Normal results: drop 13 mantissa bits, round to nearest even. A carry out of the
    // mantissa correctly bumps the exponent (up to infinity).
    let normal_round = (man & 0x1000) != 0 && (man & 0x2fff) != 0;
    let normal = ((((half_exp.clamp(0, 31)) as u32) << 10) | (man >> 13)) + u32::from(normal_round);
    // Subnormal results (half_exp in -10 ..= 0): shift the full significand right by
    // 14 - half_exp (14 ..= 24) bits, round to nearest even.
    let shift = (14 - half_exp).clamp(14, 24) as u32;
    let significand = man | 0x0080_0000;
    let round_bit = 1u32 << (shift - 1);
    let sub_round = (significand & round_bit) != 0 && (significand & (3 * round_bit - 1)) != 0;
    let subnormal = (significand >> shift) + u32::from(sub_round);
    let magnitude = if exp == 0x7f80_0000 {
        inf_nan
    } else if half_exp >= 0x1f {
        0x7c00
    } else if half_exp > 0 {
        normal
    } else if half_exp >= -10 {
        subnormal
    } else {
        0
    };
    (sign | magnitude) as u16
}

/// Target dtypes of stream format v1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary64: two stream words per element.
    F64,
    /// bfloat16 (rounded from float32).
    BF16,
    /// IEEE binary16 (rounded from float32).
    F16,
}

impl Dtype {
    /// Every dtype, in the order of [`Dtype::name`]'s list in messages.
    pub const ALL: [Dtype; 4] = [Dtype::F32, Dtype::F64, Dtype::BF16, Dtype::F16];

    /// The dtype's name, as torch spells it without the `torch.` prefix (`"float32"`,
    /// `"float64"`, `"bfloat16"`, `"float16"`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::F64 => "float64",
            Dtype::BF16 => "bfloat16",
            Dtype::F16 => "float16",
        }
    }

    /// The dtype named `name` ([`Dtype::name`]), or `None` for any other string.
    ///
    /// ```
    /// use shardinit_core::Dtype;
    /// assert_eq!(Dtype::from_name("bfloat16"), Some(Dtype::BF16));
    /// assert_eq!(Dtype::from_name("half"), None); // no aliases
    /// ```
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|dtype| dtype.name() == name)
    }

    /// Stream words consumed per element: 2 for float64, 1 otherwise (stream-format.md §3).
    pub fn words_per_element(self) -> u64 {
        match self {
            Dtype::F64 => 2,
            _ => 1,
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            Dtype::F64 => 8,
            Dtype::F32 => 4,
            Dtype::BF16 | Dtype::F16 => 2,
        }
    }

    /// Largest element count whose word positions fit in 64 bits.
    pub fn max_numel(self) -> u64 {
        match self {
            Dtype::F64 => 1 << 63,
            _ => u64::MAX,
        }
    }
}

/// A base initializer of stream-format.md §4. Fan-based initializers (kaiming, xavier, torch.nn
/// defaults) resolve to one of these from the global shape before they reach the core.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Init {
    /// Every element equal to `value` (zeros, ones, constant). Consumes no words.
    Constant {
        /// The value.
        value: f64,
    },
    /// Uniform on [a, b).
    Uniform {
        /// Lower bound.
        a: f64,
        /// Upper bound.
        b: f64,
    },
    /// Normal with the given mean and standard deviation.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation (>= 0).
        std: f64,
    },
    /// Normal(mean, std) truncated to [a, b] by inverse-CDF sampling.
    TruncNormal {
        /// Mean.
        mean: f64,
        /// Standard deviation (> 0).
        std: f64,
        /// Lower truncation bound.
        a: f64,
        /// Upper truncation bound.
        b: f64,
    },
    /// torch's `orthogonal_` (stream-format.md §4.5): the Q of a Householder QR of the
    /// parameter's float64 normal matrix, times `gain`. Not elementwise: every fill
    /// computes the whole matrix ([`crate::orthogonal`]).
    Orthogonal {
        /// The scale (finite, any sign).
        gain: f64,
        /// The largest element count allowed (the whole matrix is computed in binary64
        /// by every fill, 8 bytes per element): the caller's choice (the Python API's
        /// default and its environment variable live there).
        max_numel: u64,
    },
}

fn finite(arg: &'static str, value: f64) -> Result<(), Error> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(Error::NonFinite { arg, value })
    }
}

impl Init {
    /// Checks the parameters: all finite, `std >= 0` (`> 0` for trunc_normal), `a < b`.
    ///
    /// # Errors
    /// [`Error::NonFinite`], [`Error::NegativeStd`], [`Error::NonPositiveStd`] or
    /// [`Error::EmptyInterval`].
    pub fn validate(&self) -> Result<(), Error> {
        match *self {
            Init::Constant { value } => finite("value", value),
            Init::Uniform { a, b } => {
                finite("a", a)?;
                finite("b", b)?;
                if a < b {
                    Ok(())
                } else {
                    Err(Error::EmptyInterval { a, b })
                }
            }
            Init::Normal { mean, std } => {
                finite("mean", mean)?;
                finite("std", std)?;
                if std < 0.0 {
                    return Err(Error::NegativeStd { std });
                }
                Ok(())
            }
            Init::TruncNormal { mean, std, a, b } => {
                finite("mean", mean)?;
                finite("std", std)?;
                finite("a", a)?;
                finite("b", b)?;
                if std <= 0.0 {
                    // std == 0 would make the standardized bounds infinite or NaN.
                    return Err(Error::NonPositiveStd { std });
                }
                if a >= b {
                    return Err(Error::EmptyInterval { a, b });
                }
                Ok(())
            }
            Init::Orthogonal { gain, .. } => finite("gain", gain),
        }
    }

    /// Checks that this initializer applies to `global_shape` (of `numel` elements):
    /// orthogonal needs at least 2 dims and at most its `max_numel` elements; every
    /// other initializer applies to any shape.
    ///
    /// # Errors
    /// [`Error::OrthogonalShape`] or [`Error::OrthogonalTooLarge`].
    pub fn check_shape(&self, global_shape: &[u64], numel: u64) -> Result<(), Error> {
        if let Init::Orthogonal { max_numel, .. } = *self {
            if global_shape.len() < 2 {
                return Err(Error::OrthogonalShape {
                    global_shape: global_shape.to_vec(),
                });
            }
            if numel > max_numel {
                return Err(Error::OrthogonalTooLarge {
                    global_shape: global_shape.to_vec(),
                    numel,
                    max_numel,
                });
            }
        }
        Ok(())
    }

    /// Precomputes the per-parameter constants of the sampler (validating first).
    ///
    /// # Errors
    /// As [`Init::validate`]; [`Error::NoSampler`] for [`Init::Orthogonal`], which is not
    /// elementwise.
    pub fn prepare(&self) -> Result<Sampler, Error> {
        self.validate()?;
        Ok(match *self {
            Init::Orthogonal { .. } => return Err(Error::NoSampler { init: "orthogonal" }),
            Init::Constant { value } => Sampler::Constant { value },
            Init::Uniform { a, b } => Sampler::Uniform { a, width: b - a },
            Init::Normal { mean, std } => Sampler::Normal { mean, std },
            Init::TruncNormal { mean, std, a, b } => {
                Sampler::TruncNormal(TruncNormal::new(mean, std, a, b))
            }
        })
    }
}

/// Constants of a truncated normal, chosen so that an interval far in either tail keeps
/// full precision (stream-format.md §4): the sample is `PhiInv(t)` with
/// `t = Phi(al) + U * (Phi(be) - Phi(al))`; when `t > 1/2` it is computed as
/// `-PhiInv(1 - t)` with `1 - t = Phi(-be) + (1 - U) * mass`, which involves no
/// cancellation (`1 - U` is exact for the U32 and U52 maps).
#[derive(Clone, Copy, Debug, PartialEq)]
///
/// Its fields are the constants [`Sampler::constants`] publishes, by the same names; the
/// lane kernels read them by name too.
pub struct TruncNormal {
    pub(crate) mean: f64,
    pub(crate) std: f64,
    pub(crate) a: f64,
    pub(crate) b: f64,
    /// Phi(al).
    pub(crate) lower_cdf: f64,
    /// Phi(-be) = 1 - Phi(be).
    pub(crate) upper_tail: f64,
    /// Phi(be) - Phi(al), computed without cancellation for the interval's position.
    pub(crate) mass: f64,
}

impl TruncNormal {
    fn new(mean: f64, std: f64, a: f64, b: f64) -> TruncNormal {
        let alpha = (a - mean) / std;
        let beta = (b - mean) / std;
        let lower_cdf = math::phi(alpha);
        let upper_tail = math::phi(-beta);
        let mass = if alpha >= 0.0 {
            // Both bounds in the upper tail: difference of upper-tail probabilities.
            math::phi(-alpha) - upper_tail
        } else if beta <= 0.0 {
            // Both bounds in the lower tail.
            math::phi(beta) - lower_cdf
        } else {
            // Straddles the mean: two non-negative halves, no cancellation.
            0.5 * (math::erf(beta * std::f64::consts::FRAC_1_SQRT_2)
                + math::erf(-alpha * std::f64::consts::FRAC_1_SQRT_2))
        };
        TruncNormal {
            mean,
            std,
            a,
            b,
            lower_cdf,
            upper_tail,
            mass,
        }
    }

    /// `Phi(al)`, the normal CDF at the standardized lower bound `al = (a - mean) / std`.
    pub fn lower_cdf(&self) -> f64 {
        self.lower_cdf
    }

    /// `Phi(-be) = 1 - Phi(be)`, the upper-tail probability beyond the standardized upper
    /// bound `be = (b - mean) / std`.
    pub fn upper_tail(&self) -> f64 {
        self.upper_tail
    }

    /// `Phi(be) - Phi(al)`, the probability of `[a, b]`, computed without cancellation
    /// for where the interval lies (stream-format.md §4).
    pub fn mass(&self) -> f64 {
        self.mass
    }

    /// The sample for uniform `u` in (0, 1) whose complement `1 - u` is exact.
    #[inline(always)]
    pub fn sample(&self, u: f64) -> f64 {
        let t = self.lower_cdf + u * self.mass;
        let x = if t <= 0.5 {
            math::phi_inv(t, 1.0 - t)
        } else {
            let q = self.upper_tail + (1.0 - u) * self.mass;
            -math::phi_inv(q, 1.0 - q)
        };
        let value = self.mean + self.std * x;
        // Clamp (not reject): rounding can step just outside [a, b].
        value.max(self.a).min(self.b)
    }
}

/// A validated initializer with its per-parameter constants precomputed.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Sampler {
    /// Constant fill.
    Constant {
        /// The value.
        value: f64,
    },
    /// `a + width * U`.
    Uniform {
        /// Lower bound.
        a: f64,
        /// `b - a`.
        width: f64,
    },
    /// `mean + std * PhiInv(U)`.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
    /// Truncated normal.
    TruncNormal(TruncNormal),
}

impl Sampler {
    /// The per-parameter constants of this sampler, by name, exactly as every fill
    /// kernel uses them (stream-format.md §4), so that other implementations (a GPU
    /// kernel) take them from here instead of recomputing them:
    ///
    /// | sampler | constants |
    /// |---|---|
    /// | constant | `value` |
    /// | uniform | `a`, `width` (`b - a`) |
    /// | normal | `mean`, `std` |
    /// | trunc_normal | `mean`, `std`, `a`, `b`, `lower_cdf` (`Phi(al)`), `upper_tail` (`Phi(-be)`), `mass` (`Phi(be) - Phi(al)`) |
    ///
    /// ```
    /// use shardinit_core::Init;
    /// let sampler = Init::TruncNormal { mean: 0.0, std: 1.0, a: -2.0, b: 2.0 }.prepare().unwrap();
    /// let constants = sampler.constants();
    /// let names: Vec<_> = constants.iter().map(|&(name, _)| name).collect();
    /// assert_eq!(names, ["mean", "std", "a", "b", "lower_cdf", "upper_tail", "mass"]);
    /// assert!((constants[6].1 - 0.9544997361036416).abs() < 1e-15); // P(|Z| <= 2)
    /// ```
    pub fn constants(&self) -> Vec<(&'static str, f64)> {
        match *self {
            Sampler::Constant { value } => vec![("value", value)],
            Sampler::Uniform { a, width } => vec![("a", a), ("width", width)],
            Sampler::Normal { mean, std } => vec![("mean", mean), ("std", std)],
            Sampler::TruncNormal(ref t) => vec![
                ("mean", t.mean),
                ("std", t.std),
                ("a", t.a),
                ("b", t.b),
                ("lower_cdf", t.lower_cdf),
                ("upper_tail", t.upper_tail),
                ("mass", t.mass),
            ],
        }
    }

    /// Whether this sampler consumes stream words at all.
    pub fn uses_words(&self) -> bool {
        !matches!(self, Sampler::Constant { .. })
    }

    /// Value of an element of a one-word dtype (float32, bfloat16, float16) from its
    /// word `w_i`, in binary64 before rounding.
    #[inline(always)]
    pub fn one_word(&self, word: u32) -> f64 {
        match *self {
            Sampler::Constant { value } => value,
            Sampler::Uniform { a, width } => a + width * u24(word),
            Sampler::Normal { mean, std } => {
                let u = u32_open(word);
                mean + std * math::phi_inv(u, 1.0 - u)
            }
            Sampler::TruncNormal(ref t) => t.sample(u32_open(word)),
        }
    }

    /// Value of a float64 element from its words `w_2i`, `w_2i+1`.
    #[inline(always)]
    pub fn two_words(&self, word0: u32, word1: u32) -> f64 {
        match *self {
            Sampler::Constant { value } => value,
            Sampler::Uniform { a, width } => a + width * u52_open(word0, word1),
            Sampler::Normal { mean, std } => {
                let u = u52_open(word0, word1);
                mean + std * math::phi_inv(u, 1.0 - u)
            }
            Sampler::TruncNormal(ref t) => t.sample(u52_open(word0, word1)),
        }
    }
}

/// A mutable output buffer of one of the supported dtypes, for callers (like the Python
/// bindings) that choose the dtype at run time.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutBuf<'a> {
    /// float32 elements.
    F32(&'a mut [f32]),
    /// float64 elements.
    F64(&'a mut [f64]),
    /// bfloat16 elements.
    BF16(&'a mut [bf16]),
    /// float16 elements.
    F16(&'a mut [f16]),
}

impl OutBuf<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            OutBuf::F32(s) => s.len(),
            OutBuf::F64(s) => s.len(),
            OutBuf::BF16(s) => s.len(),
            OutBuf::F16(s) => s.len(),
        }
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl OutBuf<'_> {
    /// The dtype of the elements.
    pub fn dtype(&self) -> Dtype {
        match self {
            OutBuf::F32(_) => Dtype::F32,
            OutBuf::F64(_) => Dtype::F64,
            OutBuf::BF16(_) => Dtype::BF16,
            OutBuf::F16(_) => Dtype::F16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_maps_hit_their_documented_ends() {
        assert_eq!(u24(0), 0.0);
        assert_eq!(u24(u32::MAX), 1.0 - TWO_POW_M24);
        assert_eq!(u32_open(0), 0.5 * TWO_POW_M32);
        assert_eq!(u32_open(u32::MAX), 1.0 - 0.5 * TWO_POW_M32);
        assert_eq!(u52_open(0, 0), TWO_POW_M53);
        assert_eq!(u52_open(u32::MAX, u32::MAX), 1.0 - TWO_POW_M53);
        // 1 - U is exact for U32 and U52, which the trunc_normal sampler relies on.
        let u = u52_open(0x1234_5678, 0x9abc_def0);
        assert_eq!((1.0 - u) + u, 1.0);
        assert_eq!(1.0 - (1.0 - u), u);
    }

    #[test]
    fn dtype_names_round_trip_and_nothing_else_parses() {
        for dtype in Dtype::ALL {
            assert_eq!(Dtype::from_name(dtype.name()), Some(dtype));
        }
        for other in [
            "",
            "float",
            "half",
            "Float32",
            "torch.float32",
            "int8",
            "float32 ",
        ] {
            assert_eq!(Dtype::from_name(other), None, "{other:?}");
        }
    }

    #[test]
    fn validation_messages_name_the_argument_in_full() {
        let bad = [
            (
                Init::Normal {
                    mean: 0.0,
                    std: -1.0,
                },
                "std must be >= 0, got -1",
            ),
            (
                Init::Normal {
                    mean: f64::NAN,
                    std: 1.0,
                },
                "mean must be a finite number, got NaN",
            ),
            (
                Init::Uniform { a: 1.0, b: 1.0 },
                "a must be < b, got a=1, b=1",
            ),
            (
                Init::Uniform {
                    a: 0.0,
                    b: f64::INFINITY,
                },
                "b must be a finite number, got inf",
            ),
            (
                Init::TruncNormal {
                    mean: 0.0,
                    std: 1.0,
                    a: 2.0,
                    b: -2.0,
                },
                "a must be < b, got a=2, b=-2",
            ),
            (
                Init::TruncNormal {
                    mean: 0.0,
                    std: 0.0,
                    a: -2.0,
                    b: 2.0,
                },
                "std must be > 0, got 0",
            ),
            (
                Init::TruncNormal {
                    mean: 0.0,
                    std: -0.5,
                    a: -2.0,
                    b: 2.0,
                },
                "std must be > 0, got -0.5",
            ),
            (
                Init::Constant {
                    value: f64::NEG_INFINITY,
                },
                "value must be a finite number, got -inf",
            ),
        ];
        for (init, message) in bad {
            let err = init.validate().unwrap_err().to_string();
            assert_eq!(err, message, "{init:?}");
        }
    }

    #[test]
    fn constants_are_the_ones_the_samplers_use() {
        let trunc = Init::TruncNormal {
            mean: 0.5,
            std: 2.0,
            a: -1.0,
            b: 4.0,
        }
        .prepare()
        .unwrap();
        let constants = trunc.constants();
        let Sampler::TruncNormal(t) = trunc else {
            panic!("a trunc_normal sampler")
        };
        let TruncNormal {
            mean,
            std,
            a,
            b,
            lower_cdf,
            upper_tail,
            mass,
        } = t;
        let expected = [
            ("mean", mean),
            ("std", std),
            ("a", a),
            ("b", b),
            ("lower_cdf", lower_cdf),
            ("upper_tail", upper_tail),
            ("mass", mass),
        ];
        assert_eq!(constants, expected);
        assert_eq!(
            (t.lower_cdf(), t.upper_tail(), t.mass()),
            (lower_cdf, upper_tail, mass)
        );
        // The sample recomputed from the published constants alone, for a lower-branch
        // and an upper-branch word, is the sampler's value to the bit.
        for word in [0x1234_5678u32, 0xf000_0000] {
            let u = u32_open(word);
            let t_lower = lower_cdf + u * mass;
            let x = if t_lower <= 0.5 {
                math::phi_inv(t_lower, 1.0 - t_lower)
            } else {
                let q = upper_tail + (1.0 - u) * mass;
                -math::phi_inv(q, 1.0 - q)
            };
            let value = (mean + std * x).max(a).min(b);
            assert_eq!(value.to_bits(), trunc.one_word(word).to_bits(), "{word:#x}");
        }
        let uniform = Init::Uniform { a: -3.0, b: 5.0 }.prepare().unwrap();
        assert_eq!(uniform.constants(), [("a", -3.0), ("width", 8.0)]);
        let normal = Init::Normal {
            mean: 1.0,
            std: 0.25,
        }
        .prepare()
        .unwrap();
        assert_eq!(normal.constants(), [("mean", 1.0), ("std", 0.25)]);
        let constant = Init::Constant { value: -0.0 }.prepare().unwrap();
        assert_eq!(constant.constants()[0].1.to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn trunc_normal_stays_inside_the_interval_and_its_tail() {
        for (a, b) in [
            (-2.0, 2.0),
            (5.0, 5.5),
            (-30.0, -29.0),
            (8.0, 40.0),
            (-0.1, 1e-9),
        ] {
            let sampler = Init::TruncNormal {
                mean: 0.0,
                std: 1.0,
                a,
                b,
            }
            .prepare()
            .unwrap();
            for word in [0u32, 1, 1 << 31, u32::MAX - 1, u32::MAX, 0x2bc9_fb9e] {
                let value = sampler.one_word(word);
                assert!(
                    (a..=b).contains(&value),
                    "[{a}, {b}] word {word:#x}: {value}"
                );
            }
            // Monotone in the word: inverse-CDF sampling preserves order.
            let lo = sampler.one_word(0);
            let mid = sampler.one_word(1 << 31);
            let hi = sampler.one_word(u32::MAX);
            assert!(lo <= mid && mid <= hi, "[{a}, {b}]: {lo} {mid} {hi}");
            if a > 4.0 {
                // Far in the upper tail the smallest sample sits right at a (the
                // density falls off like exp(-a * x)), not at some rounding artefact.
                assert!(lo - a < 1e-6 * (b - a), "{lo}");
            }
        }
    }

    /// Checks the branch-free conversions against `half` on `bits`.
    fn check_conversions(bits: impl Iterator<Item = u32>) {
        for b in bits {
            let x = f32::from_bits(b);
            assert_eq!(
                bf16_bits_from_f32(x),
                bf16::from_f32(x).to_bits(),
                "{b:#010x}"
            );
            assert_eq!(
                f16_bits_from_f32(x),
                f16::from_f32(x).to_bits(),
                "{b:#010x}"
            );
            if !x.is_nan() {
                assert_eq!(
                    bf16_bits_from_f32_not_nan(x),
                    bf16::from_f32(x).to_bits(),
                    "{b:#010x}"
                );
            }
        }
    }

    #[test]
    fn lane_conversions_equal_half_on_a_sample_of_every_class() {
        // A stride through all 2^32 patterns (odd, so every residue of the rounding bits
        // is hit), plus every pattern around the places where rounding changes:
        // zero / subnormals, f16's subnormal and overflow thresholds, infinity and NaN,
        // and 1.0, for both signs.
        let strided = (0..=u32::MAX / 4099).map(|i| i * 4099);
        check_conversions(strided);
        for sign in [0u32, 0x8000_0000] {
            for centre in [
                0x0000_0000u32,
                0x0080_0000, // smallest normal f32
                0x3300_0000, // 2^-25: below f16's smallest subnormal / 2
                0x3380_0000, // 2^-24: f16's smallest subnormal
                0x3880_0000, // 2^-14: f16's smallest normal
                0x3f80_0000, // 1.0
                0x477f_e000, // 65504: f16's largest finite
                0x7f7f_ffff, // largest finite f32
                0x7f80_0000, // infinity, then NaNs
                0x7fc0_0000, // quiet NaN
            ] {
                let lo = centre.saturating_sub(1 << 16);
                let hi = centre.saturating_add(1 << 16).min(0x7fff_ffff);
                check_conversions((lo..=hi).map(|b| b | sign));
            }
        }
    }

    /// Every f32 bit pattern (about a minute in release): `make test-slow` runs it;
    /// `make test` runs the sampled test above, which covers every rounding class.
    #[test]
    #[ignore = "all 2^32 f32 patterns take about a minute; run by `make test-slow`"]
    fn lane_conversions_equal_half_exhaustive() {
        check_conversions(0..=u32::MAX);
    }

    #[test]
    fn bf16_and_f16_round_through_f32() {
        // Just above a bf16 (f16) rounding tie: rounding binary64 directly would round
        // up, but the value first rounds to float32 onto the tie, which then rounds to
        // even (down). stream-format.md §4 prescribes the route through float32, like torch.
        let above_bf16_tie = 1.0 + f64::powi(2.0, -8) + f64::powi(2.0, -30);
        assert_eq!(<bf16 as Element>::from_f64(above_bf16_tie), bf16::ONE);
        assert_eq!(above_bf16_tie as f32, 1.0 + 1.0 / 256.0); // on the tie in float32
        let above_f16_tie = 1.0 + f64::powi(2.0, -11) + f64::powi(2.0, -30);
        assert_eq!(<f16 as Element>::from_f64(above_f16_tie), f16::ONE);
        assert_eq!(above_f16_tie as f32, 1.0 + 1.0 / 2048.0);
    }
}
