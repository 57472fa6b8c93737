//! Keys, raw words, chunk ranges, the math functions and their constant tables, for
//! verification and for other implementations of the same operations (the GPU kernel).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMappingProxy};
use shardinit_core::Stream;

use crate::buffers::write_words_detached;
use crate::errors::{catch_panic, to_py_err};

/// Version of the stream format this build implements.
pub const STREAM_FORMAT_VERSION: u32 = 1;

/// key64 of stream-format.md §1 for `seed` in [0, 2^64) and a non-empty `name`.
#[pyfunction]
pub fn key64(seed: u64, name: &str) -> PyResult<u64> {
    shardinit_core::key64(seed, name).map_err(to_py_err)
}

/// Writes words `[start, start + len(out))` of the stream of `key` into `out`, a
/// writable C-contiguous buffer of uint32.
#[pyfunction]
pub fn stream_words(py: Python<'_>, key: u64, start: u64, out: &Bound<'_, PyAny>) -> PyResult<()> {
    write_words_detached(py, out, |words| {
        Stream::new(key).fill_words(start, words);
        Ok(())
    })
}

/// `(start, stop)` of chunk `rank` of `world` along a dim of `size` (torch.chunk).
#[pyfunction]
pub fn chunk_range(size: u64, rank: u64, world: u64) -> PyResult<(u64, u64)> {
    shardinit_core::chunk_range(size, rank, world).map_err(to_py_err)
}

/// Phi, the standard normal CDF, exactly as the core computes it (for verification).
#[pyfunction]
pub fn phi(x: f64) -> f64 {
    shardinit_core::math::phi(x)
}

/// PhiInv(p) with `q = 1 - p` supplied exactly, as the core computes it (for
/// verification).
#[pyfunction]
pub fn phi_inv(p: f64, q: f64) -> f64 {
    shardinit_core::math::phi_inv(p, q)
}

/// Panics inside the same GIL-released, panic-catching path every fill uses, so tests can
/// prove a panic in the core surfaces as `InternalError` and never aborts the process.
#[pyfunction]
#[pyo3(name = "_panic_for_test")]
pub fn panic_for_test(py: Python<'_>, message: &str) -> PyResult<()> {
    let message = message.to_owned();
    py.detach(|| catch_panic(move || -> Result<(), shardinit_core::Error> { panic!("{message}") }))
}

/// One of the core's constant tables (`shardinit_core::math::LOG_CONSTANTS`,
/// `PHI_INV_CONSTANTS`) as a read-only `{name: value}` mapping, in the table's order.
pub fn constant_table<'py>(
    py: Python<'py>,
    table: &[(&str, f64)],
) -> PyResult<Bound<'py, PyMappingProxy>> {
    let dict = PyDict::new(py);
    for &(name, value) in table {
        dict.set_item(name, value)?;
    }
    Ok(PyMappingProxy::new(py, dict.as_mapping()))
}
