//! Keys, raw words and region fills.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use shardinit_core::{Init, ParamStream, Stream, Threads};

use crate::buffers::OwnedOut;
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
    let buffer: PyBuffer<u32> = PyBuffer::get(out)?;
    if buffer.readonly() || !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "out must be a writable C-contiguous uint32 buffer",
        ));
    }
    let address = buffer.buf_ptr() as usize;
    let len = buffer.item_count();
    let result = py.detach(|| {
        catch_panic(|| {
            // SAFETY: `buffer` (alive until the end of this function) owns `len`
            // writable, contiguous u32 items at `address` (format checked by
            // `PyBuffer::get`); the slice does not outlive this closure.
            let words = unsafe { std::slice::from_raw_parts_mut(address as *mut u32, len) };
            Stream::new(key).fill_words(start, words);
            Ok(())
        })
    });
    drop(buffer);
    result
}

/// `(kind, p0, p1, p2, p3)` as the Python package encodes a base initializer.
fn parse_init(kind: &str, params: (f64, f64, f64, f64)) -> PyResult<Init> {
    let (p0, p1, p2, p3) = params;
    Ok(match kind {
        "constant" => Init::Constant { value: p0 },
        "uniform" => Init::Uniform { a: p0, b: p1 },
        "normal" => Init::Normal { mean: p0, std: p1 },
        "trunc_normal" => Init::TruncNormal {
            mean: p0,
            std: p1,
            a: p2,
            b: p3,
        },
        other => {
            return Err(PyTypeError::new_err(format!(
                "init kind must be constant, uniform, normal or trunc_normal, got {other}"
            )))
        }
    })
}

fn threads_from(threads: usize) -> Threads {
    if threads == 0 {
        Threads::All
    } else {
        Threads::Count(threads)
    }
}

/// Fills `out` with the box `region` of the parameter in C order: the whole box when
/// `out_offset` is None (then `out` must hold exactly the box), else elements
/// `[out_offset, out_offset + len(out))` of it. The GIL is released while generating.
#[pyfunction]
#[pyo3(signature = (key, global_shape, init_kind, init_params, dtype, region, out_offset, out, threads=0))]
#[allow(clippy::too_many_arguments)] // mirrors the Python-side call, one value per argument
pub fn fill_box(
    py: Python<'_>,
    key: u64,
    global_shape: Vec<u64>,
    init_kind: &str,
    init_params: (f64, f64, f64, f64),
    dtype: &str,
    region: Vec<(u64, u64)>,
    out_offset: Option<u64>,
    out: &Bound<'_, PyAny>,
    threads: usize,
) -> PyResult<()> {
    let param = ParamStream {
        key64: key,
        global_shape,
        init: parse_init(init_kind, init_params)?,
    };
    let owned = OwnedOut::get(out, dtype)?;
    let raw = owned.raw(dtype)?;
    let result = py.detach(|| {
        catch_panic(|| {
            // SAFETY: `owned` keeps the buffer alive until after this closure returns,
            // and no Python code runs while the GIL is released here that we hand the
            // buffer to.
            let out = unsafe { raw.as_out() };
            param.fill_box_dyn(&region, out_offset, out, threads_from(threads))
        })
    });
    drop(owned);
    result
}

/// Fills `out` with flat elements `[start, start + len(out))` of the parameter.
#[pyfunction]
#[pyo3(signature = (key, global_shape, init_kind, init_params, dtype, start, out, threads=0))]
#[allow(clippy::too_many_arguments)] // mirrors the Python-side call, one value per argument
pub fn fill_flat(
    py: Python<'_>,
    key: u64,
    global_shape: Vec<u64>,
    init_kind: &str,
    init_params: (f64, f64, f64, f64),
    dtype: &str,
    start: u64,
    out: &Bound<'_, PyAny>,
    threads: usize,
) -> PyResult<()> {
    let param = ParamStream {
        key64: key,
        global_shape,
        init: parse_init(init_kind, init_params)?,
    };
    let owned = OwnedOut::get(out, dtype)?;
    let raw = owned.raw(dtype)?;
    let result = py.detach(|| {
        catch_panic(|| {
            // SAFETY: as in `fill_box`: `owned` outlives the closure.
            let out = unsafe { raw.as_out() };
            param.fill_flat_dyn(start, out, threads_from(threads))
        })
    });
    drop(owned);
    result
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
