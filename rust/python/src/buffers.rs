//! Writable, C-contiguous views of Python buffers (numpy arrays that alias torch
//! tensors' memory), handed to the core without copying.

use half::{bf16, f16};
use pyo3::buffer::{Element as BufferElement, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use shardinit_core::{Dtype, Error, OutBuf, Threads};

use crate::errors::catch_panic;
use crate::inflight::Claim;

/// A raw view of a writable buffer. The `PyBuffer` that owns the memory is held by the
/// caller for as long as the view is used; the view itself only carries the address so
/// it can cross into `py.detach`.
pub struct RawOut {
    address: usize,
    len: usize,
    dtype: Dtype,
}

fn checked<T: BufferElement>(buffer: &PyBuffer<T>, dtype: Dtype) -> PyResult<RawOut> {
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
    /// Gets the buffer of `object` for `dtype`; `PyBuffer::get` checks that its item
    /// format and size match.
    pub fn get(object: &Bound<'_, PyAny>, dtype: Dtype) -> PyResult<OwnedOut> {
        Ok(match dtype {
            Dtype::F32 => OwnedOut::F32(PyBuffer::get(object)?),
            Dtype::F64 => OwnedOut::F64(PyBuffer::get(object)?),
            Dtype::BF16 | Dtype::F16 => OwnedOut::Half(PyBuffer::get(object)?),
        })
    }

    /// The raw view of `dtype` (the one given to [`OwnedOut::get`]), after checking
    /// writability and contiguity.
    pub fn raw(&self, dtype: Dtype) -> PyResult<RawOut> {
        match self {
            OwnedOut::F32(b) => checked(b, dtype),
            OwnedOut::F64(b) => checked(b, dtype),
            OwnedOut::Half(b) => checked(b, dtype),
        }
    }
}

impl RawOut {
    /// Claims the buffer's bytes for one fill (see [`Claim`]).
    pub fn claim(&self) -> PyResult<Claim> {
        Claim::new(self.address, self.len * self.dtype.size_bytes())
    }

    /// The buffer as a core output slice.
    ///
    /// # Safety
    /// The `OwnedOut` this view came from must be alive for `'a`, and nothing else may
    /// access the memory while the slice is used.
    pub unsafe fn as_out<'a>(&self) -> OutBuf<'a> {
        let (address, len) = (self.address, self.len);
        // SAFETY: `address` is the start of a live, writable, C-contiguous buffer of
        // `len` items whose format and size `PyBuffer::get` checked against `dtype`
        // (and `checked` its writability and contiguity); the caller guarantees it
        // outlives 'a and is not otherwise accessed. bf16 and f16 are
        // `repr(transparent)` over u16 and every bit pattern is valid, so
        // reinterpreting 16-bit items is sound.
        unsafe {
            match self.dtype {
                Dtype::F32 => OutBuf::F32(std::slice::from_raw_parts_mut(address as *mut f32, len)),
                Dtype::F64 => OutBuf::F64(std::slice::from_raw_parts_mut(address as *mut f64, len)),
                Dtype::BF16 => {
                    OutBuf::BF16(std::slice::from_raw_parts_mut(address as *mut bf16, len))
                }
                Dtype::F16 => OutBuf::F16(std::slice::from_raw_parts_mut(address as *mut f16, len)),
            }
        }
    }
}

/// The threads argument of the fills: 0 means every CPU.
fn threads_of(count: usize) -> Threads {
    match count {
        0 => Threads::All,
        count => Threads::Count(count),
    }
}

/// Runs `write` on `out` (a buffer of `dtype`) with the GIL released: the one way the
/// fills write into a caller's buffer ([`write_all_detached`] of one buffer).
pub fn write_detached<W>(
    py: Python<'_>,
    out: &Bound<'_, PyAny>,
    dtype: Dtype,
    threads: usize,
    write: W,
) -> PyResult<()>
where
    W: FnOnce(OutBuf<'_>, Threads) -> Result<(), Error> + Send,
{
    write_all_detached(
        py,
        std::slice::from_ref(out),
        dtype,
        threads,
        |outs, threads| {
            let out = outs.into_iter().next().expect("one buffer per object");
            write(out, threads)
        },
    )
}

/// Runs `write` on `outs` (buffers of `dtype`) with the GIL released. Each buffer is
/// checked (item format and size, writability, contiguity) and claimed, so a second
/// shardinit fill of overlapping memory while this one runs is refused, and so is a
/// buffer that overlaps another of `outs`; a panic in `write` becomes `InternalError`.
pub fn write_all_detached<W>(
    py: Python<'_>,
    outs: &[Bound<'_, PyAny>],
    dtype: Dtype,
    threads: usize,
    write: W,
) -> PyResult<()>
where
    W: FnOnce(Vec<OutBuf<'_>>, Threads) -> Result<(), Error> + Send,
{
    let owned: Vec<OwnedOut> = outs
        .iter()
        .map(|out| OwnedOut::get(out, dtype))
        .collect::<PyResult<_>>()?;
    let raws: Vec<RawOut> = owned
        .iter()
        .map(|out| out.raw(dtype))
        .collect::<PyResult<_>>()?;
    // Claimed one after the other: a buffer overlapping an earlier one of `outs` is
    // refused like one of another running fill.
    let claims: Vec<Claim> = raws.iter().map(RawOut::claim).collect::<PyResult<_>>()?;
    let threads = threads_of(threads);
    let result = py.detach(|| {
        catch_panic(|| {
            // SAFETY: `owned` keeps the buffers alive until after this closure returns.
            // Other Python threads do run while the GIL is released (and at all times
            // on a free-threaded build): `claims` keep every other shardinit fill off
            // these bytes until they are dropped below, and keep the buffers of `outs`
            // pairwise disjoint (an overlap was refused), so no two slices alias;
            // anything else writing or reading the tensors meanwhile breaks the
            // documented contract of `out=` (concurrent writes to the same tensor are
            // not allowed).
            let outs = raws.iter().map(|raw| unsafe { raw.as_out() }).collect();
            write(outs, threads)
        })
    });
    drop(claims);
    drop(owned);
    result
}
