//! The one fill: a region of a parameter into a caller's buffer.

use pyo3::prelude::*;
use shardinit_core::ParamStream;

use crate::buffers::{write_all_detached, write_detached};
use crate::errors::ShardInitError;
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

/// Fills each of `outs` with the region of the same position in `regions`, from one
/// source: an orthogonal matrix is computed once for all of them (a rank's region of
/// several boxes). Every region is checked before anything is computed or written;
/// otherwise the contract of `fill`, and buffers of `outs` may not overlap each other.
#[pyfunction]
#[pyo3(signature = (key, global_shape, init, dtype, regions, outs, threads = 0))]
#[allow(clippy::too_many_arguments)] // one per Python argument, plus the `py` token
pub fn fill_regions(
    py: Python<'_>,
    key: u64,
    global_shape: Vec<u64>,
    init: &PyInit,
    dtype: DtypeArg,
    regions: Vec<PyRef<'_, PyRegion>>,
    outs: Vec<Bound<'_, PyAny>>,
    threads: usize,
) -> PyResult<()> {
    if outs.len() != regions.len() {
        return Err(ShardInitError::new_err(format!(
            "outs must hold one buffer per region ({}), got {}",
            regions.len(),
            outs.len()
        )));
    }
    let param = ParamStream {
        key64: key,
        global_shape,
        init: init.0,
    };
    let regions: Vec<_> = regions.iter().map(|region| region.0.clone()).collect();
    write_all_detached(py, &outs, dtype.0, threads, |outs, threads| {
        param.fill_regions(regions.into_iter().zip(outs).collect(), threads)
    })
}
