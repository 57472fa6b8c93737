//! `tanh`, `sigmoid`, `softplus` and `rsqrt` of init programs (stream-format.md §7),
//! each within 1 ulp: the value is carried as a double-double (an unevaluated sum
//! `hi + lo` of two binary64 numbers) through every step that would otherwise round,
//! and rounded once at the end.
//!
//! Like the rest of [`crate::math`], each function is a fixed sequence of IEEE-754
//! binary64 operations (`+ - * /`, `sqrt`, comparisons, bit manipulation), with no libm
//! call and no fused multiply-add: the extra precision comes from error-free
//! transformations, Knuth's TwoSum, Dekker's FastTwoSum and Dekker's product with
//! Veltkamp splitting (T. J. Dekker, "A floating-point technique for extending the
//! available precision", Numer. Math. 18, 1971; D. E. Knuth, TAOCP vol. 2, §4.2.2).
//!
//! The common part is [`exp_parts`], `exp(x) = 2^k (h + l)` with a relative error
//! below `2^-66`: `x = n ln2/8 + r` (`ln2/8` in three pieces, so `r` is exact to
//! `2^-110`), `exp(r) - 1` by its Taylor series to degree 10 (`|r| <= 0.0434`: the
//! truncation is below `2^-74`), whose terms of degree 1 and 2 are double-doubles,
//! times `2^(j/8)` from a table of double-doubles (`j = n mod 8`, `k = n div 8`).
//! The constants were computed with mpmath at 300 bits (`mpmath.log(2) / 8` and
//! `mpmath.power(2, j/8)`, split by rounding to 36 and 53 significant bits); the tests
//! check them without mpmath.

// The table entries are written as their bit patterns, the decimals beside them.
#![allow(clippy::unreadable_literal)]

use super::{log1p, two_pow, two_prod};

/// `a + b = s + e` exactly, for any finite `a`, `b` (Knuth's TwoSum).
#[inline]
pub(super) fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// `a + b = s + e` exactly when `a == 0` or `|a| >= |b|` (Dekker's FastTwoSum).
#[inline]
pub(super) fn fast_two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    (s, b - (s - a))
}

/// `(a_h + a_l) / (b_h + b_l)` rounded once: the quotient `q` of the high parts plus
/// the exactly computed remainder `a - q*b` divided by `b_h` (`a_h - q*b_h` is exact:
/// Dekker's product and Sterbenz's lemma).
#[inline]
pub(super) fn div_dd(a_h: f64, a_l: f64, b_h: f64, b_l: f64) -> f64 {
    let q = a_h / b_h;
    let (p, e) = two_prod(q, b_h);
    q + ((((a_h - p) - e) + a_l) - q * b_l) / b_h
}

// ---------------------------------------------------------------------------------
// exp as a double-double
// ---------------------------------------------------------------------------------

/// `8 / ln2` rounded (11.541560327111707).
const INV_LN2_8: f64 = f64::from_bits(0x4027_1547_652b_82fe);
/// `ln2 / 8` rounded to 36 significant bits (0.08664339756978734): `n * LN2_8_1` is
/// exact for `|n| < 2^17`.
const LN2_8_1: f64 = f64::from_bits(0x3fb6_2e42_fefa_0000);
/// `ln2/8 - LN2_8_1` rounded to 36 significant bits (2.0582436978583079e-13).
const LN2_8_2: f64 = f64::from_bits(0x3d4c_f79a_bc9e_0000);
/// `ln2/8 - LN2_8_1 - LN2_8_2` rounded (3.827300920023315e-25); the three sum to
/// `ln2/8` within `1.4e-42`.
const LN2_8_3: f64 = f64::from_bits(0x3add_9cc0_1f97_b57a);
/// `1.5 * 2^52`: `(t + ROUND) - ROUND` is `t` rounded to an integer (ties to even) for
/// `|t| < 2^51`.
const ROUND: f64 = 6755399441055744.0;

/// `2^(j/8) = hi + lo` for `j = 0..8` (mpmath: `hi` the rounded value, `lo` the rounded
/// rest; `|2^(j/8) - hi - lo| < 2^-107 * 2^(j/8)`).
const TWO_POW_J8: [(f64, f64); 8] = [
    (1.0, 0.0),
    // 1.0905077326652577, -3.046782079812471e-17
    (
        f64::from_bits(0x3ff172b83c7d517b),
        f64::from_bits(0xbc819041b9d78a76),
    ),
    // 1.189207115002721, 3.982015231465646e-17
    (
        f64::from_bits(0x3ff306fe0a31b715),
        f64::from_bits(0x3c86f46ad23182e4),
    ),
    // 1.2968395546510096, 2.5382502794888315e-17
    (
        f64::from_bits(0x3ff4bfdad5362a27),
        f64::from_bits(0x3c7d4397afec42e2),
    ),
    // 1.4142135623730951, -9.667293313452913e-17
    (
        f64::from_bits(0x3ff6a09e667f3bcd),
        f64::from_bits(0xbc9bdd3413b26456),
    ),
    // 1.5422108254079407, 7.949834809697621e-17
    (
        f64::from_bits(0x3ff8ace5422aa0db),
        f64::from_bits(0x3c96e9f156864b27),
    ),
    // 1.681792830507429, 8.199010020581497e-17
    (
        f64::from_bits(0x3ffae89f995ad3ad),
        f64::from_bits(0x3c97a1cd345dcc81),
    ),
    // 1.8340080864093424, 3.283107224245627e-17
    (
        f64::from_bits(0x3ffd5818dcfba487),
        f64::from_bits(0x3c82ed02d75b3707),
    ),
];

/// The Taylor coefficients `1/i!` of `exp`, `i = 3..=10`, each one correctly rounded
/// division of integers.
const EXP_TAYLOR: [f64; 8] = [
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362880.0,
    1.0 / 3628800.0,
];

/// `c[0] + x * (c[1] + x * (c[2] + ...))` (Horner's rule, from the last coefficient).
#[inline]
fn horner(c: &[f64], x: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &c| c + x * acc)
}

/// `x = n * ln2/8 + (r_h + r_l)` with `n = rint(x * 8/ln2)` and `|r_h + r_l| < 0.0434`,
/// for `|x| <= 746`. `x - n*LN2_8_1` is exact (`n*LN2_8_1` is, and it lies within a
/// factor 2 of `x`: Sterbenz), the second piece is subtracted with TwoSum, so
/// `r_h + r_l` differs from `x - n ln2/8` by the roundings of `n*LN2_8_3` and of its
/// subtraction from the low part (`< 2^-110`).
#[inline]
pub(super) fn reduce(x: f64) -> (i32, f64, f64) {
    let t = (x * INV_LN2_8 + ROUND) - ROUND;
    let a = x - t * LN2_8_1;
    let (r_h, r_l) = two_sum(a, -(t * LN2_8_2));
    let (r_h, r_l) = two_sum(r_h, r_l - t * LN2_8_3);
    (t as i32, r_h, r_l)
}

/// `exp(r) - 1 = hi + lo` for `|r| < 0.0434` (`r = r_h + r_l`, `|r_l| <= ulp(r_h)`):
/// `r + r^2/2` as double-doubles (Dekker's square) plus the Taylor terms of degree 3
/// to 10 in binary64 (Horner); relative error below `2^-66`.
#[inline]
pub(super) fn expm1_reduced(r_h: f64, r_l: f64) -> (f64, f64) {
    let (sq_h, sq_l) = two_prod(r_h, r_h);
    let sq_l = sq_l + 2.0 * r_h * r_l;
    let cube = r_h * sq_h * horner(&EXP_TAYLOR, r_h);
    let (s_h, s_l) = fast_two_sum(r_h, 0.5 * sq_h);
    fast_two_sum(s_h, s_l + (r_l + (0.5 * sq_l + cube)))
}

/// `exp(x) = 2^k * (h + l)`, `0.95 < h < 1.92`, `|l| <= ulp(h)/2`, relative error below
/// `2^-66`, for `|x| <= 746` (the caller keeps `x` there; `k` is then in
/// `-1077..=1076`): [`reduce`], [`expm1_reduced`], then `2^(j/8) * (1 + p)` as a
/// double-double.
#[inline]
pub(super) fn exp_parts(x: f64) -> (i32, f64, f64) {
    let (n, r_h, r_l) = reduce(x);
    exp_reduced(n, r_h, r_l)
}

/// [`exp_parts`] from [`reduce`]'s `n, r_h, r_l`.
#[inline]
pub(super) fn exp_reduced(n: i32, r_h: f64, r_l: f64) -> (i32, f64, f64) {
    let (p_h, p_l) = expm1_reduced(r_h, r_l);
    let (t_h, t_l) = TWO_POW_J8[(n & 7) as usize];
    let (m_h, m_l) = two_prod(t_h, p_h);
    let (h, e) = fast_two_sum(t_h, m_h);
    let (h, l) = fast_two_sum(h, e + (m_l + (t_l + (t_h * p_l + t_l * p_h))));
    (n >> 3, h, l)
}

/// `exp(x) - 1 = hi + lo` for `2^-27 <= x < 44`, relative error below `2^-62`:
/// [`expm1_reduced`] when `n = 0` (`|x| < ln2/16`, where `exp(x) - 1` would cancel),
/// else `2^k h - 1` by TwoSum plus `2^k l`.
fn expm1_dd(x: f64) -> (f64, f64) {
    let (n, r_h, r_l) = reduce(x);
    if n == 0 {
        return expm1_reduced(r_h, r_l);
    }
    let (k, h, l) = exp_reduced(n, r_h, r_l);
    let s = two_pow(k);
    let (e_h, e_l) = two_sum(h * s, -1.0);
    fast_two_sum(e_h, e_l + l * s)
}

/// `2^-1074`, the smallest subnormal.
const TWO_M1074: f64 = f64::from_bits(1);
/// `2^52`.
const TWO52: f64 = 4503599627370496.0;

/// `(h + l) * 2^k` rounded once to binary64, for `0.9 < h < 2`, `|l| <= ulp(h)/2` and
/// `-1077 <= k <= 1022` (the low end is where [`exp_parts`] stops). Normal results are
/// the rounded `h + l` scaled exactly. Below `2^-1021` binary64 is spaced `2^-1074`, so
/// `m + ml = (h + l) * 2^(k + 1074)` (both products exact) is rounded to an integer `n`,
/// ties to even, and the result is `n * 2^-1074` (exact): one rounding where
/// `(h + l) * 2^k` would round twice.
fn scale(h: f64, l: f64, k: i32) -> f64 {
    if k >= -1021 {
        return (h + l) * two_pow(k);
    }
    let s = two_pow(k + 1074);
    let (m, ml) = (h * s, l * s);
    // n = m rounded to an integer (ties to even; m < 2^53, an integer from 2^52 on) and
    // d = m - n, both exact. d is a multiple of ulp(m) and |ml| <= ulp(m)/2, so m + ml
    // rounds to n but for a tie of m (|d| = 1/2) that ml breaks, or a tie m + ml
    // itself (m an integer, |ml| = 1/2 = ulp(m)/2) that goes to even.
    let n = if m >= TWO52 { m } else { (m + TWO52) - TWO52 };
    let d = m - n;
    let odd = (n as u64) & 1 == 1;
    let n = if (d == 0.5 && ml > 0.0) || (ml == 0.5 && odd) {
        n + 1.0
    } else if (d == -0.5 && ml < 0.0) || (ml == -0.5 && odd) {
        n - 1.0
    } else {
        n
    };
    n * TWO_M1074
}

/// `exp(x) * (1 - c * exp(x))` rounded once, for `-746 <= x < -40` (`exp(x) < 2^-57`,
/// so the next term, `exp(x)^2`, is below `2^-114` relative): the left tails of
/// [`sigmoid`] (`c = 1`) and [`softplus`] (`c = 1/2`), subnormal from `x = -708.4` on.
fn left_tail(x: f64, c: f64) -> f64 {
    let (k, h, l) = exp_parts(x);
    // exp(x) itself, to scale the correction; below 2^-1021 the correction is below
    // 2^-1021 relative, far below l, and left out.
    let e = if k >= -1021 { h * two_pow(k) } else { 0.0 };
    let (h, l) = fast_two_sum(h, l - c * h * e);
    scale(h, l, k)
}

// ---------------------------------------------------------------------------------
// The functions
// ---------------------------------------------------------------------------------

/// `2^-28`: below it `tanh(x)` rounds to `x` (`tanh(x) = x - x^3/3 + ...`, a relative
/// change below `2^-57.5`).
pub(super) const TANH_TINY: f64 = 3.725290298461914e-9;

/// Hyperbolic tangent within 1 ulp (measured 0.50, stream-format.md §7): `x` for
/// `|x| < 2^-28`; `+-1` from `|x| >= 22` on (`1 - tanh(22) < 2^-62`); in between
/// `sign(x) * E / (E + 2)` with `E = expm1(2|x|)` a double-double (`expm1_dd`),
/// `E + 2` by TwoSum and the quotient corrected by its exact remainder. `tanh(+-inf) =
/// +-1`, `tanh(NaN) = NaN`, `tanh(-0) = -0`.
pub fn tanh(x: f64) -> f64 {
    let a = x.abs();
    if x.is_nan() {
        return x;
    }
    if a >= 22.0 {
        return 1f64.copysign(x);
    }
    if a < TANH_TINY {
        return x;
    }
    let (e_h, e_l) = expm1_dd(2.0 * a);
    let (d_h, d_l) = two_sum(e_h, 2.0);
    div_dd(e_h, e_l, d_h, d_l + e_l).copysign(x)
}

/// The logistic function `1 / (1 + exp(-x))` within 1 ulp (measured 0.50,
/// stream-format.md §7). With `e = exp(-|x|)` a double-double (`exp_parts`) and
/// `1 + e` by FastTwoSum, `1 / (1 + e)` for `x >= 0` and `e / (1 + e)` for `x < 0`,
/// each quotient corrected by its exact remainder; `1` above 40 (`1 - sigmoid(40) <
/// 2^-57`); `exp(x) (1 - exp(x))` rounded once below -40 (subnormal from about -708.4);
/// `0` below -746. `sigmoid(+inf) = 1`, `sigmoid(-inf) = 0`, `sigmoid(NaN) = NaN`.
pub fn sigmoid(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 40.0 {
        return 1.0;
    }
    if x < -746.0 {
        return 0.0; // below 2^-1076
    }
    if x < -40.0 {
        return left_tail(x, 1.0);
    }
    let (k, h, l) = exp_parts(-x.abs());
    let s = two_pow(k);
    let (e_h, e_l) = (h * s, l * s);
    let (d_h, d_l) = fast_two_sum(1.0, e_h); // e <= 1
    if x >= 0.0 {
        div_dd(1.0, 0.0, d_h, d_l + e_l)
    } else {
        div_dd(e_h, e_l, d_h, d_l + e_l)
    }
}

/// The Taylor coefficients `(-1)^(i+1) / i` of `log1p`, `i = 3..=14`, each one correctly
/// rounded division.
const LOG1P_TAYLOR: [f64; 12] = [
    1.0 / 3.0,
    -1.0 / 4.0,
    1.0 / 5.0,
    -1.0 / 6.0,
    1.0 / 7.0,
    -1.0 / 8.0,
    1.0 / 9.0,
    -1.0 / 10.0,
    1.0 / 11.0,
    -1.0 / 12.0,
    1.0 / 13.0,
    -1.0 / 14.0,
];

/// `log(1 + exp(y)) = hi + lo` for `-40 <= y <= 0`, relative error below `2^-60`.
/// With `a = exp(y)` a double-double ([`exp_parts`], `a <= 1`):
/// * `a < 2^-5`: the Taylor series ([`log1p_small`]);
/// * else one Newton step from `y0 = log1p(a_h)` ([`log1p_newton`]).
fn log1p_exp(y: f64) -> (f64, f64) {
    let (k, h, l) = exp_parts(y);
    let s = two_pow(k);
    let (a_h, a_l) = (h * s, l * s);
    if a_h < 0.03125 {
        return log1p_small(a_h, a_l);
    }
    log1p_newton(a_h, a_l, log1p(a_h))
}

/// `log(1 + a)` for `a = a_h + a_l < 2^-5`: the Taylor series `a - a^2/2 + a^3 (1/3 -
/// a/4 + ... - a^11/14)` (truncated below `2^-70` relative), `a - a^2/2` as
/// double-doubles.
#[inline]
pub(super) fn log1p_small(a_h: f64, a_l: f64) -> (f64, f64) {
    let (sq_h, sq_l) = two_prod(a_h, a_h);
    let sq_l = sq_l + 2.0 * a_h * a_l;
    let cube = a_h * sq_h * horner(&LOG1P_TAYLOR, a_h);
    let (s_h, s_l) = fast_two_sum(a_h, -0.5 * sq_h);
    fast_two_sum(s_h, s_l + (a_l + (cube - 0.5 * sq_l)))
}

/// `log(1 + a)` for `2^-5 <= a = a_h + a_l <= 1` by one Newton step from `y0 =
/// log1p(a_h)` (the msun port, within 1 ulp): `y0 + z` with `z = (1 + a) * exp(-y0) -
/// 1`, the product of double-doubles formed with Dekker's product, `1 + a` by
/// FastTwoSum (`log(1 + z) = z` to `2^-100`).
#[inline]
pub(super) fn log1p_newton(a_h: f64, a_l: f64, y0: f64) -> (f64, f64) {
    let (k, h, l) = exp_parts(-y0);
    let s = two_pow(k);
    let (e_h, e_l) = (h * s, l * s);
    let (v_h, v_l) = fast_two_sum(1.0, a_h);
    let v_l = v_l + a_l;
    let (p_h, p_e) = two_prod(v_h, e_h);
    // p_h is within a few ulp of 1: p_h - 1 is exact.
    let z = (p_h - 1.0) + (p_e + (v_h * e_l + v_l * e_h));
    fast_two_sum(y0, z)
}

/// `log(1 + exp(x))` within 1 ulp (measured 0.50, stream-format.md §7), with torch's
/// `beta = 1` and `threshold = 20`: `x` itself above 20 (torch's choice, not the
/// function's value: `softplus(20) - 20 = 2e-9`). With `log1p_exp`'s double-double
/// `L(y) = log(1 + exp(y))` for `y <= 0`: `L(x)` for `-40 <= x <= 0`, `x + L(-x)` (TwoSum,
/// one rounding) for `0 < x <= 20`; `exp(x) (1 - exp(x)/2)` rounded once below -40
/// (subnormal from about -708.4); `0` below -746. `softplus(+inf) = +inf`,
/// `softplus(-inf) = 0`, `softplus(NaN) = NaN`.
pub fn softplus(x: f64) -> f64 {
    if x > 20.0 || x.is_nan() {
        return x;
    }
    if x < -746.0 {
        return 0.0; // below 2^-1076
    }
    if x < -40.0 {
        return left_tail(x, 0.5);
    }
    if x <= 0.0 {
        let (s_h, s_l) = log1p_exp(x);
        return s_h + s_l;
    }
    let (s_h, s_l) = log1p_exp(-x);
    let (t_h, t_l) = two_sum(x, s_h);
    t_h + (t_l + s_l)
}

/// `2^108`, to bring a subnormal argument of [`rsqrt`] into the normal range.
const TWO108: f64 = f64::from_bits((1023 + 108) << 52);

/// `1 / sqrt(x)` within 1 ulp (measured 0.50, stream-format.md §7), nearly correctly
/// rounded: `x = m * 4^e` with `1 <= m < 4` (exact; subnormals are first scaled by
/// `2^108`), `y0 = 1 / sqrt(m)` (two roundings), the residual `rho = 1 - m*y0^2`
/// exactly up to `2^-104` (Dekker's products; `1 - p` is exact), then one Newton step
/// `y = y0 + y0 * (rho/2)` (the step's own error is `3/8 rho^2 < 2^-100`) and
/// `y * 2^-e` (exact). `1 / sqrt(x)` itself for `x <= 0`, `+inf` and NaN (`rsqrt(+0) =
/// +inf`, `rsqrt(-0) = -inf`, `rsqrt(x < 0) = NaN`, `rsqrt(+inf) = 0`).
pub fn rsqrt(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 || x == f64::INFINITY {
        return 1.0 / x.sqrt();
    }
    let (x, shift) = if x < f64::MIN_POSITIVE {
        (x * TWO108, 54)
    } else {
        (x, 0)
    };
    // The unbiased exponent, halved toward minus infinity.
    let e = (((x.to_bits() >> 52) as i32) - 1023) >> 1;
    let m = x * two_pow(-2 * e);
    let y0 = 1.0 / m.sqrt();
    let (sq_h, sq_l) = two_prod(y0, y0);
    let (p, p_e) = two_prod(m, sq_h);
    let rho = ((1.0 - p) - p_e) - m * sq_l;
    let y = y0 + y0 * (0.5 * rho);
    y * two_pow(shift - e)
}

// The known answers are mpmath's values (mp.prec = 300) rounded to binary64, printed
// as decimals.
#[cfg(test)]
#[allow(clippy::approx_constant, clippy::type_complexity)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite values of one sign (or
    /// zeros), counted on the bit patterns.
    fn ulps(got: f64, want: f64) -> u64 {
        assert_eq!(
            got.is_sign_negative(),
            want.is_sign_negative(),
            "{got} vs {want}"
        );
        got.to_bits().abs_diff(want.to_bits())
    }

    #[test]
    fn the_reduction_constants_are_ln2_over_8_in_pieces() {
        // LN2_8_1 and LN2_8_2 have at most 36 significant bits (16 trailing zeros of
        // the 52-bit fraction), so n * piece is exact for |n| < 2^17.
        for piece in [LN2_8_1, LN2_8_2] {
            assert_eq!(piece.to_bits() & 0xffff, 0, "{piece:e}");
        }
        // The first two round to ln2/8; the third is below the last bit of the second
        // (2^-78 for 36 bits from 2^-43).
        assert_eq!(LN2_8_1 + LN2_8_2, std::f64::consts::LN_2 / 8.0);
        assert!(LN2_8_2 < 2f64.powi(-42) && LN2_8_3 > 0.0 && LN2_8_3 < 2f64.powi(-78));
        assert_eq!(INV_LN2_8, 8.0 * std::f64::consts::LOG2_E);
    }

    /// Double-double product (Dekker), enough for the check below.
    fn mul_dd((a_h, a_l): (f64, f64), (b_h, b_l): (f64, f64)) -> (f64, f64) {
        let (p, e) = two_prod(a_h, b_h);
        fast_two_sum(p, e + (a_h * b_l + a_l * b_h))
    }

    #[test]
    fn the_table_holds_two_to_the_j_eighths() {
        // (2^(j/8))^8 = 2^j: three double-double squarings, each good to 2^-100.
        for (j, &t) in TWO_POW_J8.iter().enumerate() {
            let t2 = mul_dd(t, t);
            let t4 = mul_dd(t2, t2);
            let (h, l) = mul_dd(t4, t4);
            let want = f64::from(1u32 << j);
            assert_eq!(h, want, "j = {j}");
            assert!(l.abs() < want * 2f64.powi(-98), "j = {j}: {l:e}");
            // hi + lo is normalized: lo is below half an ulp of hi.
            assert_eq!(t.0 + t.1, t.0);
        }
    }

    #[test]
    fn exp_parts_is_exp_within_2_to_the_minus_66() {
        // (x, exp(x)) as double-doubles from mpmath at 300 bits: hi the rounded value,
        // lo the rounded rest; exp(x) = 2^k (h + l) is compared at k's scale.
        let cases: &[(f64, f64, f64)] = &[
            (1.0, 2.718281828459045, 1.4456468917292502e-16),
            (-1.0, 0.36787944117144233, -1.2428753672788363e-17),
            (0.04, 1.0408107741923882, 1.704424194294478e-17),
            (-0.5, 0.6065306597126334, -6.593178415491414e-19),
            (10.0, 22026.465794806718, -1.3780134700517372e-12),
            (-40.0, 4.248354255291589e-18, 1.2437470802645773e-34),
            (700.0, 1.0142320547350045e+304, 1.6666571920734673e+287),
            (-0.0433, 0.9576240597517128, 5.790397217062242e-18),
            (0.0433, 1.044251123200971, 8.825172243805795e-17),
        ];
        for &(x, want_h, want_l) in cases {
            let (k, h, l) = exp_parts(x);
            let s = two_pow(k);
            let (got_h, got_l) = (h * s, l * s);
            let err = ((got_h - want_h) + (got_l - want_l)).abs();
            assert!(err <= want_h * 2f64.powi(-66), "exp({x}): {err:e}");
        }
    }

    #[test]
    fn scale_rounds_once_into_the_subnormals() {
        // 1.5 * 2^-1074 is a tie: to even (2 * 2^-1074); just above it, up.
        assert_eq!(scale(1.5, 0.0, -1074), 2.0 * TWO_M1074);
        assert_eq!(scale(1.5, 1e-20, -1074), 2.0 * TWO_M1074);
        assert_eq!(scale(1.25, 0.0, -1073), 2.0 * TWO_M1074); // 2.5 -> 2
        assert_eq!(scale(1.25, 1e-20, -1073), 3.0 * TWO_M1074); // 2.5+ -> 3
        assert_eq!(scale(1.75, -1e-20, -1073), 3.0 * TWO_M1074); // 3.5- -> 3
        assert_eq!(scale(1.0, 0.0, -1075), 0.0); // half the smallest: to even, 0
        assert_eq!(scale(1.0, 1e-20, -1075), TWO_M1074);
        assert_eq!(scale(1.0, 0.0, -1022), f64::MIN_POSITIVE);
        assert_eq!(scale(1.9, 0.0, -1022), 1.9 * f64::MIN_POSITIVE);
        // At k = -1044, h = 1 + 2^-22 + 2^-31 is m = 2^30 + 2^8 + 1/2, a tie of the
        // grid: to even without l, up with a positive l (2^-60, below ulp(h)/2).
        let h = 1.0 + 2f64.powi(-22) + 2f64.powi(-31);
        let n = (1u64 << 30) + 256;
        assert_eq!(scale(h, 0.0, -1044), n as f64 * TWO_M1074);
        assert_eq!(scale(h, 2f64.powi(-60), -1044), (n + 1) as f64 * TWO_M1074);
        assert_eq!(scale(h, -2f64.powi(-60), -1044), n as f64 * TWO_M1074);
        // At k = -1022 (m >= 2^52, an integer): l = ulp(h)/2 is a tie, to even.
        let h = 1.0 + f64::EPSILON; // m = 2^52 + 1, odd
        assert_eq!(
            scale(h, f64::EPSILON / 2.0, -1022),
            (1.0 + 2.0 * f64::EPSILON) * f64::MIN_POSITIVE
        );
        assert_eq!(scale(h, -f64::EPSILON / 2.0, -1022), f64::MIN_POSITIVE);
    }

    /// Known answers (mpmath, 300 bits, rounded): each within 1 ulp; most are exact.
    #[test]
    fn functions_are_within_one_ulp_at_their_branch_points() {
        let cases: &[(fn(f64) -> f64, f64, f64)] = &[
            // tanh: tiny (x), the n = 0 path (|2x| < ln2/16), table paths, near 22
            (tanh, 1e-300, 1e-300),
            (tanh, 3.7252902984e-09, 3.7252902984e-09),
            (tanh, 1e-08, 1e-08),
            (tanh, 1e-05, 9.999999999666668e-06),
            (tanh, 0.02, 0.019997333759930933),
            (tanh, -0.03, -0.029991003238820143),
            (tanh, 0.1, 0.09966799462495582),
            (tanh, 0.22503119658537518, 0.22130813676439257),
            (tanh, 0.5, 0.46211715726000974),
            (tanh, 1.0, 0.7615941559557649),
            (tanh, -1.0, -0.7615941559557649),
            (tanh, 3.0, 0.9950547536867305),
            (tanh, 19.0, 0.9999999999999999),
            (tanh, 21.9, 1.0),
            // sigmoid: both signs, near 0, the +-40 switches, the subnormal tail
            (sigmoid, 1e-300, 0.5),
            (sigmoid, 0.001, 0.5002499999791666),
            (sigmoid, 1.0, 0.7310585786300049),
            (sigmoid, -1.0, 0.2689414213699951),
            (sigmoid, -1.1593480090625083, 0.23878577549367183),
            (sigmoid, 36.7, 0.9999999999999999),
            (sigmoid, 40.0, 1.0),
            (sigmoid, -40.0, 4.248354255291589e-18),
            (sigmoid, -40.5, 2.576757109154981e-18),
            (sigmoid, -700.0, 9.85967654375977e-305),
            (sigmoid, -709.0, 1.216780750623423e-308),
            (sigmoid, -720.0, 2.0322308024e-313),
            (sigmoid, -745.0, 5e-324),
            // softplus: the series (exp(x) < 2^-5) and Newton paths, both signs, tails
            (softplus, 0.0, 0.6931471805599453),
            (softplus, 1e-300, 0.6931471805599453),
            (softplus, -1.2591064422866014, 0.24990824085436433),
            (softplus, -3.4, 0.03282847042486534),
            (softplus, -3.5, 0.029750418272620566),
            (softplus, -10.0, 4.539889921686465e-05),
            (softplus, -40.5, 2.576757109154981e-18),
            (softplus, -720.0, 2.0322308024e-313),
            (softplus, 1.0, 1.3132616875182228),
            (softplus, 5.0, 5.006715348489118),
            (softplus, 20.0, 20.000000002061153),
            // rsqrt: subnormals, both ends
            (rsqrt, 5e-324, 4.4989137945431964e+161),
            (rsqrt, 8.915959553108e-311, 1.0590487578431988e+155),
            (rsqrt, 2.0, 0.7071067811865476),
            (rsqrt, 3.0, 0.5773502691896257),
            (rsqrt, 0.25, 2.0),
            (rsqrt, 1.7976931348623157e+308, 7.458340731200207e-155),
        ];
        for &(f, x, want) in cases {
            let got = f(x);
            assert!(ulps(got, want) <= 1, "f({x:e}) = {got:e}, want {want:e}");
        }
    }

    #[test]
    fn special_values() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        assert_eq!(tanh(-0.0).to_bits(), (-0f64).to_bits());
        assert_eq!(
            (tanh(inf), tanh(-inf), tanh(22.0), tanh(-1e300)),
            (1.0, -1.0, 1.0, -1.0)
        );
        assert_eq!((tanh(5e-324), tanh(-5e-324)), (5e-324, -5e-324));
        assert_eq!(
            (sigmoid(0.0), sigmoid(-0.0), sigmoid(inf), sigmoid(-inf)),
            (0.5, 0.5, 1.0, 0.0)
        );
        assert_eq!((sigmoid(-746.0), sigmoid(-747.0)), (0.0, 0.0));
        assert_eq!(
            (softplus(inf), softplus(-inf), softplus(-747.0)),
            (inf, 0.0, 0.0)
        );
        assert_eq!(softplus(-0.0), std::f64::consts::LN_2);
        assert_eq!(
            (rsqrt(0.0), rsqrt(-0.0), rsqrt(inf), rsqrt(4.0)),
            (inf, -inf, 0.0, 0.5)
        );
        for f in [tanh, sigmoid, softplus, rsqrt] {
            assert!(f(nan).is_nan());
        }
        assert!(rsqrt(-1.0).is_nan() && rsqrt(-inf).is_nan());
    }

    #[test]
    fn rsqrt_of_powers_of_four_is_exact() {
        // 2^i for any binary64 exponent, subnormals included.
        let pow2 = |i: i32| {
            if i >= -1022 {
                two_pow(i)
            } else {
                f64::from_bits(1 << (i + 1074))
            }
        };
        for e in -537..=511 {
            assert_eq!(rsqrt(pow2(2 * e)), pow2(-e), "4^{e}");
            assert_eq!(
                rsqrt(pow2(2 * e + 1)),
                std::f64::consts::FRAC_1_SQRT_2 * pow2(-e)
            );
        }
    }
}
