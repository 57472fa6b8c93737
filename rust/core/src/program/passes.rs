//! The passes of a block: each step kind over a register's block of values, into the
//! step's register (the math functions in the backend's lanes, the rest loops the
//! compiler vectorizes), shared by the evaluator and the hoisted columns.

use super::builder::Table;
use super::ops::{BinaryOp, UnaryOp};
use super::scalar::{floor_divide, maximum, minimum, modulo, round_half_even, round_to};
use crate::init::{Dtype, Sampler};
use crate::math;
use crate::philox::Backend;

#[inline(always)]
pub(super) fn source(
    sampler: &Sampler,
    dtype: Dtype,
    two_words: bool,
    words: &[u32],
    dst: &mut [f64],
) {
    if let Sampler::Constant { value } = *sampler {
        dst.fill(round_to(dtype, value));
    } else if two_words {
        for (slot, pair) in dst.iter_mut().zip(words.chunks_exact(2)) {
            *slot = round_to(dtype, sampler.two_words(pair[0], pair[1]));
        }
    } else {
        for (slot, &word) in dst.iter_mut().zip(words) {
            *slot = round_to(dtype, sampler.one_word(word));
        }
    }
}

/// `where(c, a, b)` of each element: `a` where `c` is not zero.
#[inline(always)]
pub(super) fn select(c: &[f64], a: &[f64], b: &[f64], dst: &mut [f64]) {
    for (((slot, &c), &a), &b) in dst.iter_mut().zip(c).zip(a).zip(b) {
        *slot = if c != 0.0 { a } else { b };
    }
}

/// [`super::steps::Step::Clamp`] of each element: `bound` where `x op bound` holds, else `x` (a NaN
/// `x` compares false and is kept, as the `where` keeps it).
#[inline(always)]
pub(super) fn clamp(op: BinaryOp, x: &[f64], bound: &[f64], dst: &mut [f64]) {
    // One loop per comparison, so that each vectorizes.
    match op {
        BinaryOp::Lt => map2(x, bound, dst, |x, b| if x < b { b } else { x }),
        BinaryOp::Gt => map2(x, bound, dst, |x, b| if x > b { b } else { x }),
        _ => unreachable!("a clamp compares by lt or gt (`clamps`)"),
    }
}

/// [`super::steps::Step::ClampPair`] of each element: [`clamp`] by `ops[0]` and `bounds[0]`, then by
/// `ops[1]` and `bounds[1]`.
#[inline(always)]
pub(super) fn clamp_pair(ops: [BinaryOp; 2], x: &[f64], bounds: [&[f64]; 2], dst: &mut [f64]) {
    // One loop per pair of comparisons, so that each vectorizes.
    #[inline(always)]
    fn map(
        x: &[f64],
        [low, high]: [&[f64]; 2],
        dst: &mut [f64],
        first: impl Fn(f64, f64) -> bool,
        second: impl Fn(f64, f64) -> bool,
    ) {
        for (((slot, &x), &low), &high) in dst.iter_mut().zip(x).zip(low).zip(high) {
            let x = if first(x, low) { low } else { x };
            *slot = if second(x, high) { high } else { x };
        }
    }
    let (lt, gt) = (|x: f64, b: f64| x < b, |x: f64, b: f64| x > b);
    match ops {
        [BinaryOp::Lt, BinaryOp::Gt] => map(x, bounds, dst, lt, gt),
        [BinaryOp::Gt, BinaryOp::Lt] => map(x, bounds, dst, gt, lt),
        [BinaryOp::Lt, BinaryOp::Lt] => map(x, bounds, dst, lt, lt),
        [BinaryOp::Gt, BinaryOp::Gt] => map(x, bounds, dst, gt, gt),
        _ => unreachable!("a clamp compares by lt or gt (`clamps`)"),
    }
}

/// [`super::steps::Step::RoundedBinary`] of each element: `a op b`, then [`round_to`] `dtype`.
#[inline(always)]
pub(super) fn rounded_binary(op: BinaryOp, dtype: Dtype, a: &[f64], b: &[f64], dst: &mut [f64]) {
    // One loop per operation and dtype, so that each vectorizes.
    #[inline(always)]
    fn rounded(op: BinaryOp, a: &[f64], b: &[f64], dst: &mut [f64], round: impl Fn(f64) -> f64) {
        match op {
            BinaryOp::Add => map2(a, b, dst, |x, y| round(x + y)),
            BinaryOp::Sub => map2(a, b, dst, |x, y| round(x - y)),
            BinaryOp::Mul => map2(a, b, dst, |x, y| round(x * y)),
            BinaryOp::Div => map2(a, b, dst, |x, y| round(x / y)),
            _ => unreachable!("only + - * / are fused with a round (`fuse_pairs`)"),
        }
    }
    match dtype {
        Dtype::F32 => rounded(op, a, b, dst, |v| round_to(Dtype::F32, v)),
        Dtype::BF16 => rounded(op, a, b, dst, |v| round_to(Dtype::BF16, v)),
        Dtype::F16 => rounded(op, a, b, dst, |v| round_to(Dtype::F16, v)),
        Dtype::F64 => rounded(op, a, b, dst, |v| v),
    }
}

/// [`round_to`] of each element, the dtype chosen once per block.
#[inline(always)]
pub(super) fn round_lanes(dtype: Dtype, x: &[f64], dst: &mut [f64]) {
    match dtype {
        Dtype::F64 => dst.copy_from_slice(x),
        Dtype::F32 => map1(x, dst, |v| round_to(Dtype::F32, v)),
        Dtype::BF16 => map1(x, dst, |v| round_to(Dtype::BF16, v)),
        Dtype::F16 => map1(x, dst, |v| round_to(Dtype::F16, v)),
    }
}

#[inline(always)]
pub(super) fn gather(table: &Table, coords: &[Vec<u64>], dst: &mut [f64]) {
    for (k, slot) in dst.iter_mut().enumerate() {
        let mut at = table.offset;
        for (stride, coord) in table.strides.iter().zip(coords) {
            // No overflow: every partial sum lies in the range checked at compile time.
            at += stride * coord[k] as i64;
        }
        *slot = table.values[at as usize];
    }
}

/// `op` over `x` into `dst`, the math functions in `backend`'s lanes. A finite
/// `sin`/`cos` argument beyond [`crate::math::TRIG_MAX`] gives NaN here; the evaluator's `refusals` marks
/// the element refused.
#[inline(always)]
pub(super) fn unary(backend: Backend, op: UnaryOp, x: &[f64], dst: &mut [f64]) {
    let lanes = |function, x: &[f64], dst: &mut [f64]| {
        math::lanes_slice_with(backend, function, x, dst);
    };
    match op {
        UnaryOp::Neg => map1(x, dst, |v| -v),
        UnaryOp::Abs => map1(x, dst, f64::abs),
        UnaryOp::Reciprocal => map1(x, dst, |v| 1.0 / v),
        UnaryOp::Sqrt => map1(x, dst, f64::sqrt),
        UnaryOp::Rsqrt => map1(x, dst, math::rsqrt),
        UnaryOp::Exp => lanes(math::LaneFunction::Exp, x, dst),
        UnaryOp::Expm1 => lanes(math::LaneFunction::Expm1, x, dst),
        UnaryOp::Log => lanes(math::LaneFunction::Log, x, dst),
        UnaryOp::Log1p => lanes(math::LaneFunction::Log1p, x, dst),
        UnaryOp::Tanh => lanes(math::LaneFunction::Tanh, x, dst),
        UnaryOp::Sigmoid => lanes(math::LaneFunction::Sigmoid, x, dst),
        UnaryOp::Softplus => lanes(math::LaneFunction::Softplus, x, dst),
        UnaryOp::Floor => map1(x, dst, f64::floor),
        UnaryOp::Erf => lanes(math::LaneFunction::Erf, x, dst),
        UnaryOp::Erfinv => math::erfinv_slice_with(backend, x, dst),
        UnaryOp::RoundHalfEven => map1(x, dst, round_half_even),
        // `math::sin`/`cos` give NaN beyond TRIG_MAX themselves.
        UnaryOp::Sin => lanes(math::LaneFunction::Sin, x, dst),
        UnaryOp::Cos => lanes(math::LaneFunction::Cos, x, dst),
    }
}

/// A comparison's value: 1 where it holds, else 0.
#[inline(always)]
fn flag(holds: bool) -> f64 {
    if holds {
        1.0
    } else {
        0.0
    }
}

#[inline(always)]
pub(super) fn binary(op: BinaryOp, a: &[f64], b: &[f64], dst: &mut [f64]) {
    match op {
        BinaryOp::Add => map2(a, b, dst, |x, y| x + y),
        BinaryOp::Sub => map2(a, b, dst, |x, y| x - y),
        BinaryOp::Mul => map2(a, b, dst, |x, y| x * y),
        BinaryOp::Div => map2(a, b, dst, |x, y| x / y),
        BinaryOp::Pow => map2(a, b, dst, math::pow),
        BinaryOp::Min => map2(a, b, dst, minimum),
        BinaryOp::Max => map2(a, b, dst, maximum),
        BinaryOp::FloorDiv => map2(a, b, dst, floor_divide),
        BinaryOp::Mod => map2(a, b, dst, modulo),
        // One loop per comparison (not `compare` per element), so that each vectorizes.
        BinaryOp::Lt => map2(a, b, dst, |x, y| flag(x < y)),
        BinaryOp::Le => map2(a, b, dst, |x, y| flag(x <= y)),
        BinaryOp::Gt => map2(a, b, dst, |x, y| flag(x > y)),
        BinaryOp::Ge => map2(a, b, dst, |x, y| flag(x >= y)),
        BinaryOp::Eq => map2(a, b, dst, |x, y| flag(x == y)),
        BinaryOp::Ne => map2(a, b, dst, |x, y| flag(x != y)),
    }
}

/// `f` of each element of `x` into `dst`. Generic over the function (not a `fn`
/// pointer), so that each loop is compiled with its operation inlined and vectorizes.
#[inline(always)]
fn map1(x: &[f64], dst: &mut [f64], f: impl Fn(f64) -> f64) {
    for (slot, &v) in dst.iter_mut().zip(x) {
        *slot = f(v);
    }
}

/// `f` of each pair of elements of `a` and `b` into `dst`, as [`map1`].
#[inline(always)]
fn map2(a: &[f64], b: &[f64], dst: &mut [f64], f: impl Fn(f64, f64) -> f64) {
    for ((slot, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *slot = f(x, y);
    }
}
