//! The fast path of [`erfinv`] (and the function itself): the reference's Newton step
//! ([`super::reference`]), its residual from a table instead of a series, used only where
//! a proven error bound shows that it rounds to the bits of the series' result (Ziv's
//! strategy, as correctly rounded libraries use it).
//!
//! # What must be reproduced
//!
//! For `2^-10 <= y0 < 2.5` the series path ([`erfinv_series`]) returns
//! `RN(y0 - d_s)`, with `d_s = RN(r_s / s)`, `s = RN(RN(2/sqrt(pi)) * exp(-y0^2))` and
//! `r_s = RN(e - a)`, `e` the double-double of `erf(y0)` from the Maclaurin series
//! (`RN` is IEEE round to nearest even). `r_s` is the costly part (up to 64 terms of
//! double-double arithmetic), `exp` the next. Here `r_f`, a cheaper value of
//! `erf(y0) - a`, comes with a bound `rho >= |r_s - r_f|`, and `s'`, the slope from the
//! same table, is within `2^-33.9 s` of `s`; so `|d_s - d_f| <= beta` for `d_f = RN(r_f /
//! s')`. `RN` is monotonic: with `v_up >= d_s >= v_down`, `RN(y0 - v_up) <= RN(y0 - d_s)
//! <= RN(y0 - v_down)`, and when the two ends are the same binary64 it is the series'
//! result. Otherwise (2 float32 inputs in 10,000) the caller runs the series.
//!
//! # The residual from a table
//!
//! At `c = j / 512` (`j = 1..=1280`, the grid point nearest `y0`, `h = y0 - c` exact with
//! `|h| <= 2^-10`: `y0` and `c` are multiples of `ulp(y0) >= 2^-62`), Taylor's formula
//! `erf(c + h) = T0 + T1 h + sum_{k=2..7} T_k h^k + R` with `T_k = erf^(k)(c) / k!`,
//! `erf^(k)(x) = E(x) (-1)^(k-1) H_{k-1}(x)` (`E(x) = 2/sqrt(pi) exp(-x^2)`, `H_n` the
//! physicists' Hermite polynomials: `H_0 = 1`, `H_1 = 2x`, `H_{n+1} = 2x H_n - 2n
//! H_{n-1}`). Each entry holds `T0` and `T1` as double-doubles, `T2..T7` rounded, and
//! `M = E(c) sum_{k=2..7} G_{k-1}(c) / k! 2^(-10 (k-2))`, where `G_n` is `H_n` with every
//! coefficient made positive (`G_{n+1} = 2x G_n + 2n G_{n-1}`, so `|H_n| <= G_n`): `M h^2`
//! bounds the terms of degree 2 to 7. Then `r_f = RN((T0 - a) + T1 h + tail)` summed as
//! double-doubles (TwoSum, Dekker's product). With `u = 2^-53`, its error against the
//! exact `erf(y0) - a`:
//!
//! * `T0 = erf_dd(c)` and the series' own `e` are both within `2^-92 y e^(y^2)` of
//!   `erf(y)` (in `erf_dd` every term is within `2^-93.4` relative, after at most 200
//!   double-double products and quotients of relative error `2^-101` each; the sum of
//!   the terms' magnitudes is at most `y e^(y^2)`; each of the at most 100 additions
//!   errs by `2^-103` of it; the product by `2/sqrt(pi)` adds `2^-101`). With `c <= 2 y0`,
//!   `e^(c^2 - y0^2) <= 1.005`, `y0 < 2.5` and `e^(y0^2) <= 1.13 / s`, the two together
//!   are below `2^-88 / s`.
//! * `T1`: `exp_parts` (`2^-66` relative) times `2/sqrt(pi)` as double-doubles
//!   (`2^-101`): `2^-65.9` relative, so `T1 h` errs by at most `2^-65 T1 |h|`; its
//!   product with `h` is exact (Dekker), the low part's rounding is below `2^-105 |h|`.
//! * The tail `h^2 (T2 + h (T3 + ...))`: the recurrence gives `H_n` within `2n u G_n`
//!   (each step's roundings are bounded by the majorant's terms), the division by `k!`,
//!   the product by `E(c)` and `E(c)`'s own rounding add `3u`: each `T_k` is within `16u`
//!   of its value measured in `M`'s terms; Horner's rule with the square and the final
//!   product adds `12u` (`gamma_12`), and the five additions that gather the tail with the
//!   low parts (each of those below `u` of a value at most 1) add `5u |tail| + 2^-100`. In all, at most
//!   `2^-47 M h^2 + 2^-100`.
//! * The remainder: `|R| <= E(xi) G_7(xi) / 8! |h|^8 <= 1.005 E(c) 266075 / 40320
//!   2^-80 < 2^-76 E(c)` (`G_7(2.5) = 266075`, `|xi - c| <= 2^-10`).
//! * The roundings of `r_s` and `r_f` themselves (and of `e_h - a`, exact by Sterbenz's
//!   lemma when it holds): at most `2^-51 |r_f|` with room.
//!
//! So `rho = 2^-88/s + 2^-65 T1 |h| + 2^-47 M h^2 + 2^-76 T1 + 2^-100 + 2^-51 |r_f|`.
//!
//! # The slope
//!
//! `s' = T1 + h (2 T2 + h (3 T3 + h 4 T4))`, the derivative of the Taylor polynomial: the
//! terms left out sum to at most `sum_{k>=5} k |T_k| |h|^(k-1) <= 1.01 E(c) 5 G_4(2.5) /
//! 5! 2^-40 < 2^-34.6 E(c)` (`G_4(2.5) = 937`), the roundings and the coefficients' errors
//! add below `2^-45`, and `E(c) <= 1.005 E(y0)`; the series path's `s` is within
//! `2^-50.4` of `E(y0)` (`exp` within 1 ulp, the rounding of `y0^2` moves it by `y0^2
//! 2^-53` relative). So `|s - s'| <= 2^-33.9 s`; with `d_f = RN(r_f RN(1/s'))` (one
//! division for two quotients; within `2.01u` of `r_f / s'`),
//! `|d_s - d_f| <= |r_s - r_f| / s + |r_f| |1/s - 1/s'| + u |d_s| + 2.01u |d_f| <= rho/s
//! (1 + u) + 2^-33 |d_f|`. Computed in binary64 (`rho / s'` as `rho RN(1/s')`), each of
//! `rho`'s six positive terms and their sum lose at most `8u` relative, so `beta = 2 rho
//! / s' + 2^-32 |d_f|` is above the
//! bound, and above it by more than `u (|d_f| + beta)`: `v_up = RN(d_f + beta) >= d_s`
//! and `v_down = RN(d_f - beta) <= d_s`.
//!
//! The table (1280 entries of 11 binary64s, 113 KiB) is computed once, on first use,
//! by the same fixed IEEE operations everywhere. Its bits are the same on every CPU, but
//! only the fast path's speed depends on them: a result it returns is the series' by the
//! bound above, which counts each entry's error.

use std::sync::OnceLock;

use super::reference::{central_start, erf_dd, erfinv_series, mul_dd, start};
use super::reference::{CENTRAL_TO, LINEAR_BELOW, SERIES_BELOW, TWO_OVER_SQRT_PI};
use crate::math::compensated::{exp_parts, two_sum};
use crate::math::{two_pow, two_prod};
use crate::philox::Backend;

/// The inverse error function within 1 ulp (stream-format.md §7): `erfinv(+-0) = +-0`,
/// `erfinv(+-1) = +-inf`, NaN for `|x| > 1` and NaN (as torch's `erfinv`).
///
/// The bits are the reference's (`erfinv_series`): the residual is taken from the table
/// where the bound of the module docs shows that the result rounds the same (`newton`),
/// else from the series itself.
pub fn erfinv(x: f64) -> f64 {
    let a = x.abs();
    if (LINEAR_BELOW..1.0).contains(&a) {
        if let Some(y) = newton(a, start(a)) {
            return y.copysign(x);
        }
    }
    erfinv_series(x)
}

/// Grid points per unit of `y0`.
const PER_UNIT: f64 = 512.0;
/// The largest grid index: `c = 2.5`, the series' end ([`SERIES_BELOW`]).
const LAST: usize = 1280;
/// The fast path's smallest `y0` (below it the series is short anyway): half a grid
/// step, where the grid's first point `c = 2^-9` is nearest.
pub(super) const FAST_FROM: f64 = 0.5 / PER_UNIT;
/// The Taylor coefficients past `T1` each entry holds (`T2..=T7`).
const TAIL_TERMS: usize = 6;

/// Powers of two of the bound (module docs).
const SLOW_AND_T0: f64 = f64::from_bits((1023 - 88) << 52);
const T1_ERROR: f64 = f64::from_bits((1023 - 65) << 52);
const TAIL_ERROR: f64 = f64::from_bits((1023 - 47) << 52);
const REMAINDER: f64 = f64::from_bits((1023 - 76) << 52);
const SUM_FLOOR: f64 = f64::from_bits((1023 - 100) << 52);
const RESIDUAL_ROUNDING: f64 = f64::from_bits((1023 - 51) << 52);
const SLOPE_ERROR: f64 = f64::from_bits((1023 - 32) << 52);

/// One grid point's Taylor data (module docs).
#[derive(Clone, Copy, Debug)]
struct Point {
    /// `erf(c)` as a double-double.
    t0: (f64, f64),
    /// `erf'(c) = 2/sqrt(pi) exp(-c^2)` as a double-double.
    t1: (f64, f64),
    /// `T2..=T7`, lowest degree first.
    tail: [f64; TAIL_TERMS],
    /// `M`: `M h^2` bounds the tail's magnitude for `|h| <= 2^-10`.
    tail_max: f64,
}

/// The table, grid index `j` at `[j - 1]`.
fn points() -> &'static [Point; LAST] {
    static POINTS: OnceLock<Box<[Point; LAST]>> = OnceLock::new();
    POINTS.get_or_init(|| {
        let points: Vec<Point> = (1..=LAST).map(point).collect();
        points.into_boxed_slice().try_into().expect("LAST points")
    })
}

/// `n!` for `n <= 7` (exact in binary64).
fn factorial(n: usize) -> f64 {
    (2..=n).map(|i| i as f64).product()
}

/// The entry at `c = j / 512`.
fn point(j: usize) -> Point {
    let c = j as f64 / PER_UNIT;
    // c^2 = j^2 / 2^18 is exact; so is the scaling of exp_parts' parts by 2^k.
    let (k, e_h, e_l) = exp_parts(-(c * c));
    let scale = two_pow(k);
    let t1 = mul_dd(TWO_OVER_SQRT_PI, (e_h * scale, e_l * scale));
    // H_n and its majorant G_n, n = 0..=6.
    let mut hermite = [1.0, 2.0 * c, 0.0, 0.0, 0.0, 0.0, 0.0];
    let mut majorant = hermite;
    for n in 1..TAIL_TERMS {
        let m = 2.0 * n as f64;
        hermite[n + 1] = 2.0 * c * hermite[n] - m * hermite[n - 1];
        majorant[n + 1] = 2.0 * c * majorant[n] + m * majorant[n - 1];
    }
    let mut tail = [0.0; TAIL_TERMS];
    let mut tail_max = 0.0;
    let mut step = 1.0; // 2^(-10 (k-2))
    for (i, slot) in tail.iter_mut().enumerate() {
        let k = i + 2;
        let sign = if k % 2 == 1 { 1.0 } else { -1.0 };
        *slot = sign * (t1.0 * (hermite[k - 1] / factorial(k)));
        tail_max += majorant[k - 1] / factorial(k) * step;
        step /= 1024.0;
    }
    Point {
        t0: erf_dd(c),
        t1,
        tail,
        tail_max: t1.0 * tail_max,
    }
}

/// The series path's `erfinv(a)` for `0 < a < 1` from its start `y0` (AS 241), when the
/// bound decides it (module docs); `None` where the series must run: `y0` outside
/// `[2^-10, 2.5)`, or a result too near a rounding boundary.
#[inline]
pub(super) fn newton(a: f64, y0: f64) -> Option<f64> {
    if !(FAST_FROM..SERIES_BELOW).contains(&y0) {
        return None;
    }
    let (y, decided) = decide(a, y0, points());
    decided.then_some(y)
}

/// The grid index nearest `y0` less one, the entry's place in [`points`] (`0..1280` for
/// `y0` in the fast range: `y0 * 512` is exact and below 1280, so `+ 0.5` is too);
/// through `i32`, whose conversion vectorizes, and clamped, so that any `y0` reads an
/// entry (the caller discards the others' results).
#[inline(always)]
fn grid_place(y0: f64) -> usize {
    ((y0 * PER_UNIT + 0.5) as i32).clamp(1, LAST as i32) as usize - 1
}

/// The fast path's candidate and whether the bound decides it (module docs), for `y0`
/// in `[2^-10, 2.5)`: the same operations for one value and for lanes (no branch).
#[inline(always)]
fn decide(a: f64, y0: f64, table: &[Point; LAST]) -> (f64, bool) {
    let place = grid_place(y0);
    let p = &table[place];
    let h = y0 - (place + 1) as f64 / PER_UNIT;
    let [t2, t3, t4, t5, t6, t7] = p.tail;
    let poly = t2 + h * (t3 + h * (t4 + h * (t5 + h * (t6 + h * t7))));
    let tail = (h * h) * poly;
    // erf'(y0) from the table too: within 2^-34 of the series path's slope (module docs).
    let slope = p.t1.0 + h * (2.0 * t2 + h * (3.0 * t3 + h * (4.0 * t4)));
    let inverse = 1.0 / slope;
    let (p1, p1_err) = two_prod(p.t1.0, h);
    let (s, s_err) = two_sum(p.t0.0, -a);
    let (v, v_err) = two_sum(s, p1);
    let low = v_err + (s_err + (p.t0.1 + (p1_err + (p.t1.1 * h + tail))));
    let residual = v + low;
    let d = residual * inverse;
    let rho = SLOW_AND_T0 * inverse
        + T1_ERROR * p.t1.0 * h.abs()
        + TAIL_ERROR * p.tail_max * (h * h)
        + REMAINDER * p.t1.0
        + SUM_FLOOR
        + RESIDUAL_ROUNDING * residual.abs();
    let beta = 2.0 * rho * inverse + SLOPE_ERROR * d.abs();
    let low_end = y0 - (d + beta);
    let high_end = y0 - (d - beta);
    (low_end, low_end == high_end)
}

/// [`erfinv`] of every `x[i]` into `out[i]` (the same bits), `N` lanes at a time:
/// AS 241's central start and the fast path on every lane, the tail start (`|x| > 0.85`,
/// about one lane in ten for a uniform input) on those lanes gathered
/// ([`crate::math::phi_inv_tail_slice`], lanes too), the undecided lanes one at a time.
// Lane loops index several arrays in step: a range loop is the form that vectorizes.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn erfinv_lanes<const N: usize>(x: &[f64], out: &mut [f64]) {
    let table = points();
    let mut chunks = x.chunks_exact(N).zip(out.chunks_exact_mut(N));
    for (x, out) in &mut chunks {
        let x: &[f64; N] = x.try_into().expect("N lanes");
        let mut a = [0.0; N];
        let mut y0 = [0.0; N];
        for i in 0..N {
            a[i] = x[i].abs();
            y0[i] = central_start(a[i]);
        }
        tail_starts(&a, &mut y0);
        let mut decided = [false; N];
        for i in 0..N {
            let fast =
                a[i] >= LINEAR_BELOW && a[i] < 1.0 && y0[i] >= FAST_FROM && y0[i] < SERIES_BELOW;
            let (y, ok) = decide(a[i], y0[i], table);
            out[i] = y.copysign(x[i]);
            decided[i] = fast && ok;
        }
        for i in 0..N {
            if !decided[i] {
                out[i] = erfinv_series(x[i]);
            }
        }
    }
    let rest = x.len() / N * N;
    for (slot, &v) in out[rest..].iter_mut().zip(&x[rest..]) {
        *slot = erfinv(v);
    }
}

/// [`start`] of the lanes with `a > 0.85` into `y0`: `PhiInv(1 - q) / sqrt(2)` with `q =
/// (1 - a) / 2` (exact) is `-PhiInv(q) / sqrt(2)`, both from `log(q)` and one sign
/// (AS 241's tail formula), so the lane code of the lower tail gives its bits.
#[allow(clippy::needless_range_loop)] // lanes indexed in step, as in `erfinv_lanes`
#[inline(always)]
fn tail_starts<const N: usize>(a: &[f64; N], y0: &mut [f64; N]) {
    let mut places = [0usize; N];
    let mut q = [0.0; N];
    let mut count = 0;
    for i in 0..N {
        if a[i] > CENTRAL_TO {
            places[count] = i;
            q[count] = 0.5 * (1.0 - a[i]);
            count += 1;
        }
    }
    let mut lower = [0.0; N];
    crate::math::phi_inv_tail_slice(&q[..count], &mut lower[..count]);
    for k in 0..count {
        y0[places[k]] = -lower[k] * std::f64::consts::FRAC_1_SQRT_2;
    }
}

/// Lanes per step of [`erfinv_lanes`]: a multiple of every backend's vector width, and
/// enough for the tail lanes (about one in ten) to fill vectors.
const LANES: usize = 64;

/// [`erfinv`] of every `x[i]` into `out[i]`, with the lane code of `backend`
/// (every backend gives the same bits: each lane performs the scalar operations).
///
/// # Panics
/// If `x` and `out` differ in length, or this CPU cannot run `backend`.
pub fn erfinv_slice_with(backend: Backend, x: &[f64], out: &mut [f64]) {
    crate::math::lane_primitives::slice_with(backend, &Erfinv, x, out);
}

/// [`erfinv`] as a slice function: its lanes are [`erfinv_lanes`].
struct Erfinv;

impl crate::math::lane_primitives::SliceFunction for Erfinv {
    const NAME: &'static str = "erfinv_slice";
    fn definition(&self) -> fn(f64) -> f64 {
        erfinv
    }
    #[inline(always)]
    fn lanes(&self, x: &[f64], out: &mut [f64]) {
        erfinv_lanes::<LANES>(x, out);
    }
}

/// [`erfinv`] of every `x[i]` into `out[i]` with this CPU's fastest lane code
/// ([`Backend::detect`]); the same bits as one value at a time.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn erfinv_slice(x: &[f64], out: &mut [f64]) {
    erfinv_slice_with(Backend::detect(), x, out);
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

    /// Whether `erfinv` (fast path or not) gives the series' bits at `x` and `-x`;
    /// panics naming `x` if not.
    fn same_bits(x: f64) {
        for x in [x, -x] {
            let (fast, series) = (erfinv(x), erfinv_series(x));
            assert_eq!(
                fast.to_bits(),
                series.to_bits(),
                "erfinv({x:e}) = {fast:e}, the series gives {series:e}"
            );
        }
    }

    /// Whether the fast path decides `a` (a positive input below 1).
    fn decided(a: f64) -> bool {
        newton(a, start(a)).is_some()
    }

    /// Inputs at the edges: around every grid point and every midpoint between two (the
    /// `a` whose start is there, give or take 4 ulp), the ends of the fast range, AS
    /// 241's switch at 0.85 and the series' end.
    fn edges() -> Vec<f64> {
        let mut around: Vec<f64> = (2..=2 * LAST)
            .map(|m| erf_dd(m as f64 / (2.0 * PER_UNIT)).0)
            .collect();
        around.extend([
            erf_dd(FAST_FROM).0,
            0.85,
            0.9995,
            0.99959,
            1.0 - 2f64.powi(-53),
        ]);
        around.extend([2f64.powi(-11), 2f64.powi(-9), 0.5, 0.25]);
        let mut all = Vec::new();
        for a in around {
            for k in -4i64..=4 {
                all.push(f64::from_bits(a.to_bits().wrapping_add_signed(k)));
            }
        }
        all.retain(|&a| a > 0.0 && a < 1.0);
        all
    }

    /// A few million inputs (the exhaustive sweep is `exhaustive_*` below): the edges,
    /// uniform binary64s and float32s in (0, 1), and binary64s of every exponent there.
    #[test]
    fn known_values_and_special_values() {
        // mpmath (300 bits) rounded to binary64.
        let known: [(f64, f64); 6] = [
            (0.5, 0.4769362762044699),
            (0.1, 0.08885599049425769),
            (0.9, 1.1630871536766743),
            (0.999, 2.3267537655135246),
            (1.0 - 2f64.powi(-53), 5.8635847487551676),
            (1e-300, 8.86226925452758e-301),
        ];
        for (x, want) in known {
            let got = erfinv(x);
            assert!(
                got.to_bits().abs_diff(want.to_bits()) <= 1,
                "erfinv({x}) = {got}"
            );
            assert_eq!(erfinv(-x), -got);
        }
        assert_eq!(erfinv(1.0), f64::INFINITY);
        assert_eq!(erfinv(-1.0), f64::NEG_INFINITY);
        assert_eq!(erfinv(-0.0).to_bits(), (-0f64).to_bits());
        assert_eq!(erfinv(0.0).to_bits(), 0);
        for bad in [
            1.0 + f64::EPSILON,
            -2.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ] {
            assert!(erfinv(bad).is_nan(), "{bad}");
        }
        // Subnormals: linear, one subnormal spacing at most from sqrt(pi)/2 * x.
        assert_eq!(erfinv(f64::from_bits(1)), f64::from_bits(1));
        assert_eq!(erfinv(f64::from_bits(1000)), f64::from_bits(886));
    }

    #[test]
    fn the_fast_path_gives_the_series_bits() {
        let mut state = 40;
        let mut inputs = edges();
        for _ in 0..1 << 20 {
            let w = splitmix(&mut state);
            inputs.push((w >> 11) as f64 * 2f64.powi(-53)); // uniform binary64
            inputs.push(f64::from((w >> 40) as f32 * 2f32.powi(-24))); // uniform float32
                                                                       // Any exponent from 2^-60 to 2^-1.
            let exponent = 2f64.powi(-1 - (w % 60) as i32);
            inputs.push(exponent * (1.0 + (w >> 12) as f64 * 2f64.powi(-52)));
        }
        inputs.retain(|&a| a > 0.0 && a < 1.0);
        inputs.par_iter().for_each(|&a| same_bits(a));
        // The test is not vacuous: the fast path decides nearly every uniform input.
        let uniform: Vec<f64> = inputs.iter().step_by(3).copied().collect();
        let fast = uniform.par_iter().filter(|&&a| decided(a)).count();
        assert!(
            fast as f64 > 0.99 * uniform.len() as f64,
            "{fast} of {}",
            uniform.len()
        );
    }

    /// The fast path's result at the positive input `a`, checked against the series';
    /// whether it was taken. Where it is not, [`erfinv`] is [`erfinv_series`] itself,
    /// and the sign is applied after either (the quick test above checks both signs).
    fn fast_is_series(a: f64) -> bool {
        let Some(fast) = newton(a, start(a)) else {
            return false;
        };
        let series = erfinv_series(a);
        assert_eq!(
            fast.to_bits(),
            series.to_bits(),
            "erfinv({a:e}): {fast:e} vs {series:e}"
        );
        true
    }

    /// Every float32 in (0, 1) (every value a float32 uniform fill can feed `erfinv`, up
    /// to the sign), the edges and 2^27 random binary64s: fast == series bit for bit
    /// wherever the fast path decides. Minutes in release mode (`make test-slow`).
    #[test]
    #[ignore = "exhaustive: minutes in release mode (make test-slow)"]
    fn exhaustive_fast_path_gives_the_series_bits_for_every_float32_input() {
        let float32s = 0x3f80_0000 - 1;
        let fast = (1u32..=float32s)
            .into_par_iter()
            .filter(|&bits| fast_is_series(f64::from(f32::from_bits(bits))))
            .count();
        println!("float32 inputs in (0, 1): {fast} of {float32s} decided by the fast path");
        assert!(fast > 80_000_000, "{fast}"); // the 10 binades from 2^-10 up, nearly all
        edges().par_iter().for_each(|&a| same_bits(a));
        let chunks = 1u64 << 12;
        let fast: usize = (0..chunks)
            .into_par_iter()
            .map(|chunk| {
                let mut state = chunk;
                let mut fast = 0;
                for _ in 0..(1u64 << 27) / chunks {
                    let w = splitmix(&mut state);
                    let a = if w & 3 != 0 {
                        (w >> 11) as f64 * 2f64.powi(-53) // uniform in [0, 1)
                    } else {
                        f64::from_bits(w >> 2) // any bits below 2^1022
                    };
                    if a > 0.0 && a < 1.0 && fast_is_series(a) {
                        fast += 1;
                    }
                }
                fast
            })
            .sum();
        println!("random binary64 inputs: {fast} of 2^27 decided by the fast path");
    }

    #[test]
    fn every_backend_gives_the_scalar_bits() {
        // The edges, uniform inputs and specials of both signs, at lengths that leave a
        // remainder after the lanes.
        let mut state = 41;
        let mut x = edges();
        x.extend((0..20_000).map(|_| (splitmix(&mut state) >> 11) as f64 * 2f64.powi(-52) - 1.0));
        x.extend([
            0.0,
            -0.0,
            1.0,
            -1.0,
            1.5,
            f64::NAN,
            f64::INFINITY,
            1e-300,
            -5e-324,
        ]);
        x.extend([0.86, -0.9999, 2f64.powi(-11), 0.99959]);
        let negated: Vec<f64> = x.iter().map(|v| -v).collect();
        x.extend(negated);
        let want: Vec<u64> = x.iter().map(|&v| erfinv(v).to_bits()).collect();
        for backend in Backend::available() {
            for len in [x.len(), x.len() - 3, 5] {
                let mut out = vec![0.0; len];
                erfinv_slice_with(backend, &x[..len], &mut out);
                let got: Vec<u64> = out.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want[..len], "{backend:?}");
            }
        }
    }

    #[test]
    fn the_bound_constants_are_their_powers_of_two() {
        assert_eq!(SLOW_AND_T0, 2f64.powi(-88));
        assert_eq!(T1_ERROR, 2f64.powi(-65));
        assert_eq!(TAIL_ERROR, 2f64.powi(-47));
        assert_eq!(REMAINDER, 2f64.powi(-76));
        assert_eq!(SUM_FLOOR, 2f64.powi(-100));
        assert_eq!(RESIDUAL_ROUNDING, 2f64.powi(-51));
        assert_eq!(SLOPE_ERROR, 2f64.powi(-32));
        assert_eq!(FAST_FROM, 2f64.powi(-10));
        assert_eq!(LAST as f64 / PER_UNIT, SERIES_BELOW);
    }

    #[test]
    fn the_remainder_bound_holds_at_the_grid_end() {
        // G_7(2.5) = 266075 (the majorant recurrence in exact integers), and the
        // remainder's factor 1.005 * G_7 / 8! * 2^-80 is below 2^-76.
        let (mut g0, mut g1) = (1u64, 5u64);
        for n in 1..7u64 {
            (g0, g1) = (g1, 5 * g1 + 2 * n * g0);
        }
        assert_eq!(g1, 266_075);
        assert!(1.005 * g1 as f64 / 40320.0 * 2f64.powi(-80) < REMAINDER);
    }

    #[test]
    fn the_table_is_taylor_of_erf() {
        // At a grid point itself (h = 0) the value is T0; a step of h away, the table's
        // polynomial equals erf_dd (the series) to within the bound's terms.
        let table = points();
        assert_eq!(table.len(), LAST);
        for j in [1, 2, 100, 512, 1000, 1279] {
            let p = table[j - 1];
            let c = j as f64 / PER_UNIT;
            assert_eq!(p.t0, erf_dd(c));
            for h in [2f64.powi(-10), -2f64.powi(-10), 3e-4] {
                let y = c + h;
                let h = y - c;
                let (e_h, e_l) = erf_dd(y);
                let poly = p.tail.iter().rev().fold(0.0, |acc, &t| t + h * acc);
                let (p1, p1_err) = two_prod(p.t1.0, h);
                let (v, v_err) = two_sum(p.t0.0 - e_h, p1);
                let diff = v + (v_err + (p.t0.1 - e_l + p1_err + p.t1.1 * h + h * h * poly));
                let bound = T1_ERROR * p.t1.0 * h.abs()
                    + TAIL_ERROR * p.tail_max * h * h
                    + REMAINDER * p.t1.0
                    + 2f64.powi(-80);
                assert!(
                    diff.abs() < bound,
                    "c = {c}, h = {h}: {diff:e} vs {bound:e}"
                );
                assert!(p.tail_max * h * h >= (h * h * poly).abs());
            }
        }
    }
}
