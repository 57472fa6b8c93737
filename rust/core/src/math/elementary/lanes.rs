//! Lane forms of [`super::sin`], [`super::cos`], [`super::expm1`] and [`super::log1p`]
//! for [`crate::math::lanes`]: each is the scalar port's operations, in the same order,
//! with every branch a lane may take computed and the scalar test selecting one (see that
//! module's comment for why the bits are the same). They live beside the scalar ports,
//! whose constants and kernels they share.
//!
//! What each leaves to the scalar function (its `rare` lanes): `sin`/`cos` of
//! non-finite arguments and of `|x| > TRIG_MAX` (which the scalar function answers with
//! NaN: there is no Payne-Hanek reduction to reproduce); `expm1` of `|x| >= 56 ln2` and
//! non-finite `x`; `log1p` of `x <= -1`, `x >= 2^53`, non-finite `x`, and the reduced
//! `|f| < 2^-20`.

use super::super::lane_primitives::{add_to_exponent, LANES, SHIFTER};
use super::{hi_word, kernel_cos, INVPIO2, PIO2_1, PIO2_1T, PIO2_2, PIO2_2T, PIO2_3, PIO2_3T};
use super::{INVLN2, LN2_HI, LN2_LO, LP1, LP2, LP3, LP4, LP5, LP6, LP7, Q1, Q2, Q3, Q4, Q5};
use super::{S1, S2, S3, S4, S5, S6, TRIG_MAX};

/// `x - n pi/2 = y0 + y1` as [`super::rem_pio2`] computes it, for a lane with `pi/4 <
/// |x| <= TRIG_MAX`; `(0, x, 0)` for `|x| <= pi/4` (the scalar functions' kernels on `x`
/// itself). `n` is an integer-valued binary64 (`|n| <= 2^20`). Both of `rem_pio2`'s paths
/// are computed, the multiple near zero and the medium path with all three of its rounds,
/// and its tests select one.
#[inline(always)]
fn reduce_lane(x: f64) -> (f64, f64, f64) {
    let hx = hi_word(x);
    let ix = hx & 0x7fff_ffff;
    // The small path: `n` is +-1..=+-4 by the thresholds of `rem_pio2`, except near a
    // multiple of pi/2, where it takes the medium path.
    let sign = if hx > 0 { 1.0 } else { -1.0 };
    let (small, multiple) = if ix <= 0x400f_6a7a {
        let multiple = if ix <= 0x4002_d97c { 1.0 } else { 2.0 };
        ((ix & 0xfffff) != 0x921fb, multiple)
    } else if ix <= 0x4015_fdbc {
        (ix != 0x4012_d97c, 3.0)
    } else {
        (ix <= 0x401c_463b && ix != 0x4019_21fb, 4.0)
    };
    let m = sign * multiple;
    let z = x - m * PIO2_1;
    let small_y0 = z - m * PIO2_1T;
    let small_y1 = (z - small_y0) - m * PIO2_1T;
    // The medium path (`super::medium`), its three rounds.
    const RINT: f64 = 6_755_399_441_055_744.0; // 2^52 + 2^51
    let fn_ = (x * INVPIO2 + RINT) - RINT;
    let r1 = x - fn_ * PIO2_1;
    let w1 = fn_ * PIO2_1T;
    let j = ix >> 20;
    let y0_1 = r1 - w1;
    let r2 = r1 - fn_ * PIO2_2;
    let w2 = fn_ * PIO2_2T - ((r1 - r2) - fn_ * PIO2_2);
    let y0_2 = r2 - w2;
    let r3 = r2 - fn_ * PIO2_3;
    let w3 = fn_ * PIO2_3T - ((r2 - r3) - fn_ * PIO2_3);
    let y0_3 = r3 - w3;
    let exponent = |y: f64| (hi_word(y) >> 20) & 0x7ff;
    let (r, w, y0) = if j - exponent(y0_1) <= 16 {
        (r1, w1, y0_1)
    } else if j - exponent(y0_2) <= 49 {
        (r2, w2, y0_2)
    } else {
        (r3, w3, y0_3)
    };
    let medium_y1 = (r - y0) - w;
    if ix <= 0x3fe9_21fb {
        (0.0, x, 0.0)
    } else if small {
        (m, small_y0, small_y1)
    } else {
        (fn_, y0, medium_y1)
    }
}

/// [`super::kernel_sin`] of `x + y` with its tail (`iy`) and, from the same polynomial,
/// without it (the form `sin` uses for `|x| <= pi/4`, where `y` is 0).
#[inline(always)]
fn kernel_sin_both(x: f64, y: f64) -> (f64, f64) {
    let z = x * x;
    let w = z * z;
    let r = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    let v = z * x;
    let with_tail = x - ((z * (0.5 * y - v * r) - y) - v * S1);
    let without = x + v * (S1 + z * r);
    (with_tail, without)
}

/// `n & 3` of an integer-valued binary64 `n` (`|n| < 2^51`), two's complement: the low
/// bits of `n + 2^52 + 2^51`.
#[inline(always)]
fn quadrant(n: f64) -> u64 {
    (n + SHIFTER).to_bits() & 3
}

/// [`super::sin`] (`cosine == false`) or [`super::cos`] of every lane into `out`; the
/// lanes it marks `true` (non-finite, or `|x| > TRIG_MAX`) are to be recomputed.
#[allow(clippy::needless_range_loop)] // lanes indexed in step: the form that vectorizes
#[inline(always)]
pub(in crate::math) fn trig_lanes(
    x: &[f64; LANES],
    out: &mut [f64; LANES],
    cosine: bool,
) -> [bool; LANES] {
    // The reduction in a loop of its own, then the kernels and selects (in one loop body
    // the compiler's cost model keeps the lanes scalar).
    let (mut n, mut y0, mut y1) = ([0.0; LANES], [0.0; LANES], [0.0; LANES]);
    for i in 0..LANES {
        (n[i], y0[i], y1[i]) = reduce_lane(x[i]);
    }
    let mut rare = [false; LANES];
    for i in 0..LANES {
        let ix = hi_word(x[i]) & 0x7fff_ffff;
        let (s, s_near_zero) = kernel_sin_both(y0[i], y1[i]);
        let c = kernel_cos(y0[i], y1[i]);
        // cos is sin a quadrant on: the same four kernels, shifted.
        // (a `match` on the quadrant would be branches; these are selects).
        let q = quadrant(n[i]) + u64::from(cosine);
        let value = if q & 1 == 0 { s } else { c };
        let value = if q & 2 == 0 { value } else { -value };
        out[i] = if cosine {
            if ix < 0x3e46_a09e {
                1.0
            } else {
                value
            }
        } else if ix < 0x3e40_0000 {
            x[i]
        } else if ix <= 0x3fe9_21fb {
            s_near_zero
        } else {
            value
        };
        rare[i] = x[i].is_nan() || x[i].abs() > TRIG_MAX;
    }
    rare
}

/// `2^k` for an integer-valued binary64 `k` in `-1022..=1023`.
#[inline(always)]
fn two_pow_lane(k: f64) -> f64 {
    add_to_exponent(1.0, k)
}

/// [`super::expm1`] of every lane into `out`; the lanes it marks `true` (`|x| >= 56 ln2`
/// and non-finite `x`, the scalar function's first branches) are to be recomputed.
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `trig_lanes`
#[inline(always)]
pub(in crate::math) fn expm1_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    let mut rare = [false; LANES];
    for i in 0..LANES {
        (out[i], rare[i]) = expm1_lane(x[i]);
    }
    rare
}

/// [`super::expm1`] of `x` and whether it is to be recomputed (`k` is the scalar `k` as
/// a binary64: `as i32` and [`f64::trunc`] agree below `2^31`).
#[inline(always)]
fn expm1_lane(x: f64) -> (f64, bool) {
    let hx = (hi_word(x) as u32) & 0x7fff_ffff;
    let negative = x.is_sign_negative();
    // Argument reduction: `k = +-1` up to 1.5 ln2, then the rounded quotient.
    let (hi_one, lo_one, k_one) = if negative {
        (x + LN2_HI, -LN2_LO, -1.0)
    } else {
        (x - LN2_HI, LN2_LO, 1.0)
    };
    let quotient = (INVLN2 * x + if negative { -0.5 } else { 0.5 }).trunc();
    let (hi, lo, k) = if hx < 0x3FF0_A2B2 {
        (hi_one, lo_one, k_one)
    } else {
        (x - quotient * LN2_HI, quotient * LN2_LO, quotient)
    };
    let reduced = hi - lo;
    let (x_r, c, k) = if hx > 0x3fd6_2e42 {
        (reduced, (hi - reduced) - lo, k)
    } else {
        (x, 0.0, 0.0)
    };
    // The primary range, then every scaling the scalar function chooses among by `k`.
    let hfx = 0.5 * x_r;
    let hxs = x_r * hfx;
    let r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
    let t = 3.0 - r1 * hfx;
    let e = hxs * ((r1 - t) / (6.0 - x_r * t));
    let at_zero = x_r - (x_r * e - hxs);
    let e = (x_r * (e - c) - c) - hxs;
    let at_minus_one = 0.5 * (x_r - e) - 0.5;
    let at_one = if x_r < -0.25 {
        -2.0 * (e - (x_r + 0.5))
    } else {
        1.0 + 2.0 * (x_r - e)
    };
    let scale = two_pow_lane(k);
    let far = (1.0 - (e - x_r)) * scale - 1.0;
    // `1 - 2^-k`, exact: the scalar function's `t` built in the high word.
    let below_20 = ((1.0 - two_pow_lane(-k)) - (e - x_r)) * scale;
    let from_20 = ((x_r - (e + two_pow_lane(-k))) + 1.0) * scale;
    let value = if k == 0.0 {
        at_zero
    } else if k == -1.0 {
        at_minus_one
    } else if k == 1.0 {
        at_one
    } else if k <= -2.0 || k > 56.0 {
        far
    } else if k < 20.0 {
        below_20
    } else {
        from_20
    };
    let value = if hx < 0x3c90_0000 { x } else { value };
    (value, hx >= 0x4043_687A)
}

/// [`super::log1p`] of every lane into `out`; the lanes it marks `true` are to be
/// recomputed (module comment).
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `trig_lanes`
#[inline(always)]
pub(in crate::math) fn log1p_lanes(x: &[f64; LANES], out: &mut [f64; LANES]) -> [bool; LANES] {
    let mut rare = [false; LANES];
    for i in 0..LANES {
        (out[i], rare[i]) = log1p_lane(x[i]);
    }
    rare
}

/// [`super::log1p`] of `x` and whether it is to be recomputed.
#[inline(always)]
pub(in crate::math) fn log1p_lane(x: f64) -> (f64, bool) {
    let hx = hi_word(x);
    let ax = hx & 0x7fff_ffff;
    // `1 + x` near 1: `f = x` with `k = 0` (and no correction).
    let unreduced = hx < 0x3FDA_827A && (hx > 0 || hx <= 0xbfd2_bec4_u32 as i32);
    // Else `1 + x = 2^k (1 + f)` with the correction `c` for the rounding of `u = 1 + x`.
    let u = 1.0 + x;
    let hu = hi_word(u);
    let k = (hu >> 20) - 1023;
    let c = (if k > 0 { 1.0 - (u - x) } else { x - (u - 1.0) }) / u;
    let hu = hu & 0x000f_ffff;
    let (k, normalized, hu) = if hu < 0x6a09e {
        (k, hu | 0x3ff0_0000, hu)
    } else {
        (k + 1, hu | 0x3fe0_0000, (0x0010_0000 - hu) >> 2)
    };
    let u = f64::from_bits((u64::from(normalized as u32) << 32) | (u.to_bits() & 0xffff_ffff));
    let (f, k, c, hu) = if unreduced {
        (x, 0, 0.0, 1)
    } else {
        (u - 1.0, k, c, hu)
    };
    let hfsq = 0.5 * f * f;
    let dk = f64::from(k);
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * (LP1 + z * (LP2 + z * (LP3 + z * (LP4 + z * (LP5 + z * (LP6 + z * LP7))))));
    let value = if k == 0 {
        f - (hfsq - s * (hfsq + r))
    } else {
        dk * LN2_HI - ((hfsq - (s * (hfsq + r) + (dk * LN2_LO + c))) - f)
    };
    let value = if ax < 0x3c90_0000 {
        x
    } else if ax < 0x3e20_0000 {
        x - x * x * 0.5
    } else {
        value
    };
    // x <= -1 (and negative NaN), x >= 2^53 (and +inf, positive NaN), |f| < 2^-20.
    let rare = (hx < 0x3FDA_827A && ax >= 0x3ff0_0000) || hx >= 0x4340_0000 || hu == 0;
    (value, rare)
}
