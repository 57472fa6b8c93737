//! Two elementwise steps in one pass, where the first one's register is read by the
//! second alone: a `Round` of an arithmetic `Binary` (each step on a float32 tensor is
//! rounded to it) and a `Clamp` of a `Clamp` (the two sides of `clamp_(min, max)`).
//!
//! The fused pass computes, per element, the same operations on the same operands in the
//! same order; only the first step's value stays in a CPU register instead of making a
//! round trip through its scratch vector, which stores and loads it unchanged. So the
//! bits are the same, and the refusals too (those of the operands, in the same order).

use super::ops::BinaryOp;
use super::steps::Step;
use crate::init::Dtype;

/// How many steps read each register (the result counts as read once more).
fn readers(steps: &[Step], result: usize) -> Vec<usize> {
    let mut count = vec![0; steps.len()];
    count[result] += 1;
    for step in steps {
        for operand in step.operands().into_iter().flatten() {
            count[operand] += 1;
        }
    }
    count
}

/// Each pair of the module docs made one step: the second becomes
/// [`Step::RoundedBinary`] or [`Step::ClampPair`], the first [`Step::Unused`].
pub(super) fn fuse_pairs(steps: &mut [Step], result: usize) {
    let readers = readers(steps, result);
    for register in 0..steps.len() {
        let fused = match steps[register] {
            Step::Round(x, dtype) if readers[x] == 1 => match steps[x] {
                Step::Binary(
                    op @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div),
                    a,
                    b,
                ) if dtype != Dtype::F64 => Some((x, Step::RoundedBinary(op, a, b, dtype))),
                _ => None,
            },
            Step::Clamp(second, y, high) if readers[y] == 1 => match steps[y] {
                Step::Clamp(first, x, low) => {
                    Some((y, Step::ClampPair([first, second], x, [low, high])))
                }
                _ => None,
            },
            _ => None,
        };
        if let Some((first, step)) = fused {
            steps[register] = step;
            steps[first] = Step::Unused;
        }
    }
}
