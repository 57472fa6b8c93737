//! [`super::erfinv`] rounded to float32, for float32 arguments: where a program's
//! `erfinv` is seen only through that rounding (timm's `trunc_normal_`: a float32
//! uniform, `erfinv_`, each step rounded to the float32 tensor), AS 241's start alone
//! decides the float32 result for nearly every argument, and the Newton step is skipped.
//!
//! # Why the bits are the same
//!
//! Write `RN32` for IEEE rounding to float32 (nearest, ties to even: Rust's `as f32`),
//! `y = erfinv(a)` for the library's binary64 value at `0 < a < 1` (the series' bits,
//! `erfinv_fast`'s proof) and `y0 = start(a)` for AS 241's start it refines.
//!
//! 1. For every float32 `a` in `(0, 1)`, `|y - y0| <= 2^-40 y0`. AS 241 is good to about
//!    `1e-16` relative; the bound is a finite fact about `2^30` arguments, and the sweep
//!    `exhaustive_start_is_within_the_bound_of_every_float32_result` checks it for every
//!    one of them (`y - y0` is exact by Sterbenz's lemma and `y0 2^-40` is exact, so the
//!    test's comparison is the bound itself). It passed on 2026-12-05 (194 s in release
//!    mode on the loaded 2-core machine; `make test-slow` runs it).
//! 2. So `y0 - y0 2^-40 <= y <= y0 + y0 2^-40`, and rounding to binary64 is monotonic:
//!    `lo = RN(y0 - y0 2^-40) <= RN(y) = y` and likewise `hi >= y`.
//! 3. `RN32` is monotonic: `RN32(lo) <= RN32(y) <= RN32(hi)`. Where the two ends are the
//!    same float32, that is `RN32(y)`. Elsewhere (`y0` within about `2^-40` of a float32
//!    rounding boundary: about one argument in `2^15`) the caller computes `RN32(erfinv(a))`.
//! 4. `erfinv(-a) = -erfinv(a)` and `RN32(-v) = -RN32(v)`: the sign is applied after.
//!
//! `y0` is `start(a)`'s bits on every lane: the central start itself, and for `a > 0.85`
//! AS 241's tail from `q = (1 - a) / 2` in its lane form, as `erfinv_fast` forms it.
//! Arguments that are not float32 values, `0` and `|a| >= 1` (and NaN) take `erfinv`.

use super::erfinv::{central_start, erfinv, CENTRAL_TO};
use crate::philox::Backend;

/// The bound of the module docs' step 1: `2^-40`.
const START_ERROR: f64 = f64::from_bits((1023 - 40) << 52);

/// Lanes per block: the program evaluator's block, enough for the tail lanes (`|a| >
/// 0.85`, about one in twenty for a uniform input) to be computed together.
const LANES: usize = 256;

/// `RN32(erfinv(x))` as a binary64, one value at a time (the definition).
#[inline]
fn rounded(x: f64) -> f64 {
    f64::from(erfinv(x) as f32)
}

/// The float32 result from AS 241's start `y0 = start(|x|)`, and whether the bound
/// decides it (module docs): `x` a float32 value in `(-1, 1)` other than zero, and both
/// ends of the bound rounding to the same float32.
#[inline(always)]
fn decide(x: f64, y0: f64) -> (f64, bool) {
    let a = x.abs();
    let margin = y0 * START_ERROR;
    let low = (y0 - margin) as f32;
    let high = (y0 + margin) as f32;
    let float32 = f64::from(x as f32) == x;
    let decided = float32 && a > 0.0 && a < 1.0 && low == high;
    (f64::from(low).copysign(x), decided)
}

/// The central start's float32 result on 64 lanes; bit `i` of the result is set where
/// lane `i` is left to [`erfinv_f32_block`]'s second pass (`|x| > 0.85`, or undecided).
// Lane loops index several arrays in step: a range loop is the form that vectorizes.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn central_lanes(x: &[f64; 64], out: &mut [f64; 64]) -> u64 {
    let mut decided = [false; 64];
    for i in 0..64 {
        let a = x[i].abs();
        let ok;
        (out[i], ok) = decide(x[i], central_start(a));
        decided[i] = ok && a <= CENTRAL_TO;
    }
    let mut pending = 0;
    for i in 0..64 {
        pending |= u64::from(!decided[i]) << i;
    }
    pending
}

/// `RN32(erfinv(x[i]))` into `out[i]` for at most [`LANES`] lanes: the central start on
/// every lane, 64 at a time; then the lanes it leaves, found by their bits: the tail
/// start (AS 241's, `erfinv_fast`'s lane form) on the float32 lanes with `0.85 < |x| <
/// 1`, gathered, and [`rounded`] on the rest and wherever the bound does not decide.
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
            *bits = central_lanes(&x64, &mut out64);
            out.copy_from_slice(&out64[..x.len()]);
        }
    }
    let (mut places, mut q, mut count) = ([0usize; LANES], [0.0; LANES], 0);
    for (chunk, &bits) in pending.iter().enumerate() {
        let mut bits = bits;
        while bits != 0 {
            let i = chunk * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let a = x[i].abs();
            if a > CENTRAL_TO && a < 1.0 {
                (places[count], q[count]) = (i, 0.5 * (1.0 - a));
                count += 1;
            } else {
                out[i] = rounded(x[i]);
            }
        }
    }
    let mut lower = [0.0; LANES];
    super::phi_inv_tail_slice(&q[..count], &mut lower[..count]);
    for (&i, &lower) in places[..count].iter().zip(&lower[..count]) {
        // `start(a)` for `a > 0.85`, as `erfinv_fast::tail_starts` forms it.
        let (value, decided) = decide(x[i], -lower * std::f64::consts::FRAC_1_SQRT_2);
        out[i] = if decided { value } else { rounded(x[i]) };
    }
}

/// `RN32(erfinv(x[i]))` into `out[i]`, [`LANES`] at a time ([`erfinv_f32_block`]).
#[inline(always)]
fn erfinv_f32_lanes(x: &[f64], out: &mut [f64]) {
    for (x, out) in x.chunks(LANES).zip(out.chunks_mut(LANES)) {
        erfinv_f32_block(x, out);
    }
}

/// `erfinv(x[i])` rounded to float32 (as a binary64) into `out[i]`, with the lane code
/// of `backend`: the same bits as [`super::erfinv`] then `as f32`, on every backend.
///
/// # Panics
/// If `x` and `out` differ in length, or this CPU cannot run `backend`.
pub fn erfinv_f32_slice_with(backend: Backend, x: &[f64], out: &mut [f64]) {
    assert_eq!(
        x.len(),
        out.len(),
        "erfinv_f32_slice: input and output lengths"
    );
    assert!(
        backend.is_available(),
        "backend {backend:?} is not supported by this CPU"
    );
    match backend {
        Backend::Scalar => {
            for (slot, &v) in out.iter_mut().zip(x) {
                *slot = rounded(v);
            }
        }
        // SAFETY: AVX2 support was just checked.
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => unsafe { x86::avx2(x, out) },
        // SAFETY: AVX-512F support was just checked (`is_available` is false for this
        // backend in builds without the cfg, so the assert has already panicked there).
        #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
        Backend::Avx2PhiloxAvx512Lanes => unsafe { x86::avx512(x, out) },
        _ => erfinv_f32_lanes(x, out),
    }
}

/// [`erfinv_f32_slice_with`] with this CPU's fastest lane code ([`Backend::detect`]).
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn erfinv_f32_slice(x: &[f64], out: &mut [f64]) {
    erfinv_f32_slice_with(Backend::detect(), x, out);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::erfinv_f32_lanes;

    /// [`erfinv_f32_lanes`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2(x: &[f64], out: &mut [f64]) {
        erfinv_f32_lanes(x, out);
    }

    /// [`erfinv_f32_lanes`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(shardinit_avx512)] // Rust >= 1.89: see build.rs
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn avx512(x: &[f64], out: &mut [f64]) {
        erfinv_f32_lanes(x, out);
    }
}

#[cfg(test)]
mod tests {
    use super::super::erfinv::start;
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
        let margin = y0 * START_ERROR;
        (y0 - margin) as f32 == (y0 + margin) as f32
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
