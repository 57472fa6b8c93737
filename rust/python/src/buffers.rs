//! Writable, C-contiguous views of Python buffers (numpy arrays that alias torch
//! tensors' memory), handed to the core without copying.

use half::{bf16, f16};
use pyo3::buffer::{Element as BufferElement, PyBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use shardinit_core::OutBuf;

/// A raw view of a writable buffer. The `PyBuffer` that owns the memory is held by the
/// caller for as long as the view is used; the view itself only carries the address so
/// it can cross into `py.detach`.
pub struct RawOut {
    address: usize,
    len: usize,
    dtype: &'static str,
}

fn checked<T: BufferElement>(buffer: &PyBuffer<T>, dtype: &'static str) -> PyResult<RawOut> {
    if buffer.readonly() {
        return Err(PyValueError::new_err(
            "out must be writable, got a read-only buffer",
        ));
    }
    if !buffer.is_c_contiguous() {
        return Err(PyValueError::new_err("out must be C-contiguous"));
    }
    Ok(RawOut {
        address: buffer.buf_ptr() as usize,
        len: buffer.item_count(),
        dtype,
    })
}

/// A buffer of one of the dtypes the core writes, kept alive while it is written.
pub enum OwnedOut {
    /// float32 items (`'f'`).
    F32(PyBuffer<f32>),
    /// float64 items (`'d'`).
    F64(PyBuffer<f64>),
    /// 16-bit items (`'h'`), reinterpreted as bfloat16 or float16 bits.
    Half(PyBuffer<i16>),
}

impl OwnedOut {
    /// Gets the buffer of `object` for `dtype` ("float32", "float64", "bfloat16",
    /// "float16").
    pub fn get(object: &Bound<'_, PyAny>, dtype: &str) -> PyResult<OwnedOut> {
        Ok(match dtype {
            "float32" => OwnedOut::F32(PyBuffer::get(object)?),
            "float64" => OwnedOut::F64(PyBuffer::get(object)?),
            "bfloat16" | "float16" => OwnedOut::Half(PyBuffer::get(object)?),
            other => {
                return Err(PyTypeError::new_err(format!(
                    "dtype must be one of float32, float64, bfloat16, float16, got {other}"
                )))
            }
        })
    }

    /// The raw view, after checking writability and contiguity.
    pub fn raw(&self, dtype: &str) -> PyResult<RawOut> {
        match (self, dtype) {
            (OwnedOut::F32(b), _) => checked(b, "float32"),
            (OwnedOut::F64(b), _) => checked(b, "float64"),
            (OwnedOut::Half(b), "bfloat16") => checked(b, "bfloat16"),
            (OwnedOut::Half(b), _) => checked(b, "float16"),
        }
    }
}

impl RawOut {
    /// The buffer as a core output slice.
    ///
    /// # Safety
    /// The `OwnedOut` this view came from must be alive for `'a`, and nothing else may
    /// access the memory while the slice is used.
    pub unsafe fn as_out<'a>(&self) -> OutBuf<'a> {
        let len = self.len;
        // SAFETY: `address` is the start of a live, writable, C-contiguous buffer of
        // `len` items of the matching size (checked by `PyBuffer::get`, which validates
        // the item format and size, and by `checked`); the caller guarantees it outlives
        // 'a and is not aliased. bf16 and f16 are `repr(transparent)` over u16 and every
        // bit pattern is valid, so reinterpreting 16-bit items is sound.
        unsafe {
            match self.dtype {
                "float32" => OutBuf::F32(std::slice::from_raw_parts_mut(
                    self.address as *mut f32,
                    len,
                )),
                "float64" => OutBuf::F64(std::slice::from_raw_parts_mut(
                    self.address as *mut f64,
                    len,
                )),
                "bfloat16" => OutBuf::BF16(std::slice::from_raw_parts_mut(
                    self.address as *mut bf16,
                    len,
                )),
                _ => OutBuf::F16(std::slice::from_raw_parts_mut(
                    self.address as *mut f16,
                    len,
                )),
            }
        }
    }
}
