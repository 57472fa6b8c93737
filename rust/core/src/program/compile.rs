//! A program compiled against one fill ([`Compiled`]): its instructions resolved against
//! the global shape and the destination dtype into [`Step`]s, then the passes that change
//! no value (each step is the same function of the same operands): `erfinv` seen only
//! rounded to float32, hoisted columns ([`hoist`]), clamps, rounds of exact registers
//! aliased ([`exact`]), fused pairs ([`fuse`]); and what the evaluator needs to know of
//! the result (its live registers, the `where` conditions first).

use super::builder::{Instr, Program, Table};
use super::ops::{BinaryOp, UnaryOp};
use super::steps::Step;
use super::{exact, fuse, hoist};
use crate::geometry::checked_numel;
use crate::init::Dtype;
use crate::philox::{Backend, Stream};
use crate::Error;

/// Each `erfinv` step whose value is seen only rounded to float32 (every step that reads
/// it is a `Round` to float32, and it is the result only of a float32 fill) made an
/// [`Step::ErfinvToF32`]: the same values after that rounding, by
/// [`crate::math::erfinv_f32_slice`]'s proof.
fn erfinv_rounded_to_f32(steps: &mut [Step], dtype: Dtype) {
    let last = steps.len() - 1;
    for register in 0..steps.len() {
        let Step::Unary(UnaryOp::Erfinv, x) = steps[register] else {
            continue;
        };
        let rounded_where_read = steps[register + 1..].iter().all(|step| {
            matches!(step, Step::Round(_, Dtype::F32)) || !step.operands().contains(&Some(register))
        });
        if rounded_where_read && (register != last || dtype == Dtype::F32) {
            steps[register] = Step::ErfinvToF32(x);
        }
    }
}

/// A program checked against one fill: the steps, the stream and the shape.
pub(super) struct Compiled {
    pub(super) steps: Vec<Step>,
    /// The register of the result (the last, or the register a last `Round` aliases).
    pub(super) result: usize,
    /// The registers a block evaluates, in order: those the result reads, but for
    /// constants, the destination's and unused ones.
    pub(super) order: Vec<usize>,
    /// Whose pass code ([`super::lanes`]) and math lanes evaluate the blocks: always one this
    /// CPU runs ([`Program::compile_using`] checks it).
    pub(super) backend: Backend,
    /// The register read back from the destination, if any.
    pub(super) destination: Option<usize>,
    pub(super) stream: Stream,
    pub(super) two_words: bool,
    pub(super) shape: Vec<u64>,
    pub(super) needs_coords: bool,
    pub(super) uses_words: bool,
    /// Whether a step may refuse an element (`sin`/`cos` beyond [`crate::math::TRIG_MAX`]):
    /// then each register carries, per element, the refusal its value depends on.
    pub(super) may_refuse: bool,
    /// The registers the `where` conditions read (with the conditions), in order:
    /// evaluated first in each block, so that a condition the same on the whole block
    /// leaves the other branch unevaluated ([`Compiled::needed`]).
    pub(super) conditions: Vec<usize>,
    /// Per register, whether it is in `conditions`.
    pub(super) in_conditions: Vec<bool>,
}

/// Each `where(x < b, b, x)` and `where(x > b, b, x)` (a `clamp`'s two sides, as capture
/// records `clamp_(min, max)`) made a [`Step::Clamp`]: `b` where the comparison holds,
/// else `x`, which is what the `where` selects, so the same bits. A comparison no other
/// step reads is then [`Step::Unused`]: the program has no condition left to evaluate
/// first ([`Compiled::needed`]). Its refusals are the comparison's (the `where`'s are
/// the condition's, which cover both of its branches), so `sin`/`cos` refuse the same.
fn clamps(steps: &mut [Step]) {
    let last = steps.len() - 1;
    for register in 0..steps.len() {
        let Step::Where(c, a, b) = steps[register] else {
            continue;
        };
        if let Step::Binary(op @ (BinaryOp::Lt | BinaryOp::Gt), x, bound) = steps[c] {
            if x == b && bound == a {
                steps[register] = Step::Clamp(op, x, bound);
            }
        }
    }
    let mut read = vec![false; steps.len()];
    read[last] = true;
    for step in steps.iter() {
        for operand in step.operands().into_iter().flatten() {
            read[operand] = true;
        }
    }
    for (step, read) in steps.iter_mut().zip(read) {
        if !read && matches!(step, Step::Binary(BinaryOp::Lt | BinaryOp::Gt, _, _)) {
            *step = Step::Unused;
        }
    }
}

/// Per register, whether the result reads it (itself included): the rest is never
/// evaluated, and its refusals cannot reach the result.
fn live_registers(steps: &[Step], result: usize) -> Vec<bool> {
    let mut live = vec![false; steps.len()];
    live[result] = true;
    for index in (0..=result).rev() {
        if live[index] {
            for operand in steps[index].operands().into_iter().flatten() {
                live[operand] = true;
            }
        }
    }
    live
}

/// Whether a block evaluates `step` (the others are written once per scratch, read
/// back from the destination, or read by nothing).
fn evaluated_per_block(step: &Step) -> bool {
    !matches!(step, Step::Constant(_) | Step::Destination | Step::Unused)
}

/// The registers the conditions of the live `where`s read, with the conditions: per
/// register, whether it is one.
fn condition_registers(steps: &[Step], live: &[bool]) -> Vec<bool> {
    let mut marked = vec![false; steps.len()];
    for (index, step) in steps.iter().enumerate().rev() {
        if let (&Step::Where(c, _, _), true) = (step, live[index]) {
            marked[c] = true;
        }
        if marked[index] {
            for operand in step.operands().into_iter().flatten() {
                marked[operand] = true;
            }
        }
    }
    marked
}

/// The smallest and largest value of `offset + sum_d c_d * strides[d]` over the shape.
fn table_range(table: &Table, shape: &[u64]) -> (i128, i128) {
    let mut low = i128::from(table.offset);
    let mut high = low;
    for (&stride, &size) in table.strides.iter().zip(shape) {
        let extreme = i128::from(stride) * (i128::from(size) - 1);
        if extreme < 0 {
            low += extreme;
        } else {
            high += extreme;
        }
    }
    (low, high)
}

fn check_table(table: &Table, shape: &[u64], numel: u64) -> Result<(), Error> {
    if table.strides.len() != shape.len() {
        return Err(Error::TableRank {
            strides: table.strides.len(),
            dims: shape.len(),
        });
    }
    if numel == 0 {
        return Ok(());
    }
    let (low, high) = table_range(table, shape);
    let len = table.values.len();
    if low < 0 || high >= len as i128 {
        return Err(Error::TableOutOfBounds { low, high, len });
    }
    Ok(())
}

impl Program {
    /// The program resolved against one fill; register `destination` (a source) is read
    /// back from the destination instead of being sampled.
    pub(super) fn compile(
        &self,
        key64: u64,
        shape: &[u64],
        dtype: Dtype,
        destination: Option<usize>,
    ) -> Result<Compiled, Error> {
        self.compile_using(Backend::detect(), key64, shape, dtype, destination)
    }

    /// [`Program::compile`] for `backend`'s passes and math lanes.
    ///
    /// # Panics
    /// If this CPU cannot run `backend` (the compiled program's passes rely on it).
    pub(super) fn compile_using(
        &self,
        backend: Backend,
        key64: u64,
        shape: &[u64],
        dtype: Dtype,
        destination: Option<usize>,
    ) -> Result<Compiled, Error> {
        crate::kernel::check_available(backend);
        if self.instrs.is_empty() {
            return Err(Error::EmptyProgram);
        }
        let numel = checked_numel(shape, dtype.max_numel())?;
        let mut steps = Vec::with_capacity(self.instrs.len());
        for (register, instr) in self.instrs.iter().enumerate() {
            steps.push(match *instr {
                Instr::Source { .. } if destination == Some(register) => Step::Destination,
                Instr::Source { init, dtype } => Step::Source {
                    sampler: init.prepare()?,
                    dtype,
                },
                Instr::Constant(value) => Step::Constant(value),
                Instr::Coord(dim) => {
                    if dim >= shape.len() {
                        return Err(Error::CoordDim {
                            dim: i64::try_from(dim).unwrap_or(i64::MAX),
                            dims: Some(shape.len()),
                        });
                    }
                    Step::Coord(dim)
                }
                Instr::Flat => Step::Flat,
                Instr::Table(ref table) => {
                    check_table(table, shape, numel)?;
                    Step::Table(table.clone())
                }
                Instr::Unary(op, x) => Step::Unary(op, x),
                Instr::Binary(op, a, b) => Step::Binary(op, a, b),
                Instr::Where(c, a, b) => Step::Where(c, a, b),
                Instr::Round(x, dtype) => Step::Round(x, dtype),
            });
        }
        erfinv_rounded_to_f32(&mut steps, dtype);
        hoist::hoist_columns(backend, &mut steps, shape, numel);
        clamps(&mut steps);
        let fill = exact::Fill {
            shape,
            numel,
            dtype,
        };
        let result = exact::alias_exact_rounds(&mut steps, &fill);
        fuse::fuse_pairs(&mut steps, result);
        let live = live_registers(&steps, result);
        let live_steps = || steps.iter().zip(&live).filter(|(_, &l)| l).map(|(s, _)| s);
        let may_refuse =
            live_steps().any(|s| matches!(s, Step::Unary(UnaryOp::Sin | UnaryOp::Cos, _)));
        let needs_coords = live_steps()
            .any(|s| matches!(s, Step::Coord(_) | Step::Table(_) | Step::Column { .. }));
        let uses_words =
            live_steps().any(|s| matches!(s, Step::Source { sampler, .. } if sampler.uses_words()));
        let in_conditions = condition_registers(&steps, &live);
        let evaluated = |r: usize| live[r] && evaluated_per_block(&steps[r]);
        let conditions = (0..steps.len())
            .filter(|&r| in_conditions[r] && evaluated(r))
            .collect();
        let order = (0..steps.len()).filter(|&r| evaluated(r)).collect();
        Ok(Compiled {
            conditions,
            in_conditions,
            order,
            backend,
            result,
            steps,
            destination,
            stream: Stream::new(key64),
            two_words: dtype.words_per_element() == 2,
            shape: shape.to_vec(),
            needs_coords,
            uses_words,
            may_refuse,
        })
    }
}
