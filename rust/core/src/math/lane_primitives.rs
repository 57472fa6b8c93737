//! The primitives every lane form of [`crate::math`] is written with: the lane count,
//! the integer shifter and the exponent add ([`super::lanes`] and
//! `elementary::lanes` share them), and the one backend dispatch of slice functions
//! ([`slice_with`]: the lane functions, the fast erfinv and the float32 erfinv), which
//! compiles a function's lane code once more for each backend. Why lanes give the
//! scalar functions' bits: [`super::lanes`].

use crate::Backend;

/// Lanes per step: a multiple of every backend's vector width.
pub(in crate::math) const LANES: usize = 16;

/// `2^52 + 2^51`: added to an integer-valued binary64 below `2^51` in magnitude, the sum's
/// low mantissa bits are that integer (two's complement), exactly.
pub(in crate::math) const SHIFTER: f64 = 6_755_399_441_055_744.0;

/// `2^k * y` by an integer add to the exponent field, as [`super::exp`] does for
/// `k >= -1021`; `k` is an integer-valued binary64 (see the module comment).
#[inline(always)]
pub(in crate::math) fn add_to_exponent(y: f64, k: f64) -> f64 {
    let k_bits = (k + SHIFTER).to_bits().wrapping_sub(SHIFTER.to_bits());
    f64::from_bits(y.to_bits().wrapping_add(k_bits << 52))
}

/// A function of binary64s computed a slice at a time: its scalar definition, and lane
/// code that gives the definition's bits for every element ([`slice_with`] compiles the
/// lane code once more for each backend).
pub(in crate::math) trait SliceFunction {
    /// The name its slice function's panics give.
    const NAME: &'static str;
    /// The function of one value (the definition, and the scalar backend).
    fn definition(&self) -> fn(f64) -> f64;
    /// The lane code over a whole slice: `#[inline(always)]` in every impl, so that it is
    /// compiled into each backend's copy with that backend's target features.
    fn lanes(&self, x: &[f64], out: &mut [f64]);
}

/// `function` of every `x[i]` into `out[i]`, with the lane code of `backend` (every
/// backend gives the definition's bits): the one backend dispatch of [`super::lanes_slice`],
/// `erfinv_slice` and `erfinv_f32_slice`.
///
/// # Panics
/// If `x` and `out` differ in length, or this CPU cannot run `backend`.
#[inline(always)]
pub(in crate::math) fn slice_with<F: SliceFunction>(
    backend: Backend,
    function: &F,
    x: &[f64],
    out: &mut [f64],
) {
    assert_eq!(x.len(), out.len(), "{}: input and output lengths", F::NAME);
    assert!(
        backend.is_available(),
        "backend {backend:?} is not supported by this CPU"
    );
    match backend {
        Backend::Scalar => {
            let f = function.definition();
            for (slot, &v) in out.iter_mut().zip(x) {
                *slot = f(v);
            }
        }
        // SAFETY: AVX2 support was just checked.
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => unsafe { x86::avx2(function, x, out) },
        // SAFETY: AVX-512F support was just checked (`is_available` is false for this
        // backend in builds without the cfg, so the assert has already panicked there).
        #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
        Backend::Avx2PhiloxAvx512Lanes => unsafe { x86::avx512(function, x, out) },
        _ => function.lanes(x, out),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::SliceFunction;

    /// `function`'s lane code compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn avx2<F: SliceFunction>(function: &F, x: &[f64], out: &mut [f64]) {
        function.lanes(x, out);
    }

    /// `function`'s lane code compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(shardinit_avx512)] // Rust >= 1.89: see build.rs
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn avx512<F: SliceFunction>(function: &F, x: &[f64], out: &mut [f64]) {
        function.lanes(x, out);
    }
}
