//! Program steps over a register's block in lanes: [`super::exp`], [`super::log`],
//! [`super::erf`], [`super::sigmoid`], [`super::tanh`], [`super::softplus`] (here) and
//! [`super::sin`], [`super::cos`], [`super::expm1`], [`super::log1p`] (beside their
//! scalar ports, `elementary::lanes`) rewritten without data-dependent branches, so that
//! the compiler runs them in vector registers (AVX-512, AVX2 or the baseline's), with the
//! bits of the scalar functions.
//!
//! # Why the bits are the same
//!
//! Each lane performs the scalar function's IEEE operations, in the same order, on the
//! same operands (no FMA: the target features enabled below do not include it, and Rust
//! never contracts `a * b + c`). Where the scalar function branches, a lane computes
//! every branch it may take and selects the one the scalar function takes, by the same
//! test on the same bits; selects and unused results change nothing. The branches that
//! are rare on program data (non-finite, overflowing, underflowing or subnormal
//! arguments and results, `log`'s and `log1p`'s `|f| < 2^-20`, `sin`/`cos` beyond
//! [`super::TRIG_MAX`]) are not written in lanes: those lanes are marked and recomputed
//! by the scalar function afterwards.
//!
//! Conversions differ in form only: the scalar `exp` truncates `INVLN2 * x +- 0.5` to
//! an `i32` (`as i32`); here [`f64::trunc`] gives the same integer as a binary64 (exact:
//! the value is below `2^31` on every lane kept), and adding `2^52 + 2^51` puts it in the
//! low bits of the sum (exact for integers below `2^51`), an integer add away from the
//! exponent field. Every lane with another `k` is recomputed by the scalar function.

use super::elementary::lanes as elementary;
use super::lane_primitives::{add_to_exponent, slice_with, SliceFunction, LANES};
use crate::Backend;

/// A function with a lane form in this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneFunction {
    /// [`super::exp`].
    Exp,
    /// [`super::log`].
    Log,
    /// [`super::erf`].
    Erf,
    /// [`super::sigmoid`].
    Sigmoid,
    /// [`super::tanh`].
    Tanh,
    /// [`super::softplus`].
    Softplus,
    /// [`super::sin`].
    Sin,
    /// [`super::cos`].
    Cos,
    /// [`super::expm1`].
    Expm1,
    /// [`super::log1p`].
    Log1p,
}

impl LaneFunction {
    /// The scalar function whose bits the lanes give.
    pub fn scalar(self) -> fn(f64) -> f64 {
        match self {
            LaneFunction::Exp => super::exp,
            LaneFunction::Log => super::log,
            LaneFunction::Erf => super::erf,
            LaneFunction::Sigmoid => super::sigmoid,
            LaneFunction::Tanh => super::tanh,
            LaneFunction::Softplus => super::softplus,
            LaneFunction::Sin => super::sin,
            LaneFunction::Cos => super::cos,
            LaneFunction::Expm1 => super::expm1,
            LaneFunction::Log1p => super::log1p,
        }
    }
}

impl SliceFunction for LaneFunction {
    const NAME: &'static str = "lanes_slice";
    fn definition(&self) -> fn(f64) -> f64 {
        self.scalar()
    }
    #[inline(always)]
    fn lanes(&self, x: &[f64], out: &mut [f64]) {
        run(*self, x, out);
    }
}

/// `function` of every `x[i]` into `out[i]`, with the lane code of `backend` (every
/// backend gives the scalar function's bits).
///
/// # Panics
/// If `x` and `out` differ in length, or this CPU cannot run `backend`.
pub fn lanes_slice_with(backend: Backend, function: LaneFunction, x: &[f64], out: &mut [f64]) {
    slice_with(backend, &function, x, out);
}

/// `function` of every `x[i]` into `out[i]` with this CPU's fastest lane code
/// ([`Backend::detect`]); the same bits as one value at a time.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn lanes_slice(function: LaneFunction, x: &[f64], out: &mut [f64]) {
    lanes_slice_with(Backend::detect(), function, x, out);
}

/// The lane loop: [`LANES`] values at a time through the lane form, the marked lanes and
/// the remainder through the scalar function.
#[inline(always)]
fn run(function: LaneFunction, x: &[f64], out: &mut [f64]) {
    let scalar = function.scalar();
    let mut chunks = x.chunks_exact(LANES).zip(out.chunks_exact_mut(LANES));
    for (x, out) in &mut chunks {
        let x: &[f64; LANES] = x.try_into().expect("LANES lanes");
        let out: &mut [f64; LANES] = out.try_into().expect("LANES lanes");
        // Direct calls (not a function value), so that each lane form is inlined into
        // the caller compiled for the backend's target features.
        let rare = match function {
            LaneFunction::Exp => exp_lanes(x, out),
            LaneFunction::Log => log_lanes(x, out),
            LaneFunction::Erf => erf_lanes(x, out),
            LaneFunction::Sigmoid => sigmoid_lanes(x, out),
            LaneFunction::Tanh => tanh_lanes(x, out),
            LaneFunction::Softplus => softplus_lanes(x, out),
            LaneFunction::Sin => elementary::trig_lanes(x, out, false),
            LaneFunction::Cos => elementary::trig_lanes(x, out, true),
            LaneFunction::Expm1 => elementary::expm1_lanes(x, out),
            LaneFunction::Log1p => elementary::log1p_lanes(x, out),
        };
        if rare.contains(&true) {
            for ((slot, &v), rare) in out.iter_mut().zip(x).zip(rare) {
                if rare {
                    *slot = scalar(v);
                }
            }
        }
    }
    let rest = x.len() / LANES * LANES;
    for (slot, &v) in out[rest..].iter_mut().zip(&x[rest..]) {
        *slot = scalar(v);
    }
}

/// [`super::exp`] of every lane into `out`; the lanes it marks `true` are to be
/// recomputed ([`exp_lane`]).
#[allow(clippy::needless_range_loop)] // lanes indexed in step: the form that vectorizes
#[inline(always)]
fn exp_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    let mut rare = [false; LANES];
    for i in 0..LANES {
        (out[i], rare[i]) = exp_lane(x[i]);
    }
    rare
}

/// [`super::exp`] of `x`, and whether it is to be recomputed by the scalar function
/// (non-finite, `|x| >= 709.78`, or a subnormal result's `k < -1021`).
#[inline(always)]
fn exp_lane(x: f64) -> (f64, bool) {
    use super::{INVLN2, LN2_HI, LN2_LO, P1, P2, P3, P4, P5};
    let hx = ((x.to_bits() >> 32) as u32) & 0x7fff_ffff;
    let negative = x.is_sign_negative();
    // The scalar `k`: 0 up to 0.5 ln2, +-1 up to 1.5 ln2, then the rounded quotient.
    let half = if negative { -0.5 } else { 0.5 };
    let quotient = (INVLN2 * x + half).trunc();
    let one = if negative { -1.0 } else { 1.0 };
    let k = if hx <= 0x3fd6_2e42 {
        0.0
    } else if hx < 0x3FF0_A2B2 {
        one
    } else {
        quotient
    };
    // `x - LN2_HI_PM[xsb]` is `x - k * LN2_HI` for `k = +-1` (the product is exact),
    // and `LN2_LO_PM[xsb]` is `k * LN2_LO`.
    let hi = x - k * LN2_HI;
    let lo = k * LN2_LO;
    let r = if hx <= 0x3fd6_2e42 { x } else { hi - lo };
    let t = r * r;
    let c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
    let unscaled = 1.0 - ((r * c) / (c - 2.0) - r);
    let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    let value = if k == 0.0 {
        unscaled
    } else {
        add_to_exponent(y, k)
    };
    let value = if hx < 0x3e30_0000 { 1.0 + x } else { value };
    (value, hx >= 0x4086_2E42 || k < -1021.0)
}

/// [`super::erf`] of every lane into `out`: each lane evaluates all four of fdlibm's
/// intervals and selects its own; the lanes it marks `true` (non-finite or `|x| <
/// 2^-1015`, or an `exp` lane of its own marked) are to be recomputed.
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `exp_lanes`
#[inline(always)]
fn erf_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    // Each interval in a loop of its own, then one loop of selects: in one loop body
    // the compiler's cost model keeps them scalar.
    let mut central = [0.0; LANES];
    let mut near_one = [0.0; LANES];
    let mut tail = [0.0; LANES];
    let mut tail_rare = [false; LANES];
    for i in 0..LANES {
        central[i] = erf_central(x[i]);
    }
    for i in 0..LANES {
        near_one[i] = erf_near_one(x[i]);
    }
    for i in 0..LANES {
        (tail[i], tail_rare[i]) = erf_tail(x[i]);
    }
    let mut rare = [false; LANES];
    for i in 0..LANES {
        let x = x[i];
        let ix = ((x.to_bits() >> 32) as u32) & 0x7fff_ffff;
        let saturated = if x.is_sign_negative() {
            super::TINY - 1.0
        } else {
            1.0 - super::TINY
        };
        out[i] = if ix < 0x3e30_0000 {
            x + super::EFX * x
        } else if ix < 0x3feb_0000 {
            central[i]
        } else if ix < 0x3ff4_0000 {
            near_one[i]
        } else if ix >= 0x4018_0000 {
            saturated
        } else {
            tail[i]
        };
        let tail_taken = (0x3ff4_0000..0x4018_0000).contains(&ix);
        rare[i] = !(0x0080_0000..0x7ff0_0000).contains(&ix) || (tail_taken && tail_rare[i]);
    }
    rare
}

/// [`super::erf`] for `2^-28 <= |x| < 0.84375`.
#[inline(always)]
fn erf_central(x: f64) -> f64 {
    use super::{PP0, PP1, PP2, PP3, PP4, QQ1, QQ2, QQ3, QQ4, QQ5};
    let z = x * x;
    let r = PP0 + z * (PP1 + z * (PP2 + z * (PP3 + z * PP4)));
    let s = 1.0 + z * (QQ1 + z * (QQ2 + z * (QQ3 + z * (QQ4 + z * QQ5))));
    let y = r / s;
    x + x * y
}

/// [`super::erf`] for `0.84375 <= |x| < 1.25`.
#[inline(always)]
fn erf_near_one(x: f64) -> f64 {
    use super::{ERX, PA0, PA1, PA2, PA3, PA4, PA5, PA6, QA1, QA2, QA3, QA4, QA5, QA6};
    let s = x.abs() - 1.0;
    let p = PA0 + s * (PA1 + s * (PA2 + s * (PA3 + s * (PA4 + s * (PA5 + s * PA6)))));
    let q = 1.0 + s * (QA1 + s * (QA2 + s * (QA3 + s * (QA4 + s * (QA5 + s * QA6)))));
    if !x.is_sign_negative() {
        ERX + p / q
    } else {
        -ERX - p / q
    }
}

/// [`super::erf`] for `1.25 <= |x| < 6`, and whether one of its `exp` lanes is marked.
#[inline(always)]
fn erf_tail(x: f64) -> (f64, bool) {
    use super::{RA0, RA1, RA2, RA3, RA4, RA5, RA6, RA7, RB0, RB1, RB2, RB3, RB4, RB5, RB6};
    use super::{SA1, SA2, SA3, SA4, SA5, SA6, SA7, SA8, SB1, SB2, SB3, SB4, SB5, SB6, SB7};
    let positive = !x.is_sign_negative();
    let ix = ((x.to_bits() >> 32) as u32) & 0x7fff_ffff;
    let x = x.abs();
    let s = 1.0 / (x * x);
    let ra = RA0 + s * (RA1 + s * (RA2 + s * (RA3 + s * (RA4 + s * (RA5 + s * (RA6 + s * RA7))))));
    let sa = 1.0
        + s * (SA1
            + s * (SA2 + s * (SA3 + s * (SA4 + s * (SA5 + s * (SA6 + s * (SA7 + s * SA8)))))));
    let rb = RB0 + s * (RB1 + s * (RB2 + s * (RB3 + s * (RB4 + s * (RB5 + s * RB6)))));
    let sb = 1.0 + s * (SB1 + s * (SB2 + s * (SB3 + s * (SB4 + s * (SB5 + s * (SB6 + s * SB7))))));
    let (r, ss) = if ix < 0x4006_DB6E { (ra, sa) } else { (rb, sb) };
    let z = f64::from_bits(x.to_bits() & 0xffff_ffff_0000_0000);
    let (e1, rare1) = exp_lane(-z * z - 0.5625);
    let (e2, rare2) = exp_lane((z - x) * (z + x) + r / ss);
    let r = e1 * e2;
    let value = if positive { 1.0 - r / x } else { r / x - 1.0 };
    (value, rare1 || rare2)
}

/// [`super::sigmoid`] of every lane into `out`: both quotients per lane, one select; the
/// lanes it marks `true` (NaN and `|x| > 40`, the scalar function's other branches) are
/// to be recomputed.
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `exp_lanes`
#[inline(always)]
fn sigmoid_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    use super::compensated::{div_dd, exp_parts, fast_two_sum};
    let mut rare = [false; LANES];
    for i in 0..LANES {
        let x = x[i];
        let (k, h, l) = exp_parts(-x.abs());
        let s = super::two_pow(k);
        let (e_h, e_l) = (h * s, l * s);
        let (d_h, d_l) = fast_two_sum(1.0, e_h);
        let upper = div_dd(1.0, 0.0, d_h, d_l + e_l);
        let lower = div_dd(e_h, e_l, d_h, d_l + e_l);
        out[i] = if x >= 0.0 { upper } else { lower };
        rare[i] = !(-40.0..=40.0).contains(&x);
    }
    rare
}

/// [`super::tanh`] of every lane into `out`; the lanes it marks `true` (NaN, `|x| >= 22`
/// and `|x| < 2^-28`, the scalar function's other branches) are to be recomputed.
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `exp_lanes`
#[inline(always)]
fn tanh_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    use super::compensated::{div_dd, two_sum, TANH_TINY};
    let mut rare = [false; LANES];
    for i in 0..LANES {
        let x = x[i];
        let a = x.abs();
        let (e_h, e_l) = expm1_dd_lane(2.0 * a);
        let (d_h, d_l) = two_sum(e_h, 2.0);
        out[i] = div_dd(e_h, e_l, d_h, d_l + e_l).copysign(x);
        rare[i] = !(TANH_TINY..22.0).contains(&a);
    }
    rare
}

/// [`super::softplus`] of every lane into `out`: `log(1 + exp(-|x|))` by both of the
/// scalar function's forms (the Taylor series and the Newton step from `log1p`, whose
/// lane form is `elementary::lanes`'), one select; the lanes it marks `true` (NaN, `x <
/// -40`, and a Newton step whose `log1p` lane is marked) are to be recomputed.
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `exp_lanes`
#[inline(always)]
fn softplus_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    use super::compensated::{exp_parts, log1p_newton, log1p_small, two_sum};
    let mut rare = [false; LANES];
    for i in 0..LANES {
        let x = x[i];
        // The scalar function's `log1p_exp` argument: `x` up to 0, `-x` above.
        let y = if x <= 0.0 { x } else { -x };
        let (k, h, l) = exp_parts(y);
        let s = super::two_pow(k);
        let (a_h, a_l) = (h * s, l * s);
        let (y0, log1p_rare) = elementary::log1p_lane(a_h);
        let newton = log1p_newton(a_h, a_l, y0);
        let small = a_h < 0.03125;
        let (s_h, s_l) = if small { log1p_small(a_h, a_l) } else { newton };
        let (t_h, t_l) = two_sum(x, s_h);
        out[i] = if x > 20.0 {
            x
        } else if x <= 0.0 {
            s_h + s_l
        } else {
            t_h + (t_l + s_l)
        };
        rare[i] = x.is_nan() || x < -40.0 || (!small && log1p_rare);
    }
    rare
}

/// `compensated::expm1_dd` with its branch (`n == 0`) as a select: both values per lane.
#[inline(always)]
fn expm1_dd_lane(x: f64) -> (f64, f64) {
    use super::compensated::{exp_reduced, expm1_reduced, fast_two_sum, reduce, two_sum};
    let (n, r_h, r_l) = reduce(x);
    let near_zero = expm1_reduced(r_h, r_l);
    let (k, h, l) = exp_reduced(n, r_h, r_l);
    let s = super::two_pow(k);
    let (e_h, e_l) = two_sum(h * s, -1.0);
    let away = fast_two_sum(e_h, e_l + l * s);
    if n == 0 {
        near_zero
    } else {
        away
    }
}

/// [`super::log`] of every lane into `out`; the lanes it marks `true` (zero, negative,
/// subnormal or non-finite `x`, and `|f| < 2^-20`) are to be recomputed.
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `exp_lanes`
#[inline(always)]
fn log_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    use super::{LG1, LG2, LG3, LG4, LG5, LG6, LG7, LN2_HI, LN2_LO};
    let mut rare = [false; LANES];
    for i in 0..LANES {
        let bits = x[i].to_bits();
        let high = (bits >> 32) as u32 as i32;
        let hx = high & 0x000f_ffff;
        let normalizer = (hx + 0x95f64) & 0x0010_0000;
        let k = (high >> 20) - 1023 + (normalizer >> 20);
        let scaled = ((hx | (normalizer ^ 0x3ff0_0000)) as u32 as u64) << 32;
        let f = f64::from_bits(scaled | (bits & 0xffff_ffff)) - 1.0;
        let s = f / (2.0 + f);
        let dk = f64::from(k);
        let z = s * s;
        let w = z * z;
        let t1 = w * (LG2 + w * (LG4 + w * LG6));
        let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
        let far = ((hx - 0x6147a) | (0x6b851 - hx)) > 0;
        let r = t2 + t1;
        let hfsq = 0.5 * f * f;
        let far_k0 = f - (hfsq - s * (hfsq + r));
        let far_k = dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f);
        let near_k0 = f - s * (f - r);
        let near_k = dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f);
        out[i] = match (far, k == 0) {
            (true, true) => far_k0,
            (true, false) => far_k,
            (false, true) => near_k0,
            (false, false) => near_k,
        };
        rare[i] = !(0x0010_0000..0x7ff0_0000).contains(&high) || (0x000f_ffff & (2 + hx)) < 3;
    }
    rare
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// SplitMix64 (Steele, Lea, Flood 2014): reproducible test inputs, no dependency.
    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `v` and its neighbours up to 4 ulp away, of both signs.
    fn around(v: f64, into: &mut Vec<f64>) {
        for k in -4i64..=4 {
            let w = f64::from_bits(v.abs().to_bits().wrapping_add_signed(k));
            into.extend([w, -w]);
        }
    }

    /// The binary64s whose high word is `high`, at the ends of its low word.
    fn high_word(high: u32, into: &mut Vec<f64>) {
        around(f64::from_bits(u64::from(high) << 32), into);
        around(f64::from_bits((u64::from(high) << 32) | 0xffff_ffff), into);
    }

    /// Every special value and the switch points of both functions' branches.
    fn edges() -> Vec<f64> {
        let mut all = vec![f64::NAN, -f64::NAN, f64::from_bits(0x7ff0_0000_0000_0001)];
        for v in [
            0.0,
            f64::INFINITY,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            1.0,
            0.5,
        ] {
            around(v, &mut all);
        }
        // exp: the thresholds of `hx` (0.5 ln2, 1.5 ln2, 2^-28, 709.78), the overflow and
        // underflow limits, and every midpoint `(k + 1/2) ln2` where `k` changes.
        for high in [
            0x3fd6_2e42,
            0x3fd6_2e43,
            0x3FF0_A2B2,
            0x3FF0_A2B1,
            0x3e30_0000,
        ] {
            high_word(high, &mut all);
        }
        for high in [0x4086_2E42, 0x4086_2E41, 0x4087_4910] {
            high_word(high, &mut all);
        }
        // erf: its intervals' ends (2^-1015, 2^-28, 0.84375, 1.25, 1/0.35, 6).
        for high in [
            0x0080_0000,
            0x3e30_0000,
            0x3feb_0000,
            0x3ff4_0000,
            0x4006_DB6E,
            0x4018_0000,
        ] {
            high_word(high, &mut all);
            high_word(high - 1, &mut all);
        }
        for v in [7.09782712893383973096e+02, -7.45133219101941108420e+02] {
            around(v, &mut all);
        }
        // sigmoid and tanh: their lane ranges' ends and the switches of their reduction
        // `n = rint(x 8/ln2)` (tanh's argument is `2|x|`).
        for v in [40.0, 22.0, super::super::compensated::TANH_TINY] {
            around(v, &mut all);
        }
        for n in -400..400 {
            let switch = (f64::from(n) + 0.5) * std::f64::consts::LN_2 / 8.0;
            around(switch, &mut all);
            around(switch / 2.0, &mut all);
        }
        for k in -1080..1030 {
            around((f64::from(k) + 0.5) * std::f64::consts::LN_2, &mut all);
        }
        trig_edges(&mut all);
        expm1_log1p_edges(&mut all);
        // log: every power of two, the normalizer's switch near sqrt(2), the two
        // formulas' switches and the `|f| < 2^-20` test.
        for e in -1074..1024 {
            around(2f64.powi(e), &mut all);
            for m in [
                0x95f64u32, 0x6a09e, 0x6147a, 0x6b851, 0xffffd, 0x00002, 0x00003,
            ] {
                let high = (((e + 1023).clamp(1, 2046) as u32) << 20) | (0x0010_0000 - m);
                high_word(high & 0x7fff_ffff, &mut all);
                high_word((((e + 1023).clamp(1, 2046) as u32) << 20) | m, &mut all);
            }
        }
        all
    }

    /// The switch points of `sin`/`cos`: their tiny and `pi/4` thresholds, every test of
    /// `rem_pio2` (the small multiples, their exceptions near `pi/2` and `2pi/2`, the
    /// medium path's second and third rounds: the binary64s nearest multiples of `pi/2`,
    /// where the first round cancels), the ends of the medium path and `TRIG_MAX`.
    fn trig_edges(all: &mut Vec<f64>) {
        for high in [
            0x3e40_0000,
            0x3e46_a09e,
            0x3fe9_21fb,
            0x4002_d97c,
            0x400f_6a7a,
            0x4012_d97c,
            0x4015_fdbc,
            0x4019_21fb,
            0x401c_463b,
            0x4139_21fb,
        ] {
            high_word(high, all);
            high_word(high + 1, all);
        }
        for low in 0..16u64 {
            // |x| ~= pi/2 and 2pi/2 with any low bits (the small path's exceptions).
            around(f64::from_bits(0x3ff9_21fb_0000_0000 | (low << 28)), all);
            around(f64::from_bits(0x4009_21fb_0000_0000 | (low << 28)), all);
        }
        around(super::super::TRIG_MAX, all);
        for n in (1..64).chain((1..4096).map(|k| k * 256)) {
            around(f64::from(n) * std::f64::consts::FRAC_PI_2, all);
        }
        // Arguments whose first round cancels about `bits` bits, around the switches of
        // the second (16) and third (49) rounds.
        let mut state = 43;
        for _ in 0..20_000 {
            let n = (splitmix(&mut state) >> 44) as f64; // up to 2^20
            let multiple = n * std::f64::consts::FRAC_PI_2;
            around(multiple, all);
            for bits in (12..22).chain(45..55) {
                let offset = multiple * 2f64.powi(-bits);
                around(multiple + offset, all);
                around(multiple - 1.5 * offset, all);
            }
        }
    }

    /// The switch points of `expm1` (`2^-54`, `0.5 ln2`, `1.5 ln2`, `56 ln2`, every `k`'s
    /// midpoint and the scalings' switches at `k = +-1, 2, 20, 56`) and `log1p` (`2^-54`,
    /// `2^-29`, `sqrt(2) - 1`, `sqrt(2)/2 - 1`, `-1`, `2^53`, the normalizer's switch and
    /// `|f| < 2^-20` around every power of two of `1 + x`).
    fn expm1_log1p_edges(all: &mut Vec<f64>) {
        for high in [
            0x3c90_0000,
            0x3fd6_2e42,
            0x3FF0_A2B2,
            0x4043_687A,
            0x3e20_0000,
            0x3FDA_827A,
            0x3fd2_bec4,
            0x3ff0_0000,
            0x4340_0000,
        ] {
            high_word(high, all);
            high_word(high - 1, all);
        }
        for k in -60..60 {
            around((f64::from(k) + 0.5) * std::f64::consts::LN_2, all);
        }
        for e in -60..60 {
            for m in [0x6a09eu32, 0x00001, 0xffffc, 0xffffd] {
                let one_plus_x = f64::from_bits((u64::from(((e + 1023) as u32) << 20 | m)) << 32);
                around(one_plus_x - 1.0, all);
                around(2f64.powi(e) - 1.0, all);
            }
        }
    }

    /// Random inputs: any bits, and the ranges programs feed each function.
    fn random(count: usize) -> Vec<f64> {
        let mut state = 40;
        let mut all = Vec::with_capacity(4 * count);
        for _ in 0..count {
            let w = splitmix(&mut state);
            all.push(f64::from_bits(w)); // any binary64
            let unit = (w >> 11) as f64 * 2f64.powi(-53);
            all.push(1500.0 * unit - 750.0); // exp's whole range
            all.push(f64::from((w >> 40) as f32 * 2f32.powi(-24))); // a float32 uniform
            all.push(40.0 * unit - 20.0); // a normal-ish activation
            all.push(2.0 * super::super::TRIG_MAX * (unit - 0.5)); // sin's whole range
            all.push(2.5 * unit - 1.0); // log1p's and expm1's ordinary range
        }
        all
    }

    /// Panics naming the first input where `backend`'s lanes differ from the scalar bits.
    fn lanes_equal_scalar(backend: Backend, function: LaneFunction, inputs: &[f64]) {
        let scalar = function.scalar();
        inputs.par_chunks(4099).for_each(|x| {
            let mut out = vec![0.0; x.len()];
            lanes_slice_with(backend, function, x, &mut out);
            for (&v, &got) in x.iter().zip(&out) {
                let want = scalar(v);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{backend:?} {function:?}({v:e}) = {got:e}, scalar {want:e}"
                );
            }
        });
    }

    const FUNCTIONS: [LaneFunction; 10] = [
        LaneFunction::Exp,
        LaneFunction::Log,
        LaneFunction::Erf,
        LaneFunction::Sigmoid,
        LaneFunction::Tanh,
        LaneFunction::Softplus,
        LaneFunction::Sin,
        LaneFunction::Cos,
        LaneFunction::Expm1,
        LaneFunction::Log1p,
    ];

    #[test]
    fn every_backend_gives_the_scalar_bits_on_edges_and_random_inputs() {
        let mut inputs = edges();
        inputs.extend(random(1 << 19));
        assert!(inputs.len() > 2_000_000);
        for backend in Backend::available() {
            for function in FUNCTIONS {
                lanes_equal_scalar(backend, function, &inputs);
            }
        }
    }

    /// The lane forms decide nearly every ordinary input themselves (else the tests
    /// above would check mostly the scalar fallback): uniform binary64s in `(-700, 700)`
    /// for `exp`, in `(0, 1000)` for `log`.
    #[test]
    fn the_lanes_decide_ordinary_inputs() {
        type Lanes = fn(&[f64; LANES], &mut [f64; LANES]) -> [bool; LANES];
        let mut state = 41;
        let unit: Vec<f64> = (0..1 << 14)
            .map(|_| ((splitmix(&mut state) >> 11) as f64 + 0.5) * 2f64.powi(-53))
            .collect();
        for (lanes, scale, shift, name) in [
            (exp_lanes as Lanes, 1400.0, -700.0, "exp"),
            (log_lanes as Lanes, 1000.0, 0.0, "log"),
            (erf_lanes as Lanes, 12.0, -6.0, "erf"),
            (sigmoid_lanes as Lanes, 80.0, -40.0, "sigmoid"),
            (tanh_lanes as Lanes, 44.0, -22.0, "tanh"),
            (softplus_lanes as Lanes, 60.0, -40.0, "softplus"),
            (
                |x, out| elementary::trig_lanes(x, out, false),
                2e6,
                -1e6,
                "sin",
            ),
            (
                |x, out| elementary::trig_lanes(x, out, true),
                20.0,
                -10.0,
                "cos",
            ),
            (elementary::expm1_lanes as Lanes, 76.0, -38.0, "expm1"),
            (elementary::log1p_lanes as Lanes, 1e6, -1.0, "log1p"),
        ] {
            let ordinary: Vec<f64> = unit.iter().map(|u| scale * u + shift).collect();
            let mut rare = 0;
            for x in ordinary.chunks_exact(LANES) {
                let mut out = [0.0; LANES];
                rare += lanes(x.try_into().expect("LANES lanes"), &mut out)
                    .iter()
                    .filter(|&&r| r)
                    .count();
            }
            assert!(rare * 1000 < ordinary.len(), "{name}: {rare} rare lanes");
        }
    }
}
