//! The fingerprint term of a buffer of raw bit patterns (`shardinit_core::fingerprint`),
//! hashed with the GIL released: a seed checkpoint's writer thread hashes each piece it
//! writes while the next piece is generated.

use pyo3::buffer::{Element as BufferElement, PyBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::catch_panic;
use crate::inflight::Claim;

/// The fingerprint term of the elements whose bit patterns are `bits` (a C-contiguous
/// buffer of unsigned 8-, 16-, 32- or 64-bit integers: numpy's `uint16` view of a
/// bfloat16 tensor), at flat indices `start, start + 1, ...`: the sum of the format
/// "fp1" element hashes mod 2^64.
#[pyfunction]
pub fn flat_range_term(py: Python<'_>, bits: &Bound<'_, PyAny>, start: u64) -> PyResult<u64> {
    if let Ok(buffer) = PyBuffer::<u16>::get(bits) {
        return term_of(py, &buffer, start);
    }
    if let Ok(buffer) = PyBuffer::<u32>::get(bits) {
        return term_of(py, &buffer, start);
    }
    if let Ok(buffer) = PyBuffer::<u64>::get(bits) {
        return term_of(py, &buffer, start);
    }
    if let Ok(buffer) = PyBuffer::<u8>::get(bits) {
        return term_of(py, &buffer, start);
    }
    Err(PyTypeError::new_err(
        "bits must be a buffer of unsigned 8-, 16-, 32- or 64-bit integers (numpy uint8, \
         uint16, uint32 or uint64)",
    ))
}

fn term_of<T>(py: Python<'_>, buffer: &PyBuffer<T>, start: u64) -> PyResult<u64>
where
    T: BufferElement + Copy + Into<u64> + Sync,
{
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("bits must be C-contiguous"));
    }
    let len = buffer.item_count();
    if len == 0 {
        return Ok(0);
    }
    let address = buffer.buf_ptr() as usize;
    // No shardinit fill may write these bytes while they are hashed (nor start to).
    let _claim = Claim::new(address, len * std::mem::size_of::<T>())?;
    py.detach(|| {
        catch_panic(|| {
            // SAFETY: `address` is the start of `len` items of `T` in a live, C-contiguous
            // buffer (checked above; `PyBuffer::get` checked the item format and size),
            // kept alive by `buffer` for this call; every bit pattern is a valid `T`
            // (unsigned integers); the claim keeps shardinit's fills out of it.
            let items = unsafe { std::slice::from_raw_parts(address as *const T, len) };
            Ok(shardinit_core::fingerprint::flat_range_term(items, start))
        })
    })
}
