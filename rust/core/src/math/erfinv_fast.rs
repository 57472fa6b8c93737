//! The fast path of [`super::erfinv`]: the same Newton step, its residual from a table
//! instead of a series, used only where a proven error bound shows that it rounds to the
//! bits of the series' result (Ziv's strategy, as correctly rounded libraries use it).
//!
//! # What must be reproduced
//!
//! For `2^-10 <= y0 < 2.5` the series path ([`super::erfinv::erfinv_series`]) returns
//! `RN(y0 - d_s)`, with `d_s = RN(r_s / s)`, `s = RN(2/sqrt(pi)) * exp(-y0^2)` (this
//! module computes the same `s` by the same operations, so it has the same bits) and
//! `r_s = RN(e - a)`, `e` the double-double of `erf(y0)` from the Maclaurin series
//! (`RN` is IEEE round to nearest even). Only `r_s` is costly (up to 64 terms of
//! double-double arithmetic). Here `r_f`, a cheaper value of `erf(y0) - a`, comes with a
//! bound `rho >= |r_s - r_f|`, so `|d_s - d_f| <= beta` for `d_f = RN(r_f / s)`. `RN` is
//! monotonic: with `v_up >= d_s >= v_down`, `RN(y0 - v_up) <= RN(y0 - d_s) <= RN(y0 -
//! v_down)`, and when the two ends are the same binary64 it is the series' result.
//! Otherwise (about one input in a thousand) the caller runs the series.
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
//! So `rho = 2^-88/s + 2^-65 T1 |h| + 2^-47 M h^2 + 2^-76 T1 + 2^-100 + 2^-51 |r_f|`, and
//! `|d_s - d_f| <= rho/s (1 + u) + 2u |d_f| + u rho / s`. Computed in binary64, each
//! of `rho`'s six positive terms and their sum lose at most `8u` relative, so `beta =
//! 2 rho / s + 2^-50 |d_f|` is above the bound, and above it by more than `u (|d_f| +
//! beta)`: `v_up = RN(d_f + beta) >= d_s` and `v_down = RN(d_f - beta) <= d_s`.
//!
//! The table (1280 entries of 11 binary64s, 113 KiB) is computed once, on first use,
//! by the same fixed IEEE operations everywhere, so its bits are the same on every CPU
//! (and they only decide speed: a wrong entry would be caught by the bound only if the
//! bound accounted for it, which is why each entry's error is part of `rho`).

use std::sync::OnceLock;

use super::compensated::{exp_parts, two_sum};
use super::erfinv::{erf_dd, mul_dd, TWO_OVER_SQRT_PI};
use super::{exp, two_pow, two_prod};

/// Grid points per unit of `y0`.
const PER_UNIT: f64 = 512.0;
/// The largest grid index: `c = 2.5`, the series' end ([`super::erfinv::SERIES_BELOW`]).
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
const QUOTIENT_ROUNDING: f64 = f64::from_bits((1023 - 50) << 52);

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
fn points() -> &'static [Point] {
    static POINTS: OnceLock<Vec<Point>> = OnceLock::new();
    POINTS.get_or_init(|| (1..=LAST).map(point).collect())
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
    if !(FAST_FROM..super::erfinv::SERIES_BELOW).contains(&y0) {
        return None;
    }
    // The same slope as the series path, by the same operations.
    let slope = TWO_OVER_SQRT_PI.0 * exp(-(y0 * y0));
    // y0 * 512 is exact and below 1280, so + 0.5 is too: j is y0's nearest grid index.
    let j = (y0 * PER_UNIT + 0.5) as usize;
    let p = &points()[j - 1];
    let h = y0 - j as f64 / PER_UNIT;
    let poly = p.tail.iter().rev().fold(0.0, |acc, &t| t + h * acc);
    let tail = (h * h) * poly;
    let (p1, p1_err) = two_prod(p.t1.0, h);
    let (s, s_err) = two_sum(p.t0.0, -a);
    let (v, v_err) = two_sum(s, p1);
    let low = v_err + (s_err + (p.t0.1 + (p1_err + (p.t1.1 * h + tail))));
    let residual = v + low;
    let d = residual / slope;
    let rho = SLOW_AND_T0 / slope
        + T1_ERROR * p.t1.0 * h.abs()
        + TAIL_ERROR * p.tail_max * (h * h)
        + REMAINDER * p.t1.0
        + SUM_FLOOR
        + RESIDUAL_ROUNDING * residual.abs();
    let beta = 2.0 * rho / slope + QUOTIENT_ROUNDING * d.abs();
    let low_end = y0 - (d + beta);
    let high_end = y0 - (d - beta);
    (low_end == high_end).then_some(low_end)
}

#[cfg(test)]
mod tests {
    use super::super::erfinv::{erfinv, erfinv_series, start};
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

    /// Every float32 in (0, 1) (every value a float32 uniform fill can feed `erfinv`,
    /// with its negative), the edges and 2^28 random binary64s, fast == series bit for
    /// bit. Minutes: `make test-slow` runs it (release profile).
    #[test]
    #[ignore = "exhaustive: minutes in release mode (make test-slow)"]
    fn exhaustive_fast_path_gives_the_series_bits_for_every_float32_input() {
        let float32s = (1u32..0x3f80_0000).into_par_iter();
        let fast = float32s
            .filter(|&bits| {
                let a = f64::from(f32::from_bits(bits));
                same_bits(a);
                decided(a)
            })
            .count();
        println!(
            "float32 inputs in (0, 1): {fast} of {} decided fast",
            0x3f80_0000 - 1
        );
        edges().par_iter().for_each(|&a| same_bits(a));
        let chunks = 1u64 << 12;
        (0..chunks).into_par_iter().for_each(|chunk| {
            let mut state = chunk;
            for _ in 0..(1u64 << 28) / chunks {
                let w = splitmix(&mut state);
                let a = if w & 1 == 0 {
                    (w >> 11) as f64 * 2f64.powi(-53)
                } else {
                    f64::from_bits(w >> 2) // any bits below 2^1022: the in-range ones
                };
                if a > 0.0 && a < 1.0 {
                    same_bits(a);
                }
            }
        });
    }

    #[test]
    fn the_bound_constants_are_their_powers_of_two() {
        assert_eq!(SLOW_AND_T0, 2f64.powi(-88));
        assert_eq!(T1_ERROR, 2f64.powi(-65));
        assert_eq!(TAIL_ERROR, 2f64.powi(-47));
        assert_eq!(REMAINDER, 2f64.powi(-76));
        assert_eq!(SUM_FLOOR, 2f64.powi(-100));
        assert_eq!(RESIDUAL_ROUNDING, 2f64.powi(-51));
        assert_eq!(QUOTIENT_ROUNDING, 2f64.powi(-50));
        assert_eq!(FAST_FROM, 2f64.powi(-10));
        assert_eq!(LAST as f64 / PER_UNIT, super::super::erfinv::SERIES_BELOW);
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
