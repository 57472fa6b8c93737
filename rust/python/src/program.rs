//! Init programs (stream-format.md §7): `RegisterProgram`, built register by register, and
//! `fill_program`, which fills a region with its last register.

use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use shardinit_core::{BinaryOp, Error, Program, UnaryOp};

use crate::buffers::write_detached;
use crate::errors::{to_py_err, ShardInitError};
use crate::types::{DtypeArg, PyInit, PyRegion};

/// An init program: registers computed elementwise, in binary64, at each element of a
/// fill's region; the last register is the result.
#[pyclass(name = "RegisterProgram", module = "shardinit._core")]
#[derive(Default)]
pub struct PyProgram(Program);

impl PyProgram {
    /// The core's program.
    pub fn program(&self) -> &Program {
        &self.0
    }
}

/// A register operand `arg`: negative values are refused with the core's message.
fn register(arg: &'static str, value: i64, len: usize) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| {
        to_py_err(Error::BadRegister {
            arg,
            value: i128::from(value),
            len,
        })
    })
}

#[pymethods]
impl PyProgram {
    #[new]
    fn new() -> PyProgram {
        PyProgram::default()
    }

    /// The value `init` gives this element in stream v1, rounded to `dtype`.
    fn source(&mut self, init: &PyInit, dtype: DtypeArg) -> PyResult<usize> {
        self.0.source(init.0, dtype.0).map_err(to_py_err)
    }

    /// The constant `value`.
    fn constant(&mut self, value: f64) -> usize {
        self.0.constant(value)
    }

    /// The element's global coordinate along `dim`.
    fn coord(&mut self, dim: i64) -> PyResult<usize> {
        self.0.coord(dim).map_err(to_py_err)
    }

    /// The element's global flat (C-order) index.
    fn flat(&mut self) -> usize {
        self.0.flat()
    }

    /// `values[offset + sum_d coord[d] * strides[d]]`; `values` is copied in.
    fn table(
        &mut self,
        values: &Bound<'_, PyAny>,
        strides: Vec<i64>,
        offset: i64,
    ) -> PyResult<usize> {
        let buffer: PyBuffer<f64> = PyBuffer::get(values).map_err(|error| {
            PyTypeError::new_err(format!(
                "values must be a 1-D C-contiguous float64 buffer, got {} ({error})",
                values
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        if buffer.dimensions() != 1 || !buffer.is_c_contiguous() {
            return Err(ShardInitError::new_err(format!(
                "values must be a 1-D C-contiguous float64 buffer, got {} dims",
                buffer.dimensions()
            )));
        }
        let copied: Arc<[f64]> = buffer.to_vec(values.py())?.into();
        Ok(self.0.table(copied, strides, offset))
    }

    /// `op(x)`.
    fn unary(&mut self, op: &str, x: i64) -> PyResult<usize> {
        let op = UnaryOp::from_name(op).map_err(to_py_err)?;
        let x = register("x", x, self.0.len())?;
        self.0.unary(op, x).map_err(to_py_err)
    }

    /// `op(a, b)`.
    fn binary(&mut self, op: &str, a: i64, b: i64) -> PyResult<usize> {
        let op = BinaryOp::from_name(op).map_err(to_py_err)?;
        let a = register("a", a, self.0.len())?;
        let b = register("b", b, self.0.len())?;
        self.0.binary(op, a, b).map_err(to_py_err)
    }

    /// `a` where `cond != 0`, else `b`.
    #[pyo3(name = "where")]
    fn select(&mut self, cond: i64, a: i64, b: i64) -> PyResult<usize> {
        let len = self.0.len();
        let (cond, a, b) = (
            register("cond", cond, len)?,
            register("a", a, len)?,
            register("b", b, len)?,
        );
        self.0.select(cond, a, b).map_err(to_py_err)
    }

    /// `x` rounded to `dtype`, read back as binary64.
    fn round(&mut self, x: i64, dtype: DtypeArg) -> PyResult<usize> {
        let x = register("x", x, self.0.len())?;
        self.0.round(x, dtype.0).map_err(to_py_err)
    }

    fn __len__(&self) -> usize {
        self.0.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<shardinit._core.RegisterProgram of {} registers>",
            self.0.len()
        )
    }
}

/// The names `RegisterProgram.unary` takes, in the core's order (the one home of the op set).
pub fn unary_ops() -> Vec<&'static str> {
    UnaryOp::ALL.iter().map(|op| op.name()).collect()
}

/// The names `RegisterProgram.binary` takes, in the core's order.
pub fn binary_ops() -> Vec<&'static str> {
    BinaryOp::ALL.iter().map(|op| op.name()).collect()
}

/// Fills `out` with `region` of `program`'s last register over the parameter
/// `(key, global_shape)`, rounded to `dtype`: the contract of `fill` otherwise.
#[pyfunction]
#[pyo3(signature = (key, global_shape, program, dtype, region, out, threads = 0))]
#[allow(clippy::too_many_arguments)] // one per Python argument, plus the `py` token
pub fn fill_program(
    py: Python<'_>,
    key: u64,
    global_shape: Vec<u64>,
    program: &Bound<'_, PyProgram>,
    dtype: DtypeArg,
    region: &PyRegion,
    out: &Bound<'_, PyAny>,
    threads: usize,
) -> PyResult<()> {
    // A cheap copy (tables are shared), so the GIL-free work holds no Python borrow.
    let program = program.borrow().0.clone();
    let region = region.0.clone();
    write_detached(py, out, dtype.0, threads, |out, threads| {
        program.fill_region(key, &global_shape, &region, out, threads)
    })
}
