//! The one fill: a region of a parameter into a caller's buffer.

use pyo3::prelude::*;
use shardinit_core::{fill_many as core_fill_many, FillJob, JobValues, ParamStream};

use crate::buffers::{start_detached, threads_of, write_detached, Started};
use crate::program::PyProgram;
use crate::types::{DtypeArg, PyInit, PyRegion};

/// Fills `out` (a writable C-contiguous buffer of `dtype`'s item size) with `region`
/// of the parameter `(key, global_shape, init)`, on `threads` threads (0: every CPU).
/// The GIL is released while generating; a second fill of overlapping memory while
/// this one runs is refused (`ShardInitError` naming `out`).
#[pyfunction]
#[pyo3(signature = (key, global_shape, init, dtype, region, out, threads = 0))]
#[allow(clippy::too_many_arguments)] // one per Python argument, plus the `py` token
pub fn fill(
    py: Python<'_>,
    key: u64,
    global_shape: Vec<u64>,
    init: &PyInit,
    dtype: DtypeArg,
    region: &PyRegion,
    out: &Bound<'_, PyAny>,
    threads: usize,
) -> PyResult<()> {
    let param = ParamStream {
        key64: key,
        global_shape,
        init: init.0,
    };
    let region = region.0.clone();
    write_detached(py, out, dtype.0, threads, |out, threads| {
        param.fill_region(&region, out, threads)
    })
}

/// One fill of [`start_fills`]: `(key, global_shape, values, dtype, region, out)`, the
/// arguments of [`fill`] (`values` an `Init`) or of `fill_program` (a `RegisterProgram`).
type FillArgs<'py> = (
    u64,
    Vec<u64>,
    Values<'py>,
    DtypeArg,
    PyRef<'py, PyRegion>,
    Bound<'py, PyAny>,
);

/// The values of one fill of [`start_fills`]: a stream's initializer, or a program.
#[derive(FromPyObject)]
pub enum Values<'py> {
    Init(PyRef<'py, PyInit>),
    Program(PyRef<'py, PyProgram>),
}

/// Fills under way on a thread of their own ([`start_fills`]).
#[pyclass(name = "StartedFills", module = "shardinit._core")]
pub struct PyStartedFills(Started);

#[pymethods]
impl PyStartedFills {
    /// Waits for the fills to end (GIL released) and raises the first error among them
    /// in order; then the buffers are free again. A second call returns at once.
    fn wait(&mut self, py: Python<'_>) -> PyResult<()> {
        self.0.wait(py)
    }
}

/// Starts every fill of `fills` (each the arguments of `fill` or `fill_program` but
/// `threads`) on a new thread and returns at once, so the caller goes on while they run
/// (a model of many small parameters: its Python per parameter overlaps the core's).
/// They run side by side on `threads` (the core's `fill_many`). Every buffer is claimed
/// before this returns (as `fill` claims `out`); no two may overlap.
/// Until `wait()` returns, nothing may read or write them; every fill is attempted and
/// `wait()` raises the first error in order.
#[pyfunction]
#[pyo3(signature = (fills, threads = 1))]
pub fn start_fills(fills: Vec<FillArgs<'_>>, threads: usize) -> PyResult<PyStartedFills> {
    let outs: Vec<_> = fills
        .iter()
        .map(|(_, _, _, dtype, _, out)| (out, dtype.0))
        .collect();
    let params: Vec<_> = fills
        .iter()
        .map(|(key, shape, values, _, region, _)| {
            let values = match values {
                Values::Init(init) => JobValues::Stream(ParamStream {
                    key64: *key,
                    global_shape: shape.clone(),
                    init: init.0,
                }),
                // A cheap copy (tables are shared), so the GIL-free work holds no borrow.
                Values::Program(program) => JobValues::Program {
                    program: program.program().clone(),
                    key64: *key,
                    global_shape: shape.clone(),
                },
            };
            (values, region.0.clone())
        })
        .collect();
    let threads = threads_of(threads);
    let started = start_detached(&outs, move |outs| {
        let jobs = params
            .into_iter()
            .zip(outs)
            .map(|((values, region), out)| FillJob {
                values,
                region,
                out,
            })
            .collect();
        core_fill_many(jobs, threads)
    })?;
    Ok(PyStartedFills(started))
}
