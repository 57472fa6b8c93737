//! The scalar operations of programs that are not IEEE-754 operations themselves, each
//! a fixed sequence of them: the rounding to a dtype, torch's `round`, IEEE 754-2019's
//! `minimum`/`maximum` and Python's float `%` and `//`.

use half::{bf16, f16};

use crate::init::{Dtype, Element};

/// `x` rounded to `dtype` by stream-format.md §4's rule, read back as binary64.
#[inline]
pub fn round_to(dtype: Dtype, x: f64) -> f64 {
    match dtype {
        Dtype::F64 => x,
        Dtype::F32 => f64::from(<f32 as Element>::from_f64(x)),
        Dtype::BF16 => <bf16 as Element>::from_f64(x).to_f64(),
        Dtype::F16 => <f16 as Element>::from_f64(x).to_f64(),
    }
}

/// `2^52`: from it on every binary64 is an integer.
const TWO52: f64 = 4_503_599_627_370_496.0;

/// `x` rounded to the nearest integer, ties to even, with `x`'s sign (`-0.3` gives
/// `-0.0`, as torch's `round`): `(|x| + 2^52) - 2^52` below `2^52`, where the sum
/// rounds to the integer by IEEE's round-to-nearest-even and the difference is exact;
/// `x` itself from `2^52` on and for infinities and NaN.
pub fn round_half_even(x: f64) -> f64 {
    if x.abs() < TWO52 {
        ((x.abs() + TWO52) - TWO52).copysign(x)
    } else {
        x
    }
}

/// IEEE 754-2019 `minimum`: NaN if either is NaN, `-0 < +0`.
pub fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        // Equal: identical bits, or zeros of two signs (OR keeps the minus sign).
        f64::from_bits(a.to_bits() | b.to_bits())
    } else if a < b {
        a
    } else {
        b
    }
}

/// IEEE 754-2019 `maximum`: NaN if either is NaN, `-0 < +0`.
pub fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        // Equal: identical bits, or zeros of two signs (AND drops the minus sign).
        f64::from_bits(a.to_bits() & b.to_bits())
    } else if a > b {
        a
    } else {
        b
    }
}

/// torch's `remainder` of floats (Python's `%` but for the sign of a zero result):
/// `fmod(a, b)`, plus `b` when the remainder is non-zero and its sign differs from
/// `b`'s; a zero remainder keeps `fmod`'s sign (`a`'s). `fmod` is exact (the remainder
/// truncated toward zero is always representable), so every implementation gives the
/// same bits.
pub fn modulo(a: f64, b: f64) -> f64 {
    let m = a % b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        m + b
    } else {
        m
    }
}

/// torch's `div(rounding_mode="floor")` of floats (`div_floor_floating`, the same as
/// CPython's `float_floor_div`): `a / b` when `b == 0`; else from the exact
/// `fmod(a, b)`: `div = (a - mod) / b`, decreased by one when `mod`'s sign differs from
/// `b`'s, then rounded to the nearest integer below (up when `div - floor(div) > 0.5`);
/// a zero quotient takes the sign of `a / b`.
pub fn floor_divide(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        div -= 1.0;
    }
    if div != 0.0 {
        let mut floordiv = div.floor();
        if div - floordiv > 0.5 {
            floordiv += 1.0;
        }
        floordiv
    } else {
        0f64.copysign(a / b)
    }
}
