//! The evaluator: a compiled program over a region, through the one region walk, a
//! block of [`BLOCK`] elements at a time (one scratch vector per register), with the
//! refusals of `sin`/`cos` carried per element; over the fused fill of its source a span
//! of `FUSED_SPAN` elements at a time (see the module docs of [`crate::program`]).

use super::compile::Compiled;
use super::ops::UnaryOp;
use super::passes::{
    binary, clamp, clamp_pair, gather, round_lanes, rounded_binary, select, source, unary,
};
use super::steps::Step;
use crate::fill::{ParamStream, Source};
use crate::geometry::checked_numel;
use crate::init::{Element, OutBuf};
use crate::math;
use crate::pool::Threads;
use crate::region::{Region, RunWriter, Walk};
use crate::Error;

/// Elements evaluated together: one scratch vector of this length per register.
pub const BLOCK: usize = 256;

/// Elements of a fused source written at a time, each span then evaluated: its 16 KiB
/// of float32 are still in the cache when the blocks read them back, and the fill
/// kernels' per-call set-up (about 7 KiB of buffers zeroed) is under 2 bytes an element.
const FUSED_SPAN: usize = 16 * BLOCK;

impl Compiled {
    /// [`Compiled::fill`] of a buffer of any dtype.
    pub(super) fn fill_buffer(
        &self,
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
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
    pub(super) fn fill_over<T: Element>(
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
pub(super) fn read_back_passes<T: Element>(out: &[T], dst: &mut [f64]) {
    for (slot, value) in dst.iter_mut().zip(out) {
        *slot = value.widen();
    }
}

/// The result rounded to `out`'s dtype, with one NaN for every platform (the payload
/// and sign of NaNs are not IEEE's).
#[inline(always)]
pub(super) fn write_result_passes<T: Element>(result: &[f64], out: &mut [T]) {
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
pub(super) struct Scratch {
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
    /// (compiled for each backend by [`super::lanes`]).
    #[inline(always)]
    pub(super) fn eval_block_passes(&self, first: u64, n: usize, scratch: &mut Scratch) {
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
