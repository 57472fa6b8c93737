//! The one fill: a region of a parameter into a caller's buffer.

use pyo3::prelude::*;
use shardinit_core::ParamStream;

use crate::buffers::write_detached;
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
