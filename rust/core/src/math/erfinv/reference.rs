//! The inverse error function of init programs (stream-format.md §7), within 1 ulp.
//!
//! `y = erfinv(a)` for `0 < a < 1` (odd in `x`) is one Newton step from a start that
//! is already within a few ulp, `y0 = PhiInv((1 + a) / 2) / sqrt(2)` ([`crate::math::phi_inv`]'s
//! AS 241, 6 ulp at most): `y = y0 - r / (2/sqrt(pi) * exp(-y0^2))` with the residual
//! `r = erf(y0) - a`. The step's own error is `y * (y0 - y)^2`, below `2^-95` relative,
//! so the result is as good as `r`: it is computed to about `2^-100` relative (below, a
//! double-double), and the result is `y0 - r / slope` rounded once (0.5 ulp) plus what
//! is left of `r`'s error.
//!
//! * `y0 < 2.5`: `erf(y0)` by its Maclaurin series `2/sqrt(pi) * sum (-1)^n
//!   y^(2n+1) / (n! (2n+1))` in double-doubles (the largest term is below 3 and the sum
//!   above 0.0001, so the cancellation costs at most 15 of its 106 bits), summed until a
//!   term is below `2^-110` of the sum; `erf(y0) - a` is exact in its high part
//!   (Sterbenz).
//! * `y0 >= 2.5` (`a > 0.9995`): `r = (1 - a) - erfc(y0)` with `1 - a` exact and
//!   [`crate::math::erfc`] (fdlibm, 2.5 ulp): the residual's error then moves `y` by at most
//!   `1.25 * 2^-52 / y`, below 0.25 ulp of `y`.
//!
//! Every step is a fixed sequence of IEEE-754 binary64 operations (no libm, no fused
//! multiply-add), like the rest of [`crate::math`].

use crate::math::compensated::{fast_two_sum, two_sum};
use crate::math::{central_of_offset, erfc, exp, phi_inv_tail, two_prod};

/// `2/sqrt(pi)` as a double-double (mpmath, 300 bits).
pub(super) const TWO_OVER_SQRT_PI: (f64, f64) = (
    f64::from_bits(0x3ff2_0dd7_5042_9b6d), // 1.1283791670955126
    f64::from_bits(0x3c71_ae3a_914f_ed80), // 1.533545961316588e-17
);
/// `sqrt(pi)/2` as a double-double (mpmath, 300 bits).
const SQRT_PI_OVER_2: (f64, f64) = (
    f64::from_bits(0x3fec_5bf8_91b4_ef6b), // 0.886226925452758
    f64::from_bits(0xbc86_18f1_3eb7_ca89), // -3.8332932499128993e-17
);
/// Below it, `erfinv(a) = sqrt(pi)/2 * a` to `2^-1900` relative (`2^-960`).
pub(super) const LINEAR_BELOW: f64 = f64::from_bits((1023 - 960) << 52);
/// `2^600` and `2^-600`: [`linear`] scales its argument away from the subnormals.
const TWO600: f64 = f64::from_bits((1023 + 600) << 52);
const TWO_M600: f64 = f64::from_bits((1023 - 600) << 52);
/// Where the residual switches from the series of `erf` to `erfc`.
pub const SERIES_BELOW: f64 = 2.5;
/// A series term below this fraction of the sum ends it (`2^-110`).
const SERIES_END: f64 = f64::from_bits((1023 - 110) << 52);
/// More terms than `y0 < 2.5` ever takes (64 at `y0 = 2.5`).
const SERIES_TERMS: u32 = 100;

/// The inverse error function with the residual always from the series (or `erfc`): the
/// definition of [`erfinv`](fn@crate::math::erfinv)'s bits.
pub(crate) fn erfinv_series(x: f64) -> f64 {
    let a = x.abs();
    if a == 1.0 {
        return f64::INFINITY.copysign(x);
    }
    if a > 1.0 || a.is_nan() {
        return f64::NAN;
    }
    if a == 0.0 {
        return x;
    }
    if a < LINEAR_BELOW {
        return linear(a).copysign(x);
    }
    let y0 = start(a);
    let residual = if y0 < SERIES_BELOW {
        let (e_h, e_l) = erf_dd(y0);
        (e_h - a) + e_l
    } else {
        (1.0 - a) - erfc(y0)
    };
    let slope = TWO_OVER_SQRT_PI.0 * exp(-(y0 * y0));
    (y0 - residual / slope).copysign(x)
}

/// `sqrt(pi)/2 * a` for `0 < a < 2^-960`: Dekker's product of `a * 2^600` (exact) with
/// the double-double constant, rounded, then scaled back (exact but for a subnormal
/// result, where the second rounding adds at most half a subnormal spacing).
fn linear(a: f64) -> f64 {
    let scaled = a * TWO600;
    let (p, e) = two_prod(SQRT_PI_OVER_2.0, scaled);
    (p + (e + SQRT_PI_OVER_2.1 * scaled)) * TWO_M600
}

/// AS 241's `PhiInv((1 + a) / 2) / sqrt(2)`: its central approximation of the offset
/// `a / 2` (exact) for `a <= 0.85`, else its tail with `q = (1 - a) / 2` (exact).
pub(super) fn start(a: f64) -> f64 {
    if a <= CENTRAL_TO {
        return central_start(a);
    }
    let q = 0.5 * (1.0 - a);
    phi_inv_tail(1.0 - q, q) * std::f64::consts::FRAC_1_SQRT_2
}

/// The last `a` of [`start`]'s central approximation.
pub(super) const CENTRAL_TO: f64 = 0.85;

/// [`start`] for `a <= 0.85`.
#[inline(always)]
pub(super) fn central_start(a: f64) -> f64 {
    central_of_offset(0.5 * a) * std::f64::consts::FRAC_1_SQRT_2
}

/// `(a_h + a_l) * (b_h + b_l)` as a double-double (relative error about `2^-104`).
#[inline]
pub(super) fn mul_dd((a_h, a_l): (f64, f64), (b_h, b_l): (f64, f64)) -> (f64, f64) {
    let (p, e) = two_prod(a_h, b_h);
    fast_two_sum(p, e + (a_h * b_l + a_l * b_h))
}

/// `(a_h + a_l) / d` as a double-double, for a positive integer `d` below `2^53`.
#[inline]
fn div_dd_by((a_h, a_l): (f64, f64), d: f64) -> (f64, f64) {
    let q = a_h / d;
    let (p, e) = two_prod(q, d);
    fast_two_sum(q, (((a_h - p) - e) + a_l) / d)
}

/// `(a_h + a_l) + (b_h + b_l)` as a double-double.
#[inline]
fn add_dd((a_h, a_l): (f64, f64), (b_h, b_l): (f64, f64)) -> (f64, f64) {
    let (s, e) = two_sum(a_h, b_h);
    fast_two_sum(s, e + (a_l + b_l))
}

/// `erf(y)` for `2^-961 <= y < 2.5` as a double-double: its Maclaurin series (module
/// docs). The term `t = y^(2n+1) / n!` is carried by a multiplication by `y^2` (Dekker's
/// square, exact) and a division by `n` per step.
pub(super) fn erf_dd(y: f64) -> (f64, f64) {
    let square = two_prod(y, y);
    let mut term = (y, 0.0);
    let mut sum = (y, 0.0);
    for n in 1..=SERIES_TERMS {
        term = div_dd_by(mul_dd(term, square), f64::from(n));
        let (u_h, u_l) = div_dd_by(term, f64::from(2 * n + 1));
        let signed = if n % 2 == 1 { (-u_h, -u_l) } else { (u_h, u_l) };
        sum = add_dd(sum, signed);
        if u_h < SERIES_END * sum.0 {
            return mul_dd(TWO_OVER_SQRT_PI, sum);
        }
    }
    unreachable!("erf's series ends within {SERIES_TERMS} terms below y = {SERIES_BELOW}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constants_are_their_values() {
        // The double-doubles round to the binary64 constants, and sqrt(pi)/2 times
        // 2/sqrt(pi) is 1 to the double-double's precision.
        assert_eq!(TWO_OVER_SQRT_PI.0, std::f64::consts::FRAC_2_SQRT_PI);
        let (h, l) = mul_dd(TWO_OVER_SQRT_PI, SQRT_PI_OVER_2);
        assert!((h - 1.0 + l).abs() < 2f64.powi(-100), "{h} {l}");
        assert_eq!(LINEAR_BELOW, 2f64.powi(-960));
        assert_eq!(TWO600 * TWO_M600, 1.0);
        assert_eq!(SERIES_END, 2f64.powi(-110));
    }

    #[test]
    fn the_series_is_erf_to_a_double_doubles_precision() {
        // mpmath (300 bits) as a double-double, at the last value below the switch
        // (the most terms) and inside.
        for (y, want_h, want_l) in [
            (
                2.4999999999999996,
                0.999593047982555,
                4.5957798574356046e-17,
            ),
            (0.3, 0.3286267594591274, 2.2908254446982777e-17),
        ] {
            let (h, l) = erf_dd(y);
            assert_eq!(h, want_h, "{y}");
            assert!((l - want_l).abs() < 2f64.powi(-100), "{y}: {l} vs {want_l}");
        }
    }
}
