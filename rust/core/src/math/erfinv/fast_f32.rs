//! [`erfinv`](fn@crate::math::erfinv) rounded to float32, for float32 arguments: where a program's
//! `erfinv` is seen only through that rounding (timm's `trunc_normal_`: a float32
//! uniform, `erfinv_`, each step rounded to the float32 tensor), a start good to
//! `2^-40` decides the float32 result for nearly every argument, and the Newton step is
//! skipped.
//!
//! # Why the bits are the same
//!
//! Write `RN32` for IEEE rounding to float32 (nearest, ties to even: Rust's `as f32`),
//! `y = erfinv(a)` for the library's binary64 value at `0 < a < 1` (the series' bits,
//! [`super::fast`]'s proof) and `y0 = start(a)` for this module's start ([`start`]: a
//! rational function fitted for it up to `a = 0.9`, [`central_start`]; above, AS 241's
//! tail with a branch-free log, [`tail_start`]).
//!
//! 1. For every float32 `a` in `(0, 1)`, `|y - y0| <= 2^-40 y0`. The approximations are
//!    good to about `2^-44` and `2^-52` relative (a fit's error and AS 241's); the
//!    bound is a finite fact about `2^30` arguments,
//!    and the sweep `exhaustive_start_is_within_the_bound_of_every_float32_result` checks
//!    it for every one of them (`y - y0` is exact by Sterbenz's lemma and `y0 2^-40` is
//!    exact, so the test's comparison is the bound itself). `make test-slow` runs it.
//! 2. Where `2^-100 <= a` (so `y0 >= 2^-101`: float32 normals, whose ulp is `2^29`
//!    binary64 ulps of the same binade), `2^-40 y0 < 2^13 ulp(y0)` (`y0 < 2^(e+1)`,
//!    `ulp(y0) = 2^(e-52)`). The values where `RN32` changes (the midpoints between
//!    float32s) in `y0`'s binade are those whose low 29 significand bits are `2^28`; the
//!    one below the binade is `2^27` ulps below its start. So where the low 29 bits of
//!    `y0` differ from `2^28` by more than `2^13`, no midpoint lies within `2^-40 y0` of
//!    `y0`, hence none between `y0` and `y`, and `RN32(y) = RN32(y0)` ([`round_start`]:
//!    the bits rounded at bit 29, carrying into the exponent; there is no tie).
//!    Elsewhere (about one argument in `2^15`) the caller computes `RN32(erfinv(a))`.
//! 3. `erfinv(-a) = -erfinv(a)` and `RN32(-v) = -RN32(v)`: the sign is applied after.
//!
//! `y0` is [`start`]'s bits on every lane: each lane performs the scalar function's
//! operations (IEEE-754 binary64, no fused multiply-add; the integer steps exact).
//! Arguments that are not float32 values, below `2^-100`, and `|a| >= 1` (and NaN)
//! take `erfinv`.

use super::fast::erfinv;
use crate::math::{C0, C1, C2, C3, C4, C5, C6, C7, D1, D2, D3, D4, D5, D6, D7};
use crate::math::{LG1, LG2, LG3, LG4, LG5, LG6, LG7, LN2_HI, LN2_LO};
use crate::philox::Backend;

/// The bound of the module docs' step 1: `2^-40`.
#[cfg(test)]
const START_ERROR: f64 = f64::from_bits((1023 - 40) << 52);

/// The significand bits of a binary64 below a float32's 24 (the low 29).
const BELOW_FLOAT32: u64 = (1 << 29) - 1;
/// Half a float32 ulp in units of the binary64 ulp: where the low 29 bits of a
/// binary64 are this, it is halfway between two float32s.
const HALF_FLOAT32_ULP: u64 = 1 << 28;
/// The bound of step 1 in units of the binary64 ulp of `y0`: `2^-40 y0 < 2^13 ulp(y0)`.
const MARGIN_ULPS: u64 = 1 << 13;
/// The smallest argument the lanes decide (`2^-100`): from there up, the argument and
/// the start are normal float32 magnitudes, so that the float32 ulp is `2^29` binary64
/// ulps (below, float32 subnormals; [`rounded`] takes them).
const DECIDED_FROM: f64 = f64::from_bits((1023 - 100) << 52);

/// The last argument of the central start ([`central_start`]); the tail start above.
const CENTRAL_TO: f64 = 0.9;

// The central start's rational function of `u = a^2 - 0.405` (0.405 = 0.9^2 / 2: `u` is
// centered on the interval), `tools/fit_erfinv_start.py 0.9 7 6`: Lawson's iteration
// for the minimax relative error of `erfinv(a) / a` on `[0, 0.9]`, 2^-44.7 on the fit's
// nodes; evaluated as below in binary64, 2^-44.4 on 20,000 float32 arguments (the sweep
// checks every one against the bound). Highest degree first, as Horner takes them.
const CENTER: f64 = f64::from_bits(0x3fd9eb851eb851ec);
const P7: f64 = f64::from_bits(0x3f5108b51be6b34b);
const P6: f64 = f64::from_bits(0x3fb029919f44d09d);
const P5: f64 = f64::from_bits(0xbff43645e924b16b);
const P4: f64 = f64::from_bits(0x4018399f015eedc7);
const P3: f64 = f64::from_bits(0xc028587e359966ce);
const P2: f64 = f64::from_bits(0x4027beff54c313fd);
const P1: f64 = f64::from_bits(0xc0164aba125c98c0);
const P0: f64 = f64::from_bits(0x3ff026c5c221e2fe);
const Q6: f64 = f64::from_bits(0x3fcdc08eb8a75ca7);
const Q5: f64 = f64::from_bits(0xc0044dd94966c898);
const Q4: f64 = f64::from_bits(0x4022a4d728de2cb5);
const Q3: f64 = f64::from_bits(0xc02fc52ba676168c);
const Q2: f64 = f64::from_bits(0x402b93c8e085f0ad);
const Q1: f64 = f64::from_bits(0xc017b1e69bdcc8ad);
const Q0: f64 = f64::from_bits(0x3ff0000000000000);

/// `erfinv(a)` for `0 <= a <= 0.9` within about `2^-44` relative: `a N(u) / D(u)` with
/// `u = a^2 - 0.405`, Horner's rule, one division (no table, so every lane runs it).
#[inline(always)]
fn central_start(a: f64) -> f64 {
    let u = a * a - CENTER;
    let n = ((((((P7 * u + P6) * u + P5) * u + P4) * u + P3) * u + P2) * u + P1) * u + P0;
    let d = (((((Q6 * u + Q5) * u + Q4) * u + Q3) * u + Q2) * u + Q1) * u + Q0;
    a * n / d
}

/// Lanes per block: the program evaluator's block, enough for the tail lanes (`|a| >
/// 0.9`, one in ten for a uniform input on `(-1, 1)`) to fill vectors.
const LANES: usize = 256;
// A lane's place in its block is a byte ([`TailLanes`]).
const _: () = assert!(LANES <= 256);
/// Lanes per vector step of the tail pass: the widest backend's (AVX-512, 8 binary64s).
const VECTOR: usize = 8;

/// `RN32(erfinv(x))` as a binary64, one value at a time (the definition).
#[inline]
fn rounded(x: f64) -> f64 {
    f64::from(erfinv(x) as f32)
}

/// The start `y0` of the module docs for a float32 `a` in `(0, 1)`: [`central_start`]
/// up to 0.9, [`tail_start`] above. The lanes compute the same bits
/// (the central lanes and [`TailLanes::scatter`] call these functions per lane).
#[cfg(test)]
fn start(a: f64) -> f64 {
    if a <= CENTRAL_TO {
        central_start(a)
    } else {
        tail_start(a)
    }
}

/// Whether `a = |x|` is an argument the lanes may decide: a float32 value (its low 29
/// significand bits zero) in `[2^-100, 1)`.
#[inline(always)]
fn is_float32_argument(a: f64) -> bool {
    a.to_bits() & BELOW_FLOAT32 == 0 && (DECIDED_FROM..1.0).contains(&a)
}

/// `RN32(y0)` for a start `y0 >= 2^-101`, and whether it is `RN32(y)` for every `y`
/// within `2^-40 y0` of `y0` (module docs, step 2): the bits of `y0` rounded at bit 29
/// (no tie: a tie is undecided), decided where `y0` is more than `2^13` binary64 ulps
/// from the nearest float32 rounding boundary.
#[inline(always)]
fn round_start(y0: f64) -> (f64, bool) {
    let bits = y0.to_bits();
    // `|below - 2^28| > 2^13` as one unsigned comparison: the undecided `below` are the
    // `2^14 + 1` values from `2^28 - 2^13` up.
    let below = bits & BELOW_FLOAT32;
    let decided = below.wrapping_sub(HALF_FLOAT32_ULP - MARGIN_ULPS) > 2 * MARGIN_ULPS;
    let rounded = (bits + HALF_FLOAT32_ULP) & !BELOW_FLOAT32;
    (f64::from_bits(rounded), decided)
}

/// The float32 result of lane `x` from the central start, and whether it is decided:
/// `|x|` a float32 argument up to 0.9 and [`round_start`] deciding.
#[inline(always)]
fn central_lane(x: f64) -> (f64, bool) {
    let a = x.abs();
    let (value, decided) = round_start(central_start(a));
    (
        value.copysign(x),
        decided && is_float32_argument(a) && a <= CENTRAL_TO,
    )
}

/// The float32 result of a tail lane `x` (`|x|` a float32 argument above 0.9) from
/// [`tail_start`]; NaN where the bound does not decide it, or `x` is no tail lane (a
/// tail result is finite).
#[inline(always)]
fn tail_lane(x: f64) -> f64 {
    let a = x.abs();
    let (value, decided) = round_start(tail_start(a));
    if decided && a > CENTRAL_TO && is_float32_argument(a) {
        value.copysign(x)
    } else {
        f64::NAN
    }
}

/// `erfinv(a) = -PhiInv(q) / sqrt(2)` from `q = (1 - a) / 2` (exact for a float32 `a`
/// in `(0.9, 1)`: `2^-25 <= q < 0.05`), as AS 241's tail: `r = sqrt(-log(q))`, its
/// `r <= 5` rational function (`r <= 4.2` here), with the log of [`log_of_tail`].
#[inline(always)]
fn tail_start(a: f64) -> f64 {
    let q = 0.5 * (1.0 - a);
    let r = (-log_of_tail(q)).sqrt() - 1.6;
    let num = ((((((C7 * r + C6) * r + C5) * r + C4) * r + C3) * r + C2) * r + C1) * r + C0;
    let den = ((((((D7 * r + D6) * r + D5) * r + D4) * r + D3) * r + D2) * r + D1) * r + 1.0;
    num / den * std::f64::consts::FRAC_1_SQRT_2
}

/// `log(q)` for a normal positive `q`, without branches (so that lanes compute it):
/// `q = 2^k m` with `m` in `[sqrt(2)/2, sqrt(2))` (exact), then fdlibm's `log(1 + f)`
/// for `f = m - 1` (exact): `f - s (f - R(s^2))` with `s = f / (2 + f)`. Within a few
/// binary64 ulps of `log(q)`, so far inside the bound of step 1 (which the sweep checks
/// on these bits, not on this estimate).
#[inline(always)]
fn log_of_tail(q: f64) -> f64 {
    const SIGNIFICAND: u64 = (1 << 52) - 1;
    const TWO52: f64 = 4_503_599_627_370_496.0;
    let bits = q.to_bits();
    let m = f64::from_bits((bits & SIGNIFICAND) | 1f64.to_bits());
    // The biased exponent `e` read as `2^52 + e` (exact), less the bias.
    let k = f64::from_bits((bits >> 52) | TWO52.to_bits()) - (TWO52 + 1023.0);
    let high = m > std::f64::consts::SQRT_2;
    let (m, k) = if high { (0.5 * m, k + 1.0) } else { (m, k) };
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    k * LN2_HI - ((s * (f - (t2 + t1)) - k * LN2_LO) - f)
}

/// The central start's float32 result on 64 lanes; bit `i` of the result is set where
/// lane `i` is left to [`erfinv_f32_block`]'s second pass (`|x| > 0.9`, or undecided).
// Lane loops index several arrays in step: a range loop is the form that vectorizes.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn central_lanes(x: &[f64; 64], out: &mut [f64; 64]) -> u64 {
    let mut decided = [false; 64];
    for i in 0..64 {
        (out[i], decided[i]) = central_lane(x[i]);
    }
    let mut pending = 0;
    for i in 0..64 {
        pending |= u64::from(!decided[i]) << i;
    }
    pending
}

/// The lanes of one block the central pass left, gathered with their places (`LANES`
/// is 256: a byte): nearly all are tail lanes (`|x|` a float32 value in `(0.9, 1)`).
struct TailLanes {
    x: [f64; LANES],
    places: [u8; LANES],
    count: usize,
}

impl TailLanes {
    /// The lanes the central pass left (`pending`, one bit per lane), in order.
    #[inline(always)]
    fn gather(x: &[f64], pending: &[u64; LANES / 64]) -> Self {
        // Padding: a tail argument, so that whole vectors run.
        let mut tail = TailLanes {
            x: [0.95; LANES],
            places: [0; LANES],
            count: 0,
        };
        for (chunk, &bits) in pending.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let i = chunk * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                (tail.places[tail.count], tail.x[tail.count]) = (i as u8, x[i]);
                tail.count += 1;
            }
        }
        tail
    }

    /// The tail start's float32 results of the gathered lanes into their places in
    /// `out` ([`rounded`] where the bound does not decide, and on the lanes that are no
    /// tail lanes: undecided central lanes, zero, `|x| >= 1`, NaN, values that are not
    /// float32s): whole vectors of [`tail_lane`] in place, then one pass that puts them
    /// back.
    #[inline(always)]
    fn scatter(mut self, x: &[f64], out: &mut [f64]) {
        let padded = self.count.next_multiple_of(VECTOR);
        for lanes in self.x[..padded].chunks_exact_mut(VECTOR) {
            for lane in lanes {
                *lane = tail_lane(*lane);
            }
        }
        for (&value, &i) in self.x[..self.count].iter().zip(&self.places) {
            let i = usize::from(i);
            out[i] = if value.is_nan() { rounded(x[i]) } else { value };
        }
    }
}

/// `RN32(erfinv(x[i]))` into `out[i]` for at most [`LANES`] lanes: the central start on
/// every lane, 64 at a time; then the lanes it leaves, found by their bits: the tail
/// start on the float32 lanes with `0.9 < |x| < 1`, gathered, and
/// [`rounded`] on the rest and wherever the bound does not decide.
#[inline(always)]
fn erfinv_f32_block(x: &[f64], out: &mut [f64]) {
    let mut pending = [0u64; LANES / 64];
    for (bits, (x, out)) in pending.iter_mut().zip(x.chunks(64).zip(out.chunks_mut(64))) {
        if let (Ok(x), Ok(out)) = (
            <&[f64; 64]>::try_from(x),
            <&mut [f64; 64]>::try_from(&mut *out),
        ) {
            *bits = central_lanes(x, out);
        } else {
            // The remainder, padded with an argument the central start decides.
            let (mut x64, mut out64) = ([0.5; 64], [0.0; 64]);
            x64[..x.len()].copy_from_slice(x);
            *bits = central_lanes(&x64, &mut out64) & (u64::MAX >> (64 - x.len()));
            out.copy_from_slice(&out64[..x.len()]);
        }
    }
    TailLanes::gather(x, &pending).scatter(x, out);
}

/// `RN32(erfinv(x[i]))` into `out[i]`, [`LANES`] at a time ([`erfinv_f32_block`]).
#[inline(always)]
fn erfinv_f32_lanes(x: &[f64], out: &mut [f64]) {
    for (x, out) in x.chunks(LANES).zip(out.chunks_mut(LANES)) {
        erfinv_f32_block(x, out);
    }
}

/// `erfinv(x[i])` rounded to float32 (as a binary64) into `out[i]`, with the lane code
/// of `backend`: the same bits as [`erfinv`](fn@crate::math::erfinv) then `as f32`, on every backend.
///
/// # Panics
/// If `x` and `out` differ in length, or this CPU cannot run `backend`.
pub fn erfinv_f32_slice_with(backend: Backend, x: &[f64], out: &mut [f64]) {
    crate::math::lane_primitives::slice_with(backend, &ErfinvToF32, x, out);
}

/// `RN32(erfinv(x))` as a slice function: [`rounded`], its lanes [`erfinv_f32_lanes`].
struct ErfinvToF32;

impl crate::math::lane_primitives::SliceFunction for ErfinvToF32 {
    const NAME: &'static str = "erfinv_f32_slice";
    fn definition(&self) -> fn(f64) -> f64 {
        rounded
    }
    #[inline(always)]
    fn lanes(&self, x: &[f64], out: &mut [f64]) {
        erfinv_f32_lanes(x, out);
    }
}

/// [`erfinv_f32_slice_with`] with this CPU's fastest lane code ([`Backend::detect`]).
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn erfinv_f32_slice(x: &[f64], out: &mut [f64]) {
    erfinv_f32_slice_with(Backend::detect(), x, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// Whether the bound of step 1 holds at the float32 `a` (panics naming it if not),
    /// and whether the lane code decides `a` itself.
    fn within_bound(a: f64) -> bool {
        let (y, y0) = (erfinv(a), start(a));
        assert!(
            (y - y0).abs() <= y0 * START_ERROR,
            "erfinv({a:e}) = {y:e}, start {y0:e}"
        );
        round_start(y0).1
    }

    /// Every float32 in `(0, 1)`, as a float32 uniform fill feeds `erfinv` (up to the
    /// sign): the bound the module docs' proof rests on. A minute or so in release mode
    /// (`make test-slow`).
    #[test]
    #[ignore = "exhaustive: minutes in release mode (make test-slow)"]
    fn exhaustive_start_is_within_the_bound_of_every_float32_result() {
        let float32s = 0x3f80_0000 - 1;
        let decided = (1u32..=float32s)
            .into_par_iter()
            .filter(|&bits| within_bound(f64::from(f32::from_bits(bits))))
            .count();
        println!("float32 inputs in (0, 1): {decided} of {float32s} decided by the start");
        assert!(decided as f64 > 0.999 * float32s as f64, "{decided}");
    }

    /// The float32 inputs of both signs, spread over every binade (a quick sample of
    /// the sweep above), the edges, and inputs that are not float32 values.
    fn inputs() -> Vec<f64> {
        let mut x = Vec::new();
        for bits in (1u32..0x3f80_0000).step_by(997) {
            let a = f64::from(f32::from_bits(bits));
            x.extend([a, -a]);
        }
        let one_below = f64::from(f32::from_bits(0x3f7f_ffff));
        x.extend([0.0, -0.0, 1.0, -1.0, 1.5, -2.0, one_below, -one_below]);
        x.extend([
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.85,
            -0.85,
            0.9,
            -0.9,
            f64::from(0.9f32),
            f64::from(-0.9f32),
            1e-300,
        ]);
        x.extend([
            0.1,
            -0.3,
            0.7,
            0.999_999_9,
            f64::from(f32::MIN_POSITIVE) / 3.0,
        ]);
        x
    }

    #[test]
    fn sampled_float32_inputs_are_within_the_bound() {
        let sample: Vec<f64> = inputs()
            .into_iter()
            .filter(|&a| a > 0.0 && a < 1.0 && f64::from(a as f32) == a)
            .collect();
        assert!(sample.len() > 1_000_000);
        let decided = sample.par_iter().filter(|&&a| within_bound(a)).count();
        assert!(decided as f64 > 0.999 * sample.len() as f64, "{decided}");
    }

    #[test]
    fn every_backend_gives_erfinv_rounded_to_float32() {
        let x = inputs();
        let want: Vec<u64> = x.iter().map(|&v| rounded(v).to_bits()).collect();
        for backend in Backend::available() {
            for len in [x.len(), x.len() - 3, 5] {
                let mut out = vec![0.0; len];
                erfinv_f32_slice_with(backend, &x[..len], &mut out);
                let got: Vec<u64> = out.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want[..len], "{backend:?}");
            }
        }
    }
}
