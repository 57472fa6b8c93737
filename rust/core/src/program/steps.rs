//! A program resolved against one fill is a list of [`Step`]s, one per register: the
//! instructions with their samplers prepared, and the forms the compile passes give
//! them (`compile`, `exact`, `fuse`, `hoist`).

use std::sync::Arc;

use super::builder::Table;
use super::ops::{BinaryOp, UnaryOp};
use crate::init::{Dtype, Sampler};

/// Per-fill state of one register, resolved against the global shape.
pub(super) enum Step {
    Source {
        sampler: Sampler,
        dtype: Dtype,
    },
    /// The source whose values the fused fill already wrote into the destination: read
    /// back before the block is evaluated ([`super::builder::Program::fused_source`]).
    Destination,
    Constant(f64),
    Coord(usize),
    Flat,
    Table(Table),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    Where(usize, usize, usize),
    Round(usize, Dtype),
    /// `erfinv` of a register whose value is seen only rounded to float32 (by `Round`
    /// steps to float32, or as the result of a float32 fill): computed rounded
    /// ([`crate::math::erfinv_f32_slice`]), which rounding it again leaves as it is.
    ErfinvToF32(usize),
    /// A register of one coordinate, computed ahead for every value of it
    /// ([`super::hoist::hoist_columns`]): gathered by the element's coordinate along `dim`.
    Column {
        dim: usize,
        values: Arc<[f64]>,
    },
    /// A register only hoisted columns read: not evaluated per block.
    Unused,
    /// `where(x op bound, bound, x)`, `op` [`BinaryOp::Lt`] or [`BinaryOp::Gt`]: one
    /// side of a `clamp` (`compile`'s `clamps`), the `where` and its comparison in one pass.
    Clamp(BinaryOp, usize, usize),
    /// `Round(Binary(op, a, b), dtype)`, `op` one of `+ - * /`, in one pass
    /// ([`super::fuse::fuse_pairs`]).
    RoundedBinary(BinaryOp, usize, usize, Dtype),
    /// `Clamp(ops[1], Clamp(ops[0], x, bounds[0]), bounds[1])` in one pass
    /// ([`super::fuse::fuse_pairs`]).
    ClampPair([BinaryOp; 2], usize, [usize; 2]),
}

impl Step {
    /// The registers this step reads (no allocation: it runs per block).
    pub(super) fn operands(&self) -> [Option<usize>; 3] {
        match *self {
            Step::Unary(_, x) | Step::Round(x, _) | Step::ErfinvToF32(x) => [Some(x), None, None],
            Step::Binary(_, a, b) | Step::Clamp(_, a, b) | Step::RoundedBinary(_, a, b, _) => {
                [Some(a), Some(b), None]
            }
            Step::Where(c, a, b) | Step::ClampPair(_, c, [a, b]) => [Some(c), Some(a), Some(b)],
            _ => [None; 3],
        }
    }

    /// Each register this step reads replaced by `f` of it.
    pub(super) fn map_operands(&mut self, f: impl Fn(usize) -> usize) {
        match self {
            Step::Unary(_, x) | Step::Round(x, _) | Step::ErfinvToF32(x) => *x = f(*x),
            Step::Binary(_, a, b) | Step::Clamp(_, a, b) | Step::RoundedBinary(_, a, b, _) => {
                (*a, *b) = (f(*a), f(*b));
            }
            Step::Where(c, a, b) | Step::ClampPair(_, c, [a, b]) => {
                (*c, *a, *b) = (f(*c), f(*a), f(*b));
            }
            _ => {}
        }
    }
}
