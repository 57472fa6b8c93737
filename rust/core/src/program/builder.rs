//! A program as its caller writes it: [`Program`], a list of registers in SSA form, each
//! checked to read only earlier registers when it is added.

use std::sync::Arc;

use super::ops::{BinaryOp, UnaryOp};
use crate::init::{Dtype, Init};
use crate::Error;

/// A constant table and how a register indexes it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Table {
    pub(super) values: Arc<[f64]>,
    pub(super) strides: Vec<i64>,
    pub(super) offset: i64,
}

/// One register's instruction.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Instr {
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
    pub(super) instrs: Vec<Instr>,
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

    /// `x` rounded to `dtype` ([`super::round_to`]).
    ///
    /// # Errors
    /// [`Error::BadRegister`] if `x` is not an earlier register.
    pub fn round(&mut self, x: usize, dtype: Dtype) -> Result<usize, Error> {
        let x = self.operand("x", x)?;
        Ok(self.push(Instr::Round(x, dtype)))
    }
}
