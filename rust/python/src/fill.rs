//! The one fill: a region of a parameter into a caller's buffer.

use pyo3::prelude::*;
use shardinit_core::{ParamStream, Threads};

use crate::buffers::OwnedOut;
use crate::errors::catch_panic;
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
    let threads = match threads {
        0 => Threads::All,
        count => Threads::Count(count),
    };
    let owned = OwnedOut::get(out, dtype.0)?;
    let raw = owned.raw(dtype.0)?;
    let claim = raw.claim()?;
    let result = py.detach(|| {
        catch_panic(|| {
            // SAFETY: `owned` keeps the buffer alive until after this closure returns.
            // Other Python threads do run while the GIL is released (and at all times
            // on a free-threaded build): `claim` keeps every other shardinit fill off
            // these bytes until it is dropped below, and anything else writing or
            // reading the tensor meanwhile breaks the documented contract of `out=`
            // (concurrent writes to the same tensor are not allowed).
            let out = unsafe { raw.as_out() };
            param.fill_region(&region, out, threads)
        })
    });
    drop(claim);
    drop(owned);
    result
}
