//! Init programs (stream-format.md §7): a value computed elementwise, in binary64, at
//! each element of a fill's region, from the element's own stream words, its global
//! coordinates and constant tables.
//!
//! A [`Program`] is a list of *registers* in SSA form: each register is one instruction
//! whose operands are earlier registers; the last register is the result, rounded to the
//! destination dtype by stream-format.md §4's rule. Every operation is either an exactly
//! rounded IEEE-754 binary64 operation or one of the library's own functions in
//! [`crate::math`], so a program's value at an element is a pure function of the
//! program, the key, the global shape, the destination dtype and the element's global
//! flat index: the same bits for every world size, layout, thread count and CPU.
//!
//! Each chunk of the output is evaluated in blocks of [`BLOCK`] elements, one binary64
//! scratch vector per register (reused from block to block), step by step; `erfinv`,
//! `exp`, `log`, `erf`, `sigmoid` and `tanh` run over a register's block in lanes
//! ([`crate::math::erfinv_slice`], [`crate::math::lanes_slice`]: the scalar functions' bits), as do
//! `softplus`, `sin`, `cos`, `expm1` and `log1p`; the other steps are elementwise passes
//! over the block, compiled with the whole block's evaluation for the CPU's vector width
//! (`lanes`: AVX2, AVX-512F, chosen once per block; the scalar backend's bits).
//! Work that does not vary along the block is not repeated per element: a register of
//! one coordinate (a table's per-column `exp`) is computed once per value of that
//! coordinate when the program is compiled (`hoist`), and in a block where a `where`'s
//! condition is the same on every element only the branch taken is evaluated (a `cat`
//! of two halves computes `sin` or `cos`, not both). Neither changes a value: the
//! registers computed are the same functions of the same operands. A `Round` of a
//! register whose every value is already of its dtype (a float32 source, another
//! rounding, a clamp of one between float32 bounds) is an alias of it, not a pass
//! (`exact`); a `Round` of `+ - * /` and a clamp of a clamp are one pass each (`fuse`);
//! and registers the result does not read are not evaluated.
//! A program that is a single `source` of the destination's dtype is the same
//! computation as [`crate::ParamStream::fill_region`] and is dispatched to its fused kernels.
//! A program with one source of the destination's dtype and further steps (a fill, then
//! `* gain`, `log`, ...) has that source's values written by the fused kernels into the
//! destination, `FUSED_SPAN` elements at a time, each span then evaluated while it is
//! in the cache: the evaluator reads each element's own value back as the source's
//! register (exact: it is the source rounded to that dtype) and overwrites it with the
//! result. That is also how a source whose values are not elementwise (an orthogonal
//! matrix, computed whole) takes steps.
//!
//! The module by job: [`Program`] is built by `builder` (its operations in `ops`, the
//! scalar ones that are not IEEE operations in `scalar`); `dispatch` picks the
//! computation of a fill; `compile` resolves a program against one fill into `steps`
//! and runs the passes that change no value (with `exact`, `fuse` and `hoist`); `eval`
//! evaluates the blocks with the step kernels of `passes`, compiled per backend by
//! `lanes`.

mod builder;
mod compile;
mod dispatch;
mod eval;
mod exact;
mod fuse;
mod hoist;
mod lanes;
mod ops;
mod passes;
mod scalar;
mod steps;
#[cfg(test)]
mod tests;

pub use builder::Program;
pub use eval::BLOCK;
pub use ops::{BinaryOp, UnaryOp};
pub use scalar::{floor_divide, maximum, minimum, modulo, round_half_even, round_to};
