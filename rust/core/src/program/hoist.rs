//! Work that does not vary along the block, hoisted out of it: a register whose value
//! depends on one coordinate only (a table's per-column `exp(-c * coord)`) is computed
//! once per value of that coordinate when the program is compiled, and gathered by the
//! coordinate per element, as a table is.
//!
//! The values are the same bits: the column is computed by the same functions on the
//! same operands (the coordinate's values, the constants), only fewer times. Registers
//! that depend on `sin`/`cos` are not hoisted (their refusals are per element), nor are
//! columns longer than [`MAX_COLUMN`] or used by fewer than two elements each.

use std::sync::Arc;

use super::ops::UnaryOp;
use super::passes::{binary, round_lanes, select, unary};
use super::steps::Step;
use crate::math;
use crate::philox::Backend;

/// The longest column computed ahead (its values are kept for the fill: 512 KiB).
const MAX_COLUMN: u64 = 1 << 16;

/// Where a register's value varies over the parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Varies {
    /// A constant.
    Never,
    /// With the coordinate of this dim only.
    AlongDim(usize),
    /// With anything else (the stream, the flat index, a table, several dims).
    Otherwise,
}

impl Varies {
    fn join(self, other: Varies) -> Varies {
        match (self, other) {
            (Varies::Never, v) | (v, Varies::Never) => v,
            (Varies::AlongDim(a), Varies::AlongDim(b)) if a == b => Varies::AlongDim(a),
            _ => Varies::Otherwise,
        }
    }
}

/// How each register varies, and whether it depends on a `sin`/`cos`.
fn dependence(steps: &[Step]) -> Vec<(Varies, bool)> {
    let mut found: Vec<(Varies, bool)> = Vec::with_capacity(steps.len());
    for step in steps {
        let own = match *step {
            Step::Constant(_) => Varies::Never,
            Step::Coord(dim) => Varies::AlongDim(dim),
            Step::Unary(..) | Step::Binary(..) | Step::Where(..) => Varies::Never,
            Step::Round(..) | Step::ErfinvToF32(_) => Varies::Never,
            _ => Varies::Otherwise,
        };
        let trig = matches!(step, Step::Unary(UnaryOp::Sin | UnaryOp::Cos, _));
        let (varies, trig) = step
            .operands()
            .into_iter()
            .flatten()
            .fold((own, trig), |(v, t), r| {
                (v.join(found[r].0), t || found[r].1)
            });
        found.push((varies, trig));
    }
    found
}

/// Replaces each register computed from one coordinate (and constants) whose value
/// other registers or the result read per element by a [`Step::Column`] of its values,
/// and the registers only such columns read by [`Step::Unused`].
pub(super) fn hoist_columns(backend: Backend, steps: &mut [Step], shape: &[u64], numel: u64) {
    let found = dependence(steps);
    // The dim of each register to hoist.
    let hoistable: Vec<Option<usize>> = steps
        .iter()
        .zip(&found)
        .map(|(step, &(varies, trig))| match varies {
            Varies::AlongDim(dim)
                if shape[dim] <= MAX_COLUMN
                    && 2 * shape[dim] <= numel
                    && !trig
                    && !matches!(step, Step::Constant(_) | Step::Coord(_)) =>
            {
                Some(dim)
            }
            _ => None,
        })
        .collect();
    let last = steps.len() - 1;
    // Read per element: by a register not hoisted, or the result.
    let mut read_per_element = vec![false; steps.len()];
    read_per_element[last] = true;
    for (register, step) in steps.iter().enumerate() {
        if hoistable[register].is_none() {
            for r in step.operands().into_iter().flatten() {
                read_per_element[r] = true;
            }
        }
    }
    let columns: Vec<Option<Arc<[f64]>>> = (0..steps.len())
        .map(|register| match hoistable[register] {
            Some(dim) if read_per_element[register] => {
                Some(column(backend, steps, &found, register, dim, shape[dim]))
            }
            _ => None,
        })
        .collect();
    for (register, values) in columns.into_iter().enumerate() {
        match (hoistable[register], values) {
            (Some(dim), Some(values)) => steps[register] = Step::Column { dim, values },
            (Some(_), None) => steps[register] = Step::Unused,
            _ => {}
        }
    }
}

/// The values of `register` at coordinates `0..n` of `dim`: the registers it depends
/// on, in order, each over the whole column by the evaluator's own functions.
fn column(
    backend: Backend,
    steps: &[Step],
    found: &[(Varies, bool)],
    register: usize,
    dim: usize,
    n: u64,
) -> Arc<[f64]> {
    let n = n as usize;
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); register + 1];
    for (r, step) in steps[..=register].iter().enumerate() {
        if !matches!(found[r].0, Varies::Never | Varies::AlongDim(_)) {
            continue;
        }
        if matches!(found[r].0, Varies::AlongDim(d) if d != dim) {
            continue;
        }
        let (done, rest) = values.split_at_mut(r);
        let dst = &mut rest[0];
        dst.resize(n, 0.0);
        match *step {
            Step::Constant(value) => dst.fill(value),
            Step::Coord(_) => {
                for (slot, c) in dst.iter_mut().zip(0u64..) {
                    *slot = c as f64;
                }
            }
            Step::Unary(op, x) => unary(backend, op, &done[x], dst),
            Step::Binary(op, a, b) => binary(op, &done[a], &done[b], dst),
            Step::Where(c, a, b) => select(&done[c], &done[a], &done[b], dst),
            Step::Round(x, dtype) => round_lanes(dtype, &done[x], dst),
            Step::ErfinvToF32(x) => math::erfinv_f32_slice_with(backend, &done[x], dst),
            _ => unreachable!("a register of one coordinate is computed from constants"),
        }
    }
    values.swap_remove(register).into()
}
