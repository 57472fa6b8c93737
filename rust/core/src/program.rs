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
//! ([`math::erfinv_slice`], [`math::lanes_slice`]: the scalar functions' bits), as do
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
//! computation as [`ParamStream::fill_region`] and is dispatched to its fused kernels.
//! A program with one source of the destination's dtype and further steps (a fill, then
//! `* gain`, `log`, ...) has that source's values written by the fused kernels into the
//! destination, `FUSED_SPAN` elements at a time, each span then evaluated while it is
//! in the cache: the evaluator reads each element's own value back as the source's
//! register (exact: it is the source rounded to that dtype) and overwrites it with the
//! result. That is also how a source whose values are not elementwise (an orthogonal
//! matrix, computed whole) takes steps.

use std::sync::Arc;

use half::{bf16, f16};

use crate::fill::{OutBuf, ParamStream, Source};
use crate::geometry::checked_numel;
use crate::init::{Dtype, Element, Init, Sampler};
use crate::math;
use crate::philox::{Backend, Stream};
use crate::pool::Threads;
use crate::region::{Region, RunWriter, Walk};
use crate::Error;

mod exact;
mod fuse;
mod hoist;
mod lanes;

/// Elements evaluated together: one scratch vector of this length per register.
pub const BLOCK: usize = 256;

/// Elements of a fused source written at a time, each span then evaluated: its 16 KiB
/// of float32 are still in the cache when the blocks read them back, and the fill
/// kernels' per-call set-up (about 7 KiB of buffers zeroed) is under 2 bytes an element.
const FUSED_SPAN: usize = 16 * BLOCK;

macro_rules! named_ops {
    ($(#[$meta:meta])* $name:ident, $arg:literal { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every operation, in the order of the error message's list.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The operation's name, as `Program`'s Python methods take it.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The operation named `name`.
            ///
            /// # Errors
            /// [`Error::UnknownName`] (argument `op`) for any other string.
            pub fn from_name(name: &str) -> Result<$name, Error> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|op| op.name() == name)
                    .ok_or_else(|| Error::UnknownName {
                        arg: $arg,
                        got: name.to_owned(),
                        allowed: $name::ALL.iter().map(|op| op.name()).collect(),
                    })
            }
        }
    };
}

named_ops!(
    /// A one-operand operation (stream-format.md §7 gives each formula).
    UnaryOp, "op" {
        /// `-x`.
        Neg => "neg",
        /// `|x|`.
        Abs => "abs",
        /// `1 / x`.
        Reciprocal => "reciprocal",
        /// IEEE square root.
        Sqrt => "sqrt",
        /// [`math::rsqrt`].
        Rsqrt => "rsqrt",
        /// [`math::exp`].
        Exp => "exp",
        /// [`math::expm1`].
        Expm1 => "expm1",
        /// [`math::log`].
        Log => "log",
        /// [`math::log1p`].
        Log1p => "log1p",
        /// [`math::sin`] (refused beyond [`math::TRIG_MAX`]).
        Sin => "sin",
        /// [`math::cos`] (refused beyond [`math::TRIG_MAX`]).
        Cos => "cos",
        /// [`math::tanh`].
        Tanh => "tanh",
        /// [`math::sigmoid`].
        Sigmoid => "sigmoid",
        /// [`math::softplus`]: `x` if `x > 20`, else `log(1 + exp(x))` (torch's beta = 1,
        /// threshold = 20).
        Softplus => "softplus",
        /// Round toward minus infinity.
        Floor => "floor",
        /// [`math::erf`] (fdlibm's).
        Erf => "erf",
        /// [`math::erfinv`]: `+-inf` at `+-1`, NaN beyond.
        Erfinv => "erfinv",
        /// [`round_half_even`] (torch's `round`).
        RoundHalfEven => "round_half_even",
    }
);

named_ops!(
    /// A two-operand operation (stream-format.md §7 gives each formula).
    BinaryOp, "op" {
        /// `a + b`.
        Add => "add",
        /// `a - b`.
        Sub => "sub",
        /// `a * b`.
        Mul => "mul",
        /// `a / b`.
        Div => "div",
        /// [`math::pow`].
        Pow => "pow",
        /// The smaller; NaN if either is NaN; `-0 < +0`.
        Min => "min",
        /// The larger; NaN if either is NaN; `-0 < +0`.
        Max => "max",
        /// Python's (and torch's) floor division of floats.
        FloorDiv => "floordiv",
        /// Python's (and torch's `remainder`) modulo of floats: the sign of `b`.
        Mod => "mod",
        /// `1.0` if `a < b` else `0.0`.
        Lt => "lt",
        /// `1.0` if `a <= b` else `0.0`.
        Le => "le",
        /// `1.0` if `a > b` else `0.0`.
        Gt => "gt",
        /// `1.0` if `a >= b` else `0.0`.
        Ge => "ge",
        /// `1.0` if `a == b` else `0.0`.
        Eq => "eq",
        /// `1.0` if `a != b` else `0.0` (NaN != NaN).
        Ne => "ne",
    }
);

/// A constant table and how a register indexes it.
#[derive(Clone, Debug, PartialEq)]
struct Table {
    values: Arc<[f64]>,
    strides: Vec<i64>,
    offset: i64,
}

/// One register's instruction.
#[derive(Clone, Debug, PartialEq)]
enum Instr {
    Source { init: Init, dtype: Dtype },
    Constant(f64),
    Coord(usize),
    Flat,
    Table(Table),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    Where(usize, usize, usize),
    Round(usize, Dtype),
}

/// An init program (stream-format.md §7): registers computed elementwise, in binary64,
/// at each element of a fill's region; the last register is the result.
///
/// ```
/// use shardinit_core::program::{BinaryOp, Program, UnaryOp};
/// use shardinit_core::{Dtype, OutBuf, Region, Threads};
/// // log(coord1 + 1): Mamba's A_log table.
/// let mut program = Program::new();
/// let n = program.coord(1).unwrap();
/// let one = program.constant(1.0);
/// let sum = program.binary(BinaryOp::Add, n, one).unwrap();
/// program.unary(UnaryOp::Log, sum).unwrap();
/// let mut out = [0f32; 4];
/// let region = Region::Box { ranges: vec![(1, 2), (0, 4)], offset: None };
/// program.fill_region(7, &[2, 4], &region, OutBuf::F32(&mut out), Threads::Count(1)).unwrap();
/// assert_eq!(out, [0.0, 2f32.ln(), 3f32.ln(), 4f32.ln()]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    instrs: Vec<Instr>,
}

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

impl Program {
    /// An empty program (refused by [`Program::fill_region`] until it has a register).
    pub fn new() -> Program {
        Program::default()
    }

    /// Number of registers.
    pub fn len(&self) -> usize {
        self.instrs.len()
    }

    /// Whether the program has no registers.
    pub fn is_empty(&self) -> bool {
        self.instrs.is_empty()
    }

    fn push(&mut self, instr: Instr) -> usize {
        self.instrs.push(instr);
        self.instrs.len() - 1
    }

    /// `register` as an operand named `arg`: it must be an earlier register.
    fn operand(&self, arg: &'static str, register: usize) -> Result<usize, Error> {
        if register < self.instrs.len() {
            Ok(register)
        } else {
            Err(Error::BadRegister {
                arg,
                value: i128::try_from(register).unwrap_or(i128::MAX),
                len: self.instrs.len(),
            })
        }
    }

    /// The value `init` gives the element in stream v1 (§3–4), drawn at its own global
    /// flat index with the word layout of the destination dtype, rounded to `dtype`.
    ///
    /// # Errors
    /// An invalid `init` ([`Init::validate`]).
    pub fn source(&mut self, init: Init, dtype: Dtype) -> Result<usize, Error> {
        init.validate()?;
        Ok(self.push(Instr::Source { init, dtype }))
    }

    /// The constant `value` (any binary64, NaN and infinities included).
    pub fn constant(&mut self, value: f64) -> usize {
        self.push(Instr::Constant(value))
    }

    /// The element's global coordinate along `dim` (checked against the global shape
    /// at fill time).
    ///
    /// # Errors
    /// [`Error::CoordDim`] for a negative `dim`.
    pub fn coord(&mut self, dim: i64) -> Result<usize, Error> {
        let dim = usize::try_from(dim).map_err(|_| Error::CoordDim { dim, dims: None })?;
        Ok(self.push(Instr::Coord(dim)))
    }

    /// The element's global flat (C-order) index.
    pub fn flat(&mut self) -> usize {
        self.push(Instr::Flat)
    }

    /// `values[offset + sum_d coord[d] * strides[d]]` (bounds checked over the whole
    /// global shape at fill time).
    pub fn table(&mut self, values: Arc<[f64]>, strides: Vec<i64>, offset: i64) -> usize {
        self.push(Instr::Table(Table {
            values,
            strides,
            offset,
        }))
    }

    /// `op(x)`.
    ///
    /// # Errors
    /// [`Error::BadRegister`] if `x` is not an earlier register.
    pub fn unary(&mut self, op: UnaryOp, x: usize) -> Result<usize, Error> {
        let x = self.operand("x", x)?;
        Ok(self.push(Instr::Unary(op, x)))
    }

    /// `op(a, b)`.
    ///
    /// # Errors
    /// [`Error::BadRegister`] if `a` or `b` is not an earlier register.
    pub fn binary(&mut self, op: BinaryOp, a: usize, b: usize) -> Result<usize, Error> {
        let a = self.operand("a", a)?;
        let b = self.operand("b", b)?;
        Ok(self.push(Instr::Binary(op, a, b)))
    }

    /// `a` where `cond != 0` (NaN included), else `b`.
    ///
    /// # Errors
    /// [`Error::BadRegister`] if an operand is not an earlier register.
    pub fn select(&mut self, cond: usize, a: usize, b: usize) -> Result<usize, Error> {
        let cond = self.operand("cond", cond)?;
        let a = self.operand("a", a)?;
        let b = self.operand("b", b)?;
        Ok(self.push(Instr::Where(cond, a, b)))
    }

    /// `x` rounded to `dtype` ([`round_to`]).
    ///
    /// # Errors
    /// [`Error::BadRegister`] if `x` is not an earlier register.
    pub fn round(&mut self, x: usize, dtype: Dtype) -> Result<usize, Error> {
        let x = self.operand("x", x)?;
        Ok(self.push(Instr::Round(x, dtype)))
    }
}

/// Per-fill state of one register, resolved against the global shape.
enum Step {
    Source {
        sampler: Sampler,
        dtype: Dtype,
    },
    /// The source whose values the fused fill already wrote into the destination: read
    /// back before the block is evaluated ([`Program::fused_source`]).
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
    /// ([`math::erfinv_f32_slice`]), which rounding it again leaves as it is.
    ErfinvToF32(usize),
    /// A register of one coordinate, computed ahead for every value of it
    /// ([`hoist::hoist_columns`]): gathered by the element's coordinate along `dim`.
    Column {
        dim: usize,
        values: Arc<[f64]>,
    },
    /// A register only hoisted columns read: not evaluated per block.
    Unused,
    /// `where(x op bound, bound, x)`, `op` [`BinaryOp::Lt`] or [`BinaryOp::Gt`]: one
    /// side of a `clamp` ([`clamps`]), the `where` and its comparison in one pass.
    Clamp(BinaryOp, usize, usize),
    /// `Round(Binary(op, a, b), dtype)`, `op` one of `+ - * /`, in one pass
    /// ([`fuse::fuse_pairs`]).
    RoundedBinary(BinaryOp, usize, usize, Dtype),
    /// `Clamp(ops[1], Clamp(ops[0], x, bounds[0]), bounds[1])` in one pass
    /// ([`fuse::fuse_pairs`]).
    ClampPair([BinaryOp; 2], usize, [usize; 2]),
}

impl Step {
    /// The registers this step reads (no allocation: it runs per block).
    fn operands(&self) -> [Option<usize>; 3] {
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
    fn map_operands(&mut self, f: impl Fn(usize) -> usize) {
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

/// Each `erfinv` step whose value is seen only rounded to float32 (every step that reads
/// it is a `Round` to float32, and it is the result only of a float32 fill) made an
/// [`Step::ErfinvToF32`]: the same values after that rounding, by
/// [`math::erfinv_f32_slice`]'s proof.
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
struct Compiled {
    steps: Vec<Step>,
    /// The register of the result (the last, or the register a last `Round` aliases).
    result: usize,
    /// The registers a block evaluates, in order: those the result reads, but for
    /// constants, the destination's and unused ones.
    order: Vec<usize>,
    /// Whose pass code ([`lanes`]) and math lanes evaluate the blocks: always one this
    /// CPU runs ([`Program::compile_using`] checks it).
    backend: Backend,
    /// The register read back from the destination, if any.
    destination: Option<usize>,
    stream: Stream,
    two_words: bool,
    shape: Vec<u64>,
    needs_coords: bool,
    uses_words: bool,
    /// Whether a step may refuse an element (`sin`/`cos` beyond [`math::TRIG_MAX`]):
    /// then each register carries, per element, the refusal its value depends on.
    may_refuse: bool,
    /// The registers the `where` conditions read (with the conditions), in order:
    /// evaluated first in each block, so that a condition the same on the whole block
    /// leaves the other branch unevaluated ([`Compiled::needed`]).
    conditions: Vec<usize>,
    /// Per register, whether it is in `conditions`.
    in_conditions: Vec<bool>,
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
    fn compile(
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
    fn compile_using(
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

    /// The single source of `dtype` this program is, if it is one (then a fill is the
    /// plain [`ParamStream`] fill).
    fn single_source(&self, dtype: Dtype) -> Option<Init> {
        match self.instrs.as_slice() {
            [Instr::Source { init, dtype: d }] if *d == dtype => Some(*init),
            _ => None,
        }
    }

    /// The register and initializer of the program's only source, when it has one, of
    /// `dtype`, and more registers than it (see the module docs).
    fn fused_source(&self, dtype: Dtype) -> Option<(usize, Init)> {
        let mut sources = self
            .instrs
            .iter()
            .enumerate()
            .filter_map(|(r, i)| match *i {
                Instr::Source { init, dtype } => Some((r, init, dtype)),
                _ => None,
            });
        match (sources.next(), sources.next()) {
            (Some((register, init, d)), None) if d == dtype && self.instrs.len() > 1 => {
                Some((register, init))
            }
            _ => None,
        }
    }

    /// Fills `out` with `region` of the program's values over the parameter
    /// `(key64, global_shape)`, on `threads` threads: the last register, rounded to
    /// `out`'s dtype by stream-format.md §4's rule.
    ///
    /// # Errors
    /// An empty program; a `coord` dim or a `table` that does not fit the global shape;
    /// the errors of [`ParamStream::fill_region`] (shape too large, region); an
    /// argument of `sin`/`cos` beyond [`math::TRIG_MAX`] ([`Error::TrigArgument`], the
    /// one of the lowest flat index; `out` is then partly written).
    pub fn fill_region(
        &self,
        key64: u64,
        global_shape: &[u64],
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        if let Some(init) = self.single_source(out.dtype()) {
            let param = ParamStream {
                key64,
                global_shape: global_shape.to_vec(),
                init,
            };
            return param.fill_region(region, out, threads);
        }
        self.fill_region_using(Backend::detect(), key64, global_shape, region, out, threads)
    }

    /// [`Program::fill_region`] of a program that is not a single source, evaluated by
    /// `backend`'s passes and math lanes (tests compare them: every backend gives the
    /// same bits).
    ///
    /// # Errors
    /// As [`Program::fill_region`].
    ///
    /// # Panics
    /// If this CPU cannot run `backend` ([`Backend::is_available`]).
    pub fn fill_region_using(
        &self,
        backend: Backend,
        key64: u64,
        global_shape: &[u64],
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        if let Some((register, init)) = self.fused_source(out.dtype()) {
            let compiled =
                self.compile_using(backend, key64, global_shape, out.dtype(), Some(register))?;
            let param = ParamStream {
                key64,
                global_shape: global_shape.to_vec(),
                init,
            };
            return match out {
                OutBuf::F32(s) => compiled.fill_over(&param, region, s, threads),
                OutBuf::F64(s) => compiled.fill_over(&param, region, s, threads),
                OutBuf::BF16(s) => compiled.fill_over(&param, region, s, threads),
                OutBuf::F16(s) => compiled.fill_over(&param, region, s, threads),
            };
        }
        let compiled = self.compile_using(backend, key64, global_shape, out.dtype(), None)?;
        compiled.fill_buffer(region, out, threads)
    }

    /// [`Program::fill_region`] always through the evaluator (tests compare it with the
    /// fused single-source dispatch).
    ///
    /// # Errors
    /// As [`Program::fill_region`].
    pub fn fill_region_evaluated(
        &self,
        key64: u64,
        global_shape: &[u64],
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        let compiled = self.compile(key64, global_shape, out.dtype(), None)?;
        compiled.fill_buffer(region, out, threads)
    }
}

impl Compiled {
    /// [`Compiled::fill`] of a buffer of any dtype.
    fn fill_buffer(&self, region: &Region, out: OutBuf<'_>, threads: Threads) -> Result<(), Error> {
        match out {
            OutBuf::F32(s) => self.fill(region, s, threads),
            OutBuf::F64(s) => self.fill(region, s, threads),
            OutBuf::BF16(s) => self.fill(region, s, threads),
            OutBuf::F16(s) => self.fill(region, s, threads),
        }
    }

    /// The fused fill of `param` (the program's source) into `out`, [`FUSED_SPAN`]
    /// elements at a time, each span then evaluated, reading the source's register back
    /// from `out` while the span is in the cache. The same checks, in the same order, as
    /// the fill of `param` and then of the program (the same shape and region).
    fn fill_over<T: Element>(
        &self,
        param: &ParamStream,
        region: &Region,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        let len = out.len() as u64;
        match param.walk_and_source(self.backend, T::DTYPE, region, len, threads)? {
            Some((walk, source)) => {
                let writer = OverSource {
                    source: &source,
                    program: self,
                };
                walk.write(out, threads, &writer)
            }
            None => Ok(()),
        }
    }

    /// The program over `region` into `out`, through the one region walk.
    fn fill<T: Element>(
        &self,
        region: &Region,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        let numel = checked_numel(&self.shape, T::DTYPE.max_numel())?;
        match Walk::new(&self.shape, numel, region, out.len() as u64)? {
            Some(walk) => walk.write(out, threads, self),
            None => Ok(()),
        }
    }

    /// Evaluates global flat indices `[start, start + out.len())` into `out`; with a
    /// `source`, its fused fill writes each span of [`FUSED_SPAN`] elements first (the
    /// destination's register).
    #[inline(always)]
    fn eval_run<T: Element>(
        &self,
        source: Option<&Source>,
        start: u64,
        out: &mut [T],
        scratch: &mut Scratch,
    ) -> Result<(), (u64, Error)> {
        for (span, out) in out.chunks_mut(FUSED_SPAN).enumerate() {
            let first = start + (span * FUSED_SPAN) as u64;
            if let Some(source) = source {
                source.write_run(&mut (), first, out)?;
            }
            self.eval_span(first, out, scratch)?;
        }
        Ok(())
    }

    /// Evaluates global flat indices `[start, start + out.len())` into `out`, a block
    /// at a time.
    #[inline(always)]
    fn eval_span<T: Element>(
        &self,
        start: u64,
        out: &mut [T],
        scratch: &mut Scratch,
    ) -> Result<(), (u64, Error)> {
        for (block, out) in out.chunks_mut(BLOCK).enumerate() {
            let first = start + (block * BLOCK) as u64;
            if let Some(register) = self.destination {
                self.read_back(out, &mut scratch.registers[register][..out.len()]);
            }
            self.eval_block(first, out.len(), scratch);
            if self.may_refuse {
                let last = &scratch.refused[self.result][..out.len()];
                if let Some((k, &Some((op, value)))) =
                    last.iter().enumerate().find(|(_, r)| r.is_some())
                {
                    let error = Error::TrigArgument {
                        op: op.name(),
                        value,
                        limit: math::TRIG_MAX,
                    };
                    return Err((first + k as u64, error));
                }
            }
            self.write_result(&scratch.registers[self.result][..out.len()], out);
        }
        Ok(())
    }
}

/// `out[i]`, widened to binary64, into `dst[i]` (the destination's register).
#[inline(always)]
fn read_back_passes<T: Element>(out: &[T], dst: &mut [f64]) {
    for (slot, value) in dst.iter_mut().zip(out) {
        *slot = value.widen();
    }
}

/// The result rounded to `out`'s dtype, with one NaN for every platform (the payload
/// and sign of NaNs are not IEEE's).
#[inline(always)]
fn write_result_passes<T: Element>(result: &[f64], out: &mut [T]) {
    for (slot, &value) in out.iter_mut().zip(result) {
        let value = if value.is_nan() { f64::NAN } else { value };
        *slot = T::from_f64(value);
    }
}

impl<T: Element> RunWriter<T> for Compiled {
    type Scratch = Scratch;

    fn scratch(&self) -> Scratch {
        Scratch::new(self)
    }

    #[inline(always)]
    fn write_run(
        &self,
        scratch: &mut Scratch,
        start: u64,
        out: &mut [T],
    ) -> Result<(), (u64, Error)> {
        self.eval_run(None, start, out, scratch)
    }
}

/// A program over the fused fill of its source ([`Compiled::fill_over`]).
struct OverSource<'a> {
    source: &'a Source,
    program: &'a Compiled,
}

impl<T: Element> RunWriter<T> for OverSource<'_> {
    type Scratch = Scratch;

    fn scratch(&self) -> Scratch {
        Scratch::new(self.program)
    }

    #[inline(always)]
    fn write_run(
        &self,
        scratch: &mut Scratch,
        start: u64,
        out: &mut [T],
    ) -> Result<(), (u64, Error)> {
        self.program
            .eval_run(Some(self.source), start, out, scratch)
    }
}

/// The elements of [`Lanes`]: a block and a cache line.
const LANES_LEN: usize = BLOCK + 8;

/// One register's values in a block ([`BLOCK`] elements, then padding), in cache lines of
/// its own: a 64-byte vector load or store never straddles two lines, and the padding
/// keeps the same element of two registers from lying a multiple of 4 KiB apart (where
/// a load waits on an unrelated store to the other).
#[derive(Clone)]
#[repr(C, align(64))]
struct Lanes([f64; LANES_LEN]);

impl std::ops::Deref for Lanes {
    type Target = [f64];

    fn deref(&self) -> &[f64] {
        &self.0[..BLOCK]
    }
}

impl std::ops::DerefMut for Lanes {
    fn deref_mut(&mut self) -> &mut [f64] {
        &mut self.0[..BLOCK]
    }
}

/// Reused buffers of one run.
struct Scratch {
    registers: Vec<Lanes>,
    /// Per register and element, the refused `sin`/`cos` (and its argument) the value
    /// depends on; only when [`Compiled::may_refuse`].
    refused: Vec<Vec<Refusal>>,
    coords: Vec<Vec<u64>>,
    /// The coordinates of a block's first element, then of the run being written.
    odometer: Vec<u64>,
    words: Vec<u32>,
    /// Per register, whether the block's result reads it ([`Compiled::needed`]).
    needed: Vec<bool>,
}

impl Scratch {
    fn new(compiled: &Compiled) -> Scratch {
        let dims = if compiled.needs_coords {
            compiled.shape.len()
        } else {
            0
        };
        let words = if compiled.uses_words { 2 * BLOCK } else { 0 };
        // A constant's register is written once: no step writes another's register.
        let registers = compiled
            .steps
            .iter()
            .map(|step| match *step {
                Step::Constant(value) => Lanes([value; LANES_LEN]),
                _ => Lanes([0.0; LANES_LEN]),
            })
            .collect();
        Scratch {
            registers,
            refused: if compiled.may_refuse {
                vec![vec![None; BLOCK]; compiled.steps.len()]
            } else {
                Vec::new()
            },
            coords: vec![vec![0; BLOCK]; dims],
            odometer: vec![0; dims],
            words: vec![0; words],
            needed: vec![false; compiled.steps.len()],
        }
    }
}

impl Compiled {
    /// Coordinates of flat indices `[first, first + n)`: an odometer (`current`, one
    /// per dim) from `first`'s, a run of the last dim at a time (the other dims are
    /// constant along it).
    #[inline(always)]
    fn fill_coords(&self, first: u64, n: usize, coords: &mut [Vec<u64>], current: &mut [u64]) {
        let Some(last) = self.shape.len().checked_sub(1) else {
            return;
        };
        let mut rest = first;
        for d in (0..=last).rev() {
            current[d] = rest % self.shape[d];
            rest /= self.shape[d];
        }
        let mut k = 0;
        while k < n {
            let run = ((self.shape[last] - current[last]) as usize).min(n - k);
            for (column, &c) in coords[..last].iter_mut().zip(current.iter()) {
                column[k..k + run].fill(c);
            }
            for (slot, c) in coords[last][k..k + run].iter_mut().zip(current[last]..) {
                *slot = c;
            }
            k += run;
            current[last] += run as u64;
            // Carry into the dims before the last when the run ended its row.
            for d in (0..=last).rev() {
                if current[d] < self.shape[d] {
                    break;
                }
                current[d] = 0;
                if d > 0 {
                    current[d - 1] += 1;
                }
            }
        }
    }

    /// Evaluates every register the result needs at flat indices `[first, first + n)`
    /// (compiled for each backend by [`lanes`]).
    #[inline(always)]
    fn eval_block_passes(&self, first: u64, n: usize, scratch: &mut Scratch) {
        if self.needs_coords {
            self.fill_coords(first, n, &mut scratch.coords, &mut scratch.odometer);
        }
        if self.uses_words {
            let per = if self.two_words { 2 } else { 1 };
            self.stream
                .fill_words(first * per, &mut scratch.words[..n * per as usize]);
        }
        if self.conditions.is_empty() {
            for &index in &self.order {
                self.eval_step(index, first, n, scratch);
            }
            return;
        }
        // The `where` conditions first; then what the result needs of the rest: of a
        // `where` whose condition is the same on the whole block, only the branch taken.
        for &index in &self.conditions {
            self.eval_step(index, first, n, scratch);
        }
        let mut needed = std::mem::take(&mut scratch.needed);
        self.needed(n, scratch, &mut needed);
        for &index in &self.order {
            if needed[index] && !self.in_conditions[index] {
                self.eval_step(index, first, n, scratch);
            }
        }
        scratch.needed = needed;
    }

    /// The registers the result reads in a block of `n` whose `where` conditions are
    /// evaluated.
    #[inline(always)]
    fn needed(&self, n: usize, scratch: &Scratch, needed: &mut [bool]) {
        needed.fill(false);
        needed[self.result] = true;
        for (index, step) in self.steps.iter().enumerate().rev() {
            if !needed[index] {
                continue;
            }
            if let Step::Where(c, a, b) = *step {
                let condition = &scratch.registers[c][..n];
                needed[c] = true;
                needed[a] |= condition.iter().any(|&v| v != 0.0);
                needed[b] |= condition.contains(&0.0);
            } else {
                for operand in step.operands().into_iter().flatten() {
                    needed[operand] = true;
                }
            }
        }
    }

    /// Evaluates register `index` at flat indices `[first, first + n)` (its operands
    /// evaluated).
    #[inline(always)]
    fn eval_step(&self, index: usize, first: u64, n: usize, scratch: &mut Scratch) {
        let step = &self.steps[index];
        let (done, rest) = scratch.registers.split_at_mut(index);
        let dst = &mut rest[0][..n];
        match *step {
            Step::Source { ref sampler, dtype } => {
                source(sampler, dtype, self.two_words, &scratch.words, dst)
            }
            Step::Destination => {} // read back by `eval_run`
            Step::Constant(_) => {} // written when the scratch is made (`Scratch::new`)
            Step::Coord(dim) => {
                for (slot, &c) in dst.iter_mut().zip(&scratch.coords[dim]) {
                    *slot = c as f64;
                }
            }
            Step::Flat => {
                for (slot, index) in dst.iter_mut().zip(first..) {
                    *slot = index as f64;
                }
            }
            Step::Table(ref table) => gather(table, &scratch.coords, dst),
            Step::Unary(op, x) => unary(self.backend, op, &done[x][..n], dst),
            Step::Binary(op, a, b) => binary(op, &done[a][..n], &done[b][..n], dst),
            Step::Where(c, a, b) => select(&done[c][..n], &done[a][..n], &done[b][..n], dst),
            Step::Clamp(op, x, bound) => clamp(op, &done[x][..n], &done[bound][..n], dst),
            Step::RoundedBinary(op, a, b, dtype) => {
                rounded_binary(op, dtype, &done[a][..n], &done[b][..n], dst);
            }
            Step::ClampPair(ops, x, [low, high]) => {
                clamp_pair(ops, &done[x][..n], [&done[low][..n], &done[high][..n]], dst);
            }
            Step::Round(x, dtype) => round_lanes(dtype, &done[x][..n], dst),
            Step::ErfinvToF32(x) => math::erfinv_f32_slice_with(self.backend, &done[x][..n], dst),
            Step::Column { dim, ref values } => {
                for (slot, &c) in dst.iter_mut().zip(&scratch.coords[dim]) {
                    *slot = values[c as usize];
                }
            }
            Step::Unused => {}
        }
        if self.may_refuse {
            let (earlier, rest) = scratch.refused.split_at_mut(index);
            refusals(step, earlier, &done[..], &mut rest[0][..n]);
        }
    }
}

#[inline(always)]
fn source(sampler: &Sampler, dtype: Dtype, two_words: bool, words: &[u32], dst: &mut [f64]) {
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
fn select(c: &[f64], a: &[f64], b: &[f64], dst: &mut [f64]) {
    for (((slot, &c), &a), &b) in dst.iter_mut().zip(c).zip(a).zip(b) {
        *slot = if c != 0.0 { a } else { b };
    }
}

/// [`Step::Clamp`] of each element: `bound` where `x op bound` holds, else `x` (a NaN
/// `x` compares false and is kept, as the `where` keeps it).
#[inline(always)]
fn clamp(op: BinaryOp, x: &[f64], bound: &[f64], dst: &mut [f64]) {
    // One loop per comparison, so that each vectorizes.
    match op {
        BinaryOp::Lt => map2(x, bound, dst, |x, b| if x < b { b } else { x }),
        BinaryOp::Gt => map2(x, bound, dst, |x, b| if x > b { b } else { x }),
        _ => unreachable!("a clamp compares by lt or gt (`clamps`)"),
    }
}

/// [`Step::ClampPair`] of each element: [`clamp`] by `ops[0]` and `bounds[0]`, then by
/// `ops[1]` and `bounds[1]`.
#[inline(always)]
fn clamp_pair(ops: [BinaryOp; 2], x: &[f64], bounds: [&[f64]; 2], dst: &mut [f64]) {
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

/// [`Step::RoundedBinary`] of each element: `a op b`, then [`round_to`] `dtype`.
#[inline(always)]
fn rounded_binary(op: BinaryOp, dtype: Dtype, a: &[f64], b: &[f64], dst: &mut [f64]) {
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
fn round_lanes(dtype: Dtype, x: &[f64], dst: &mut [f64]) {
    match dtype {
        Dtype::F64 => dst.copy_from_slice(x),
        Dtype::F32 => map1(x, dst, |v| round_to(Dtype::F32, v)),
        Dtype::BF16 => map1(x, dst, |v| round_to(Dtype::BF16, v)),
        Dtype::F16 => map1(x, dst, |v| round_to(Dtype::F16, v)),
    }
}

#[inline(always)]
fn gather(table: &Table, coords: &[Vec<u64>], dst: &mut [f64]) {
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
/// `sin`/`cos` argument beyond [`math::TRIG_MAX`] gives NaN here; [`refusals`] marks
/// the element refused.
#[inline(always)]
fn unary(backend: Backend, op: UnaryOp, x: &[f64], dst: &mut [f64]) {
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

/// The refused `sin`/`cos` an element's value depends on, if any.
type Refusal = Option<(UnaryOp, f64)>;

/// Whether `sin`/`cos` refuse `v`: finite beyond the exactly reduced range
/// (infinities and NaN give NaN, as in C99).
fn refused(v: f64) -> bool {
    v.is_finite() && v.abs() > math::TRIG_MAX
}

/// The refusals of `step`'s register: its own (`sin`/`cos`) or those of the operands
/// its value takes, so that a `where` passes on only those of the branch it selects and
/// a program is refused only where a refused value reaches the result.
#[inline(always)]
fn refusals(step: &Step, earlier: &[Vec<Refusal>], values: &[Lanes], dst: &mut [Refusal]) {
    let n = dst.len();
    match *step {
        Step::Unary(op @ (UnaryOp::Sin | UnaryOp::Cos), x) => {
            for (slot, (&v, &before)) in dst.iter_mut().zip(values[x].iter().zip(&earlier[x])) {
                *slot = if refused(v) { Some((op, v)) } else { before };
            }
        }
        Step::Unary(_, x) | Step::Round(x, _) | Step::ErfinvToF32(x) => {
            dst.copy_from_slice(&earlier[x][..n]);
        }
        Step::Binary(_, a, b) | Step::Clamp(_, a, b) | Step::RoundedBinary(_, a, b, _) => {
            for (slot, (&ra, &rb)) in dst.iter_mut().zip(earlier[a].iter().zip(&earlier[b])) {
                *slot = ra.or(rb);
            }
        }
        // The first clamp's refusals (`x`'s, else the first bound's), else the second's.
        Step::ClampPair(_, x, [low, high]) => {
            let operands = earlier[x].iter().zip(&earlier[low]).zip(&earlier[high]);
            for (slot, ((&rx, &rl), &rh)) in dst.iter_mut().zip(operands) {
                *slot = rx.or(rl).or(rh);
            }
        }
        Step::Where(c, a, b) => {
            for k in 0..n {
                let taken = if values[c][k] != 0.0 {
                    earlier[a][k]
                } else {
                    earlier[b][k]
                };
                dst[k] = earlier[c][k].or(taken);
            }
        }
        _ => dst.fill(None),
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
fn binary(op: BinaryOp, a: &[f64], b: &[f64], dst: &mut [f64]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::CHUNK_ELEMENTS;

    /// A program touching every instruction kind: a source, coordinates, the flat
    /// index, a broadcast table, unary and binary operations, a select and a rounding.
    fn every_kind(init: Init) -> Program {
        let mut p = Program::new();
        let s = p.source(init, Dtype::F32).unwrap();
        let c0 = p.coord(0).unwrap();
        let c2 = p.coord(2).unwrap();
        let flat = p.flat();
        let values: Arc<[f64]> = (0..11).map(|v| f64::from(v) * 0.25 - 0.5).collect();
        let t = p.table(values, vec![2, 0, 1], 0);
        let e = p.unary(UnaryOp::Exp, s).unwrap();
        let sum = p.binary(BinaryOp::Add, e, t).unwrap();
        let l = p.unary(UnaryOp::Log1p, flat).unwrap();
        let big = p.binary(BinaryOp::Gt, c0, c2).unwrap();
        let w = p.select(big, sum, l).unwrap();
        p.round(w, Dtype::BF16).unwrap();
        p
    }

    fn fill_f64(
        p: &Program,
        shape: &[u64],
        region: Region,
        len: usize,
        threads: Threads,
    ) -> Vec<f64> {
        let mut out = vec![0.0; len];
        p.fill_region(5, shape, &region, OutBuf::F64(&mut out), threads)
            .unwrap();
        out
    }

    #[test]
    fn any_part_of_a_box_or_flat_range_equals_the_full_evaluation() {
        let shape = [4u64, 3, 5];
        let p = every_kind(Init::Normal {
            mean: 0.0,
            std: 1.0,
        });
        let full = fill_f64(&p, &shape, Region::Flat { start: 0 }, 60, Threads::Count(1));
        // Values really vary (not a constant that would make every slice agree).
        assert!(full.iter().any(|&v| v != full[0]));
        for (start, len) in [(0, 1), (7, 9), (31, 29), (59, 1), (0, 60)] {
            let part = fill_f64(&p, &shape, Region::Flat { start }, len, Threads::Count(1));
            assert_eq!(part, full[start as usize..start as usize + len]);
        }
        let ranges = vec![(1, 3), (0, 3), (2, 5)];
        let whole = fill_f64(
            &p,
            &shape,
            Region::Box {
                ranges: ranges.clone(),
                offset: None,
            },
            18,
            Threads::Count(1),
        );
        let expect: Vec<f64> = (1..3)
            .flat_map(|i| {
                (0..3).flat_map(move |j| (2..5).map(move |k| (i * 15 + j * 5 + k) as usize))
            })
            .map(|index| full[index])
            .collect();
        assert_eq!(whole, expect);
        for (offset, len) in [(0, 4), (4, 7), (11, 7), (17, 1)] {
            let region = Region::Box {
                ranges: ranges.clone(),
                offset: Some(offset),
            };
            assert_eq!(
                fill_f64(&p, &shape, region, len, Threads::Count(1)),
                expect[offset as usize..offset as usize + len]
            );
        }
    }

    #[test]
    fn one_thread_equals_many() {
        let shape = [3u64, 50_000, 2];
        let p = every_kind(Init::Uniform { a: -1.0, b: 1.0 });
        let n = 300_000;
        let one = fill_f64(&p, &shape, Region::Flat { start: 0 }, n, Threads::Count(1));
        let three = fill_f64(&p, &shape, Region::Flat { start: 0 }, n, Threads::Count(3));
        assert_eq!(one, three);
    }

    #[test]
    fn a_single_source_equals_the_evaluator_and_the_fill_for_every_dtype() {
        let inits = [
            Init::Constant { value: 0.3 },
            Init::Uniform { a: -2.0, b: 3.0 },
            Init::Normal {
                mean: 0.5,
                std: 2.0,
            },
            Init::TruncNormal {
                mean: 0.0,
                std: 1.0,
                a: -2.0,
                b: 1.0,
            },
        ];
        let shape = [7u64, 11];
        let region = Region::Box {
            ranges: vec![(2, 6), (3, 10)],
            offset: None,
        };
        for init in inits {
            for dtype in Dtype::ALL {
                let mut p = Program::new();
                p.source(init, dtype).unwrap();
                let mut q = Program::new();
                let s = q.source(init, dtype).unwrap();
                q.round(s, dtype).unwrap();
                let param = ParamStream {
                    key64: 9,
                    global_shape: shape.to_vec(),
                    init,
                };
                macro_rules! check {
                    ($t:ty, $variant:ident) => {{
                        let mut a = vec![<$t>::from_f64(0.0); 28];
                        let mut b = a.clone();
                        let mut c = a.clone();
                        let mut d = a.clone();
                        p.fill_region(
                            9,
                            &shape,
                            &region,
                            OutBuf::$variant(&mut a),
                            Threads::Count(1),
                        )
                        .unwrap();
                        p.fill_region_evaluated(
                            9,
                            &shape,
                            &region,
                            OutBuf::$variant(&mut b),
                            Threads::Count(1),
                        )
                        .unwrap();
                        q.fill_region(
                            9,
                            &shape,
                            &region,
                            OutBuf::$variant(&mut c),
                            Threads::Count(1),
                        )
                        .unwrap();
                        param
                            .fill_region(&region, OutBuf::$variant(&mut d), Threads::Count(1))
                            .unwrap();
                        let bits =
                            |v: &[$t]| v.iter().map(|x| x.widen().to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&a), bits(&d), "{init:?} {dtype:?}");
                        assert_eq!(bits(&b), bits(&d), "{init:?} {dtype:?}");
                        assert_eq!(bits(&c), bits(&d), "{init:?} {dtype:?}");
                    }};
                }
                match dtype {
                    Dtype::F32 => check!(f32, F32),
                    Dtype::F64 => check!(f64, F64),
                    Dtype::BF16 => check!(bf16, BF16),
                    Dtype::F16 => check!(f16, F16),
                }
            }
        }
    }

    /// `source -> exp -> * 0.75 -> round to dtype` of `dtype`.
    fn source_then_steps(init: Init, dtype: Dtype) -> Program {
        let mut p = Program::new();
        let s = p.source(init, dtype).unwrap();
        let e = p.unary(UnaryOp::Exp, s).unwrap();
        let k = p.constant(0.75);
        let m = p.binary(BinaryOp::Mul, e, k).unwrap();
        p.round(m, dtype).unwrap();
        p
    }

    #[test]
    fn a_source_with_steps_fused_equals_the_evaluator_for_every_dtype_region_and_thread_count() {
        let init = Init::Normal {
            mean: 0.5,
            std: 2.0,
        };
        let shape = [300u64, 37];
        let regions = [
            (Region::Flat { start: 11 }, 9_000),
            (
                Region::Box {
                    ranges: vec![(5, 290), (3, 30)],
                    offset: None,
                },
                285 * 27,
            ),
            (
                Region::Box {
                    ranges: vec![(5, 290), (3, 30)],
                    offset: Some(101),
                },
                4_000,
            ),
        ];
        for dtype in Dtype::ALL {
            let p = source_then_steps(init, dtype);
            assert!(p.fused_source(dtype).is_some());
            for (region, len) in &regions {
                macro_rules! check {
                    ($t:ty, $variant:ident) => {{
                        let bits =
                            |v: &[$t]| v.iter().map(|x| x.widen().to_bits()).collect::<Vec<_>>();
                        let mut want = vec![<$t>::from_f64(0.0); *len];
                        p.fill_region_evaluated(
                            9,
                            &shape,
                            region,
                            OutBuf::$variant(&mut want),
                            Threads::Count(1),
                        )
                        .unwrap();
                        assert!(want.iter().any(|v| v.widen() != want[0].widen()));
                        for threads in [1, 3] {
                            let mut fused = vec![<$t>::from_f64(0.0); *len];
                            p.fill_region(
                                9,
                                &shape,
                                region,
                                OutBuf::$variant(&mut fused),
                                Threads::Count(threads),
                            )
                            .unwrap();
                            assert_eq!(bits(&fused), bits(&want), "{dtype:?} {region:?} {threads}");
                        }
                    }};
                }
                match dtype {
                    Dtype::F32 => check!(f32, F32),
                    Dtype::F64 => check!(f64, F64),
                    Dtype::BF16 => check!(bf16, BF16),
                    Dtype::F16 => check!(f16, F16),
                }
            }
        }
        // A source of another dtype than the destination's is evaluated, not fused.
        assert!(source_then_steps(init, Dtype::BF16)
            .fused_source(Dtype::F32)
            .is_none());
    }

    #[test]
    fn an_orthogonal_source_takes_steps_on_its_fused_fill() {
        // torch: orthogonal_(w); w.mul_(0.5) -- the matrix is computed whole, so only
        // the fused path can give its values to a program.
        let init = Init::Orthogonal {
            gain: 1.0,
            max_numel: 1 << 20,
        };
        let shape = [6u64, 9];
        let mut matrix = vec![0f32; 54];
        ParamStream {
            key64: 4,
            global_shape: shape.to_vec(),
            init,
        }
        .fill_region(
            &Region::Flat { start: 0 },
            OutBuf::F32(&mut matrix),
            Threads::Count(1),
        )
        .unwrap();
        let mut p = Program::new();
        let s = p.source(init, Dtype::F32).unwrap();
        let k = p.constant(0.5);
        p.binary(BinaryOp::Mul, s, k).unwrap();
        let region = Region::Box {
            ranges: vec![(1, 5), (2, 9)],
            offset: None,
        };
        let mut out = vec![0f32; 28];
        p.fill_region(4, &shape, &region, OutBuf::F32(&mut out), Threads::Count(2))
            .unwrap();
        let want: Vec<f32> = (1..5)
            .flat_map(|i| (2..9).map(move |j| i * 9 + j))
            .map(|index| matrix[index] * 0.5)
            .collect();
        assert_eq!(out, want);
        // Through the evaluator alone, an orthogonal source has no sampler.
        let err = p
            .fill_region_evaluated(4, &shape, &region, OutBuf::F32(&mut out), Threads::Count(1))
            .unwrap_err();
        assert!(matches!(err, Error::NoSampler { .. }), "{err:?}");
    }

    #[test]
    fn the_evaluated_source_equals_the_fused_fill_of_every_backend() {
        // The evaluator is scalar; backends differ only in the fused kernels (and in
        // the Philox of `Stream::fill_words`, checked equal in philox.rs).
        let init = Init::TruncNormal {
            mean: 0.5,
            std: 2.0,
            a: -1.0,
            b: 4.0,
        };
        let param = ParamStream {
            key64: 3,
            global_shape: vec![1000],
            init,
        };
        let mut p = Program::new();
        let s = p.source(init, Dtype::F32).unwrap();
        p.round(s, Dtype::F32).unwrap();
        let mut evaluated = vec![0f32; 997];
        let region = Region::Flat { start: 3 };
        p.fill_region(
            3,
            &[1000],
            &region,
            OutBuf::F32(&mut evaluated),
            Threads::Count(1),
        )
        .unwrap();
        for backend in crate::Backend::available() {
            let mut fused = vec![0f32; 997];
            param
                .fill_flat_using(backend, 3, &mut fused, Threads::Count(1))
                .unwrap();
            assert_eq!(fused, evaluated, "{backend:?}");
        }
    }

    #[test]
    fn nans_are_written_as_the_one_quiet_nan() {
        let mut p = Program::new();
        let neg = p.constant(-1.0);
        let z = p.unary(UnaryOp::Sqrt, neg).unwrap(); // x86 gives the negative default NaN
        let zero = p.constant(0.0);
        p.binary(BinaryOp::Div, z, zero).unwrap();
        let out = fill_f64(&p, &[2], Region::Flat { start: 0 }, 2, Threads::Count(1));
        assert!(out.iter().all(|v| v.to_bits() == f64::NAN.to_bits()));
    }

    #[test]
    fn bad_programs_are_refused_with_their_argument_named() {
        let mut p = Program::new();
        let mut out = [0f64; 4];
        let flat = Region::Flat { start: 0 };
        let err = p
            .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
            .unwrap_err();
        assert_eq!(err, Error::EmptyProgram);
        assert_eq!(
            p.unary(UnaryOp::Exp, 0).unwrap_err().to_string(),
            "x must be an earlier register of the program (0 <= x < 0), got 0"
        );
        let x = p.constant(1.0);
        assert!(matches!(
            p.binary(BinaryOp::Add, x, 1),
            Err(Error::BadRegister {
                arg: "b",
                value: 1,
                len: 1
            })
        ));
        assert!(matches!(
            p.select(3, x, x),
            Err(Error::BadRegister { arg: "cond", .. })
        ));
        assert_eq!(
            p.coord(-1).unwrap_err().to_string(),
            "dim must be >= 0, got -1"
        );
        let msg = UnaryOp::from_name("atan").unwrap_err().to_string();
        assert!(msg.starts_with("op must be one of 'neg', 'abs', "), "{msg}");
        assert!(msg.ends_with("'round_half_even', got 'atan'"), "{msg}");
        assert!(BinaryOp::from_name("atan2")
            .unwrap_err()
            .to_string()
            .ends_with("'ne', got 'atan2'"));

        let mut c = Program::new();
        c.coord(1).unwrap();
        let err = c
            .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "coord dim must be < 1, the dims of the global shape, got 1"
        );

        let values: Arc<[f64]> = vec![0.0; 6].into();
        let mut t = Program::new();
        t.table(values.clone(), vec![3, 1], 0);
        let err = t
            .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
            .unwrap_err();
        assert_eq!(
            err,
            Error::TableRank {
                strides: 2,
                dims: 1
            }
        );
        let err = t
            .fill_region(0, &[2, 4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
            .unwrap_err();
        assert_eq!(
            err,
            Error::TableOutOfBounds {
                low: 0,
                high: 6,
                len: 6
            }
        );
        let mut n = Program::new();
        n.table(values, vec![-1], 2);
        let err = n
            .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
            .unwrap_err();
        assert_eq!(
            err,
            Error::TableOutOfBounds {
                low: -1,
                high: 2,
                len: 6
            }
        );
        // The whole shape is checked, not only the region filled.
        let mut one = [0f64; 1];
        let err = n
            .fill_region(0, &[4], &flat, OutBuf::F64(&mut one), Threads::Count(1))
            .unwrap_err();
        assert!(matches!(err, Error::TableOutOfBounds { .. }));
    }

    #[test]
    fn a_refused_sin_is_refused_only_where_it_reaches_the_result() {
        // Whisper's table: cat([sin(pos * f(c)), cos(pos * f(c - half))]) is a where of
        // the column; each branch, at the other half's columns, takes arguments far
        // beyond TRIG_MAX. Those values are never selected, so nothing is refused.
        let mut p = Program::new();
        let flat = p.flat();
        let half = p.constant(4.0);
        let right = p.binary(BinaryOp::Ge, flat, half).unwrap();
        let big = p.constant(1e9);
        let x = p.binary(BinaryOp::Mul, flat, big).unwrap();
        let left_value = p.unary(UnaryOp::Cos, x).unwrap(); // beyond TRIG_MAX at flat >= 1
        let zero = p.constant(0.0);
        let sum = p.binary(BinaryOp::Add, left_value, zero).unwrap();
        let w = p.select(right, zero, sum).unwrap();
        p.round(w, Dtype::F32).unwrap();
        let mut out = [f32::NAN; 8];
        // Flat 0 is cos(0); flat 1..4 select a refused value.
        let err = p
            .fill_region(
                0,
                &[8],
                &Region::Flat { start: 0 },
                OutBuf::F32(&mut out),
                Threads::Count(1),
            )
            .unwrap_err();
        assert_eq!(
            err,
            Error::TrigArgument {
                op: "cos",
                value: 1e9,
                limit: math::TRIG_MAX
            }
        );
        // Flats 4..8 take the other branch: filled, not refused.
        let mut right_half = [f32::NAN; 4];
        p.fill_region(
            0,
            &[8],
            &Region::Flat { start: 4 },
            OutBuf::F32(&mut right_half),
            Threads::Count(1),
        )
        .unwrap();
        assert_eq!(right_half, [0.0; 4]);
        // A refused condition refuses whichever branch it picks.
        let mut q = Program::new();
        let flat = q.flat();
        let big = q.constant(1e9);
        let x = q.binary(BinaryOp::Mul, flat, big).unwrap();
        let s = q.unary(UnaryOp::Sin, x).unwrap();
        let one = q.constant(1.0);
        q.select(s, one, one).unwrap();
        let mut two = [0f32; 2];
        let err = q
            .fill_region(
                0,
                &[2],
                &Region::Flat { start: 0 },
                OutBuf::F32(&mut two),
                Threads::Count(1),
            )
            .unwrap_err();
        assert!(
            matches!(err, Error::TrigArgument { op: "sin", .. }),
            "{err:?}"
        );
    }

    #[test]
    fn sin_beyond_trig_max_is_refused_at_the_lowest_index() {
        let mut p = Program::new();
        let flat = p.flat();
        let scale = p.constant(1e6);
        let x = p.binary(BinaryOp::Mul, flat, scale).unwrap();
        p.unary(UnaryOp::Sin, x).unwrap();
        let n = 3 * CHUNK_ELEMENTS;
        let mut out = vec![0f32; n];
        let err = p
            .fill_region(
                0,
                &[n as u64],
                &Region::Flat { start: 0 },
                OutBuf::F32(&mut out),
                Threads::Count(3),
            )
            .unwrap_err();
        assert_eq!(
            err,
            Error::TrigArgument {
                op: "sin",
                value: 2e6,
                limit: math::TRIG_MAX
            }
        );
        assert!(err
            .to_string()
            .starts_with("sin argument must satisfy |x| <= 1647099.3291652855"));
        // Up to the limit: computed.
        let mut ok = [0f32; 2];
        p.fill_region(
            0,
            &[2],
            &Region::Flat { start: 0 },
            OutBuf::F32(&mut ok),
            Threads::Count(1),
        )
        .unwrap();
        assert_eq!(ok, [0.0, math::sin(1e6) as f32]);
        // Infinities are not refused: sin(inf) is NaN.
        let mut inf = Program::new();
        let x = inf.constant(f64::NEG_INFINITY);
        inf.unary(UnaryOp::Cos, x).unwrap();
        inf.fill_region(
            0,
            &[2],
            &Region::Flat { start: 0 },
            OutBuf::F32(&mut ok),
            Threads::Count(1),
        )
        .unwrap();
        assert!(ok[0].is_nan() && ok[1].is_nan());
    }

    /// `source, erfinv` with the erfinv seen only rounded to float32 (the last register
    /// of a float32 fill; read by a `Round` to float32) takes the rounded erfinv, and
    /// gives what `erfinv` rounded after gives (where a `where` also reads it unrounded).
    #[test]
    fn erfinv_seen_only_rounded_to_float32_gives_the_rounded_erfinv() {
        let shape = [37u64, 1000];
        let fused = |p: &Program| {
            let c = p.compile(5, &shape, Dtype::F32, None).unwrap();
            c.steps.iter().any(|s| matches!(s, Step::ErfinvToF32(_)))
        };
        let fill = |p: &Program| {
            let mut out = vec![0f32; 37_000];
            let region = Region::Flat { start: 0 };
            p.fill_region(5, &shape, &region, OutBuf::F32(&mut out), Threads::Count(3))
                .unwrap();
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        // `round` rounds erfinv before the result; `also_read`: a `where` reads it too.
        let program = |round: bool, also_read: bool| {
            let mut p = Program::new();
            let s = p
                .source(Init::Uniform { a: -1.0, b: 1.0 }, Dtype::F32)
                .unwrap();
            let e = p.unary(UnaryOp::Erfinv, s).unwrap();
            if round || also_read {
                let r = if round {
                    p.round(e, Dtype::F32).unwrap()
                } else {
                    e
                };
                let other = if also_read { e } else { r };
                let c = p.binary(BinaryOp::Eq, other, other).unwrap();
                p.select(c, r, other).unwrap();
            }
            p
        };
        for round in [false, true] {
            let (fast, reference) = (program(round, false), program(round, true));
            assert!(fused(&fast) && !fused(&reference), "round: {round}");
            assert!(fill(&fast) == fill(&reference), "round: {round}");
        }
        // Into a binary64 fill, the last register's erfinv is not rounded.
        assert!(!program(false, false)
            .compile(5, &shape, Dtype::F64, None)
            .unwrap()
            .steps
            .iter()
            .any(|s| matches!(s, Step::ErfinvToF32(_))));
    }

    /// `clamp_(min, max)` as capture records it (`where(x < lo, lo, x)`, then `>`) runs
    /// as two [`Step::Clamp`]s in one pass with the comparisons unused, and gives the bits of the
    /// same `where`s whose bound is another register of the same value (not rewritten):
    /// NaN, both zeros at a bound of zero, infinities, values at and beside the bounds,
    /// bounds that vary per element, a comparison another step also reads.
    #[test]
    fn a_clamp_equals_its_where_of_a_comparison_bit_for_bit() {
        let special = [
            f64::NEG_INFINITY,
            -2.5,
            -2.0,
            -1.0,
            -0.0,
            0.0,
            f64::NAN,
            1.5,
            2.0,
            2.000_000_1,
            f64::INFINITY,
            -1e-300,
            1e-300,
            -f64::NAN,
        ]; // fmt: skip
        let len = 64 * special.len();
        let values: Vec<f64> = (0..len)
            .map(|k| special[k % special.len()] * if k < len / 2 { 1.0 } else { 0.5 })
            .collect();
        let shape = [len as u64];
        let program = |fused: bool, bounds: (f64, f64), varying: bool, reuse: bool| {
            let mut p = Program::new();
            let x = p.table(values.clone().into(), vec![1], 0);
            let s = p
                .source(Init::Uniform { a: -3.0, b: 3.0 }, Dtype::F32)
                .unwrap();
            let x = p.binary(BinaryOp::Add, x, s).unwrap();
            let lo = if varying {
                p.binary(BinaryOp::Mul, s, s).unwrap()
            } else {
                p.constant(bounds.0)
            };
            let c = p.binary(BinaryOp::Lt, x, lo).unwrap();
            // The reference takes `(lo + lo) * 0.5`: the same value (exact), another
            // register, so its `where` is not rewritten.
            let lo_taken = if fused {
                lo
            } else {
                let half = p.constant(0.5);
                let twice = p.binary(BinaryOp::Add, lo, lo).unwrap();
                p.binary(BinaryOp::Mul, twice, half).unwrap()
            };
            let low = p.select(c, lo_taken, x).unwrap();
            let hi = p.constant(bounds.1);
            let c2 = p.binary(BinaryOp::Gt, low, hi).unwrap();
            let hi_taken = if fused { hi } else { p.constant(bounds.1) };
            let out = p.select(c2, hi_taken, low).unwrap();
            if reuse {
                p.binary(BinaryOp::Add, out, c).unwrap();
            }
            p
        };
        let fill = |p: &Program| {
            fill_f64(p, &shape, Region::Flat { start: 0 }, len, Threads::Count(2))
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        let steps = |p: &Program| p.compile(5, &shape, Dtype::F64, None).unwrap().steps;
        for bounds in [
            (-2.0, 2.0),
            (0.0, 0.0),
            (-0.0, 1.5),
            (f64::NEG_INFINITY, f64::NAN),
        ] {
            for (varying, reuse) in [(false, false), (true, false), (false, true)] {
                let (fast, reference) = (
                    program(true, bounds, varying, reuse),
                    program(false, bounds, varying, reuse),
                );
                // The two clamps in one pass: the first one unused too.
                let fast_steps = steps(&fast);
                let pairs = fast_steps
                    .iter()
                    .filter(|s| matches!(s, Step::ClampPair([BinaryOp::Lt, BinaryOp::Gt], ..)))
                    .count();
                let unused = fast_steps
                    .iter()
                    .filter(|s| matches!(s, Step::Unused))
                    .count();
                assert_eq!((pairs, unused), (1, if reuse { 2 } else { 3 }));
                assert!(!steps(&reference)
                    .iter()
                    .any(|s| matches!(s, Step::Clamp(..) | Step::ClampPair(..))));
                assert!(
                    fill(&fast) == fill(&reference),
                    "bounds {bounds:?}, varying {varying}, reuse {reuse}"
                );
            }
        }
    }

    /// A sinusoid table (Whisper's: `exp` of one coordinate, `sin`/`cos` of both, a
    /// `where` of the column) with its per-column registers hoisted gives, on the whole
    /// parameter and on a box of it, each element's value computed alone by the scalar
    /// functions; with rows of 64 (blocks of 256 take both branches) and of 1024 (each
    /// block one branch of the `where`).
    #[test]
    fn hoisted_columns_and_one_branch_blocks_give_each_elements_own_value() {
        for (rows, cols) in [(300u64, 64u64), (20, 1024)] {
            let half = (cols / 2) as f64;
            let increment = -9.21 / (half - 1.0);
            let mut p = Program::new();
            let row = p.coord(0).unwrap();
            let col = p.coord(1).unwrap();
            let h = p.constant(half);
            let second = p.binary(BinaryOp::Ge, col, h).unwrap();
            let shifted = p.binary(BinaryOp::Sub, col, h).unwrap();
            let j = p.select(second, shifted, col).unwrap();
            let increment_register = p.constant(increment);
            let scaled = p.binary(BinaryOp::Mul, j, increment_register).unwrap();
            let inv = p.unary(UnaryOp::Exp, scaled).unwrap();
            let inv = p.round(inv, Dtype::F32).unwrap();
            let angle = p.binary(BinaryOp::Mul, row, inv).unwrap();
            let sin = p.unary(UnaryOp::Sin, angle).unwrap();
            let cos = p.unary(UnaryOp::Cos, angle).unwrap();
            p.select(second, cos, sin).unwrap();
            let shape = [rows, cols];
            let steps = p.compile(5, &shape, Dtype::F64, None).unwrap().steps;
            let hoisted = steps.iter().filter(|s| matches!(s, Step::Column { .. }));
            let unused = steps.iter().filter(|s| matches!(s, Step::Unused));
            // Columns: `second` (the last `where` reads it) and the rounded `inv`; unused:
            // `shifted`, `j`, `scaled` and the `exp`.
            assert_eq!((hoisted.count(), unused.count()), (2, 4));
            let want = |r: u64, c: u64| {
                let j = if c as f64 >= half {
                    c as f64 - half
                } else {
                    c as f64
                };
                let inv = round_to(Dtype::F32, math::exp(j * increment));
                let angle = r as f64 * inv;
                if c as f64 >= half {
                    math::cos(angle)
                } else {
                    math::sin(angle)
                }
            };
            let numel = (rows * cols) as usize;
            let full = fill_f64(
                &p,
                &shape,
                Region::Flat { start: 0 },
                numel,
                Threads::Count(2),
            );
            for (k, got) in full.iter().enumerate() {
                let (r, c) = (k as u64 / cols, k as u64 % cols);
                assert_eq!(got.to_bits(), want(r, c).to_bits(), "({r}, {c})");
            }
            let (r0, r1, c0, c1) = (3, rows - 2, cols / 2 - 9, cols / 2 + 2);
            let region = Region::Box {
                ranges: vec![(r0, r1), (c0, c1)],
                offset: None,
            };
            let len = ((r1 - r0) * (c1 - c0)) as usize;
            let part = fill_f64(&p, &shape, region, len, Threads::Count(3));
            for (k, got) in part.iter().enumerate() {
                let (r, c) = (r0 + k as u64 / (c1 - c0), c0 + k as u64 % (c1 - c0));
                assert_eq!(got.to_bits(), want(r, c).to_bits(), "({r}, {c})");
            }
        }
    }

    #[test]
    fn round_half_even_is_torchs_round() {
        let cases = [
            (0.5, 0.0),
            (1.5, 2.0),
            (2.5, 2.0),
            (-2.5, -2.0),
            (-0.3, -0.0),
            (0.49999999999999994, 0.0),
            (4503599627370495.5, 4503599627370496.0),
            (4503599627370497.0, 4503599627370497.0),
            (-1e300, -1e300),
            (f64::INFINITY, f64::INFINITY),
            (-0.0, -0.0),
            (7.0, 7.0),
        ];
        for (x, want) in cases {
            assert_eq!(round_half_even(x).to_bits(), want.to_bits(), "{x}");
        }
        assert!(round_half_even(f64::NAN).is_nan());
    }

    #[test]
    fn min_max_mod_and_floordiv_follow_torch() {
        let nan = f64::NAN;
        assert!(minimum(nan, 1.0).is_nan() && maximum(1.0, nan).is_nan());
        assert_eq!(minimum(-0.0, 0.0).to_bits(), (-0f64).to_bits());
        assert_eq!(minimum(0.0, -0.0).to_bits(), (-0f64).to_bits());
        assert_eq!(maximum(-0.0, 0.0).to_bits(), 0f64.to_bits());
        assert_eq!((minimum(2.0, -3.0), maximum(2.0, -3.0)), (-3.0, 2.0));
        assert_eq!(
            (modulo(5.5, 2.0), modulo(-5.5, 2.0), modulo(5.5, -2.0)),
            (1.5, 0.5, -0.5)
        );
        assert_eq!(modulo(-4.0, 2.0).to_bits(), (-0f64).to_bits()); // fmod's sign, as torch
        assert_eq!(
            (
                floor_divide(7.0, 2.0),
                floor_divide(-7.0, 2.0),
                floor_divide(7.0, -2.0)
            ),
            (3.0, -4.0, -4.0)
        );
        assert_eq!(floor_divide(1.0, 0.0), f64::INFINITY);
        assert_eq!(floor_divide(-0.5, 3.0), -1.0);
        assert_eq!(floor_divide(0.5, -3.0), -1.0);
        assert_eq!(floor_divide(0.0, -3.0).to_bits(), (-0f64).to_bits());
    }
}
