//! Writable, C-contiguous views of Python buffers (numpy arrays that alias torch
//! tensors' memory), handed to the core without copying.

use half::{bf16, f16};
use pyo3::buffer::{Element as BufferElement, PyBuffer};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use shardinit_core::{Dtype, Error, OutBuf, Threads};

use crate::errors::{catch_panic, internal_error, to_py_err};
use crate::inflight::Claim;

/// A raw view of a writable buffer. The `PyBuffer` that owns the memory is held by the
/// caller for as long as the view is used; the view itself only carries the address so
/// it can cross into `py.detach`.
struct RawOut {
    address: usize,
    len: usize,
    item_bytes: usize,
}

impl RawOut {
    /// The view of `buffer`, after checking writability and contiguity (`PyBuffer::get`
    /// checked its item format and size against `T`).
    fn of<T: BufferElement>(buffer: &PyBuffer<T>) -> PyResult<RawOut> {
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
            item_bytes: std::mem::size_of::<T>(),
        })
    }

    /// Claims the buffer's bytes for one write (see [`Claim`]).
    fn claim(&self) -> PyResult<Claim> {
        Claim::new(self.address, self.len * self.item_bytes)
    }

    /// The buffer as a slice of `T`, an item type of the buffer's item size.
    ///
    /// # Safety
    /// The `PyBuffer` this view came from must be alive for `'a`, every bit pattern of
    /// its items must be a valid `T`, and nothing else may access the memory while the
    /// slice is used.
    unsafe fn as_slice<'a, T>(&self) -> &'a mut [T] {
        assert_eq!(
            std::mem::size_of::<T>(),
            self.item_bytes,
            "item size of out"
        );
        // SAFETY: `address` is the start of a live, writable, C-contiguous buffer of
        // `len` items of `item_bytes` each (`PyBuffer::get` checked the format, `of`
        // writability and contiguity), the size of `T` (asserted above); the caller
        // guarantees that any bits are a valid `T`, that the buffer outlives 'a and
        // that it is not otherwise accessed.
        unsafe { std::slice::from_raw_parts_mut(self.address as *mut T, self.len) }
    }

    /// The buffer as a core output slice of `dtype` (the one given to [`OwnedOut::get`]).
    ///
    /// # Safety
    /// The `OwnedOut` this view came from must be alive for `'a`, and nothing else may
    /// access the memory while the slice is used.
    unsafe fn as_out<'a>(&self, dtype: Dtype) -> OutBuf<'a> {
        // SAFETY: the caller's guarantees are those of `as_slice`; every bit pattern is a
        // valid f32, f64, bf16 and f16 (the last two `repr(transparent)` over u16, so
        // reinterpreting 16-bit items is sound), and `OwnedOut::get` took the buffer
        // with the item size of `dtype`.
        unsafe {
            match dtype {
                Dtype::F32 => OutBuf::F32(self.as_slice()),
                Dtype::F64 => OutBuf::F64(self.as_slice()),
                Dtype::BF16 => OutBuf::BF16(self.as_slice::<bf16>()),
                Dtype::F16 => OutBuf::F16(self.as_slice::<f16>()),
            }
        }
    }
}

/// A buffer of one of the dtypes the core writes, kept alive while it is written.
enum OwnedOut {
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
    fn get(object: &Bound<'_, PyAny>, dtype: Dtype) -> PyResult<OwnedOut> {
        Ok(match dtype {
            Dtype::F32 => OwnedOut::F32(PyBuffer::get(object)?),
            Dtype::F64 => OwnedOut::F64(PyBuffer::get(object)?),
            Dtype::BF16 | Dtype::F16 => OwnedOut::Half(PyBuffer::get(object)?),
        })
    }

    /// The raw view, after checking writability and contiguity.
    fn raw(&self) -> PyResult<RawOut> {
        match self {
            OwnedOut::F32(b) => RawOut::of(b),
            OwnedOut::F64(b) => RawOut::of(b),
            OwnedOut::Half(b) => RawOut::of(b),
        }
    }
}

/// The threads argument of the fills: 0 means every CPU.
pub fn threads_of(count: usize) -> Threads {
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

/// The buffers of `outs` (each with its dtype), kept alive, and their raw views, after
/// checking their item format, writability and contiguity.
fn take_buffers<'a, 'py: 'a>(
    outs: impl Iterator<Item = (&'a Bound<'py, PyAny>, Dtype)>,
) -> PyResult<(Vec<OwnedOut>, Vec<RawOut>)> {
    let owned: Vec<OwnedOut> = outs
        .map(|(out, dtype)| OwnedOut::get(out, dtype))
        .collect::<PyResult<_>>()?;
    let raws = owned.iter().map(OwnedOut::raw).collect::<PyResult<_>>()?;
    Ok((owned, raws))
}

/// Claims every buffer of `raws`, one after the other (see [`Claim`]): one that overlaps
/// an earlier one, or a fill still running, is refused.
fn claim_all(raws: &[RawOut]) -> PyResult<Vec<Claim>> {
    raws.iter().map(RawOut::claim).collect()
}

/// Runs `write` on `outs` (buffers of `dtype`) with the GIL released, through
/// [`claimed_detached`]; buffers of `outs` may not overlap each other.
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
    let (owned, raws) = take_buffers(outs.iter().map(|out| (out, dtype)))?;
    let threads = threads_of(threads);
    let result = claimed_detached(py, &raws, |raws| {
        // SAFETY: `owned` keeps the buffers alive until after this call returns, and
        // `claimed_detached` keeps every other shardinit write off them and them
        // pairwise disjoint while this closure runs, so no two slices alias.
        let outs = raws
            .iter()
            .map(|raw| unsafe { raw.as_out(dtype) })
            .collect();
        write(outs, threads)
    });
    drop(owned);
    result
}

/// Writes running on a thread of their own ([`start_detached`]): the buffers they write
/// stay alive and claimed until that thread has ended, which [`Started::wait`] waits
/// for (and `Drop`, for writes never waited for).
pub struct Started {
    worker: Option<std::thread::JoinHandle<Result<(), Error>>>,
    // Dropped after `Drop::drop` has joined the worker (fields drop after it, in order).
    claims: Vec<Claim>,
    owned: Vec<OwnedOut>,
}

impl Started {
    /// Waits (GIL released) for the writes to end; returns their error, then releases
    /// the buffers. A second call returns at once.
    pub fn wait(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(worker) = self.worker.take() else {
            return Ok(());
        };
        let joined = py.detach(|| worker.join());
        self.claims.clear();
        self.owned.clear();
        match joined {
            Ok(result) => result.map_err(to_py_err),
            Err(payload) => Err(internal_error(payload.as_ref())),
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            // The buffers must outlive the writes: wait (the worker never takes the GIL).
            let _ = worker.join();
        }
    }
}

/// Starts `write` on `outs` (each a buffer of its own dtype) on a new thread and
/// returns at once: the Python caller goes on (its next parameters) while the core
/// writes these. Each buffer is claimed first (see [`claimed_detached`]); none may
/// overlap another. Until [`Started::wait`] returns, nothing else may read or write
/// the buffers (the contract of every `out=`, for longer).
pub fn start_detached<W>(outs: &[(&Bound<'_, PyAny>, Dtype)], write: W) -> PyResult<Started>
where
    W: FnOnce(Vec<OutBuf<'_>>) -> Result<(), Error> + Send + 'static,
{
    let (owned, raws) = take_buffers(outs.iter().copied())?;
    let claims = claim_all(&raws)?;
    let dtypes: Vec<Dtype> = outs.iter().map(|&(_, dtype)| dtype).collect();
    let worker = std::thread::Builder::new()
        .name("shardinit-fills".to_owned())
        .spawn(move || {
            // SAFETY: the `Started` returned holds `owned` (the buffers, each taken with
            // the item size of its own dtype by `OwnedOut::get`) and `claims` until this
            // thread has been joined (`wait`, or its `Drop`), so the memory outlives the
            // slices; the claims keep every other shardinit write off it and the buffers
            // pairwise disjoint, so no two slices alias; the caller does not touch the
            // buffers before `wait` (this function's contract).
            let outs = raws
                .iter()
                .zip(dtypes)
                .map(|(raw, dtype)| unsafe { raw.as_out(dtype) })
                .collect();
            write(outs) // a panic ends the thread: `wait` reports it as InternalError
        })
        .map_err(|error| {
            PyRuntimeError::new_err(format!("could not start a fill thread: {error}"))
        })?;
    Ok(Started {
        worker: Some(worker),
        claims,
        owned,
    })
}

/// Runs `write` on `out`, a buffer of uint32 words, with the GIL released, through
/// [`claimed_detached`] (the raw Philox words of `stream_words`).
pub fn write_words_detached<W>(py: Python<'_>, out: &Bound<'_, PyAny>, write: W) -> PyResult<()>
where
    W: FnOnce(&mut [u32]) -> Result<(), Error> + Send,
{
    let owned: PyBuffer<u32> = PyBuffer::get(out)?;
    let raw = RawOut::of(&owned)?;
    let result = claimed_detached(py, std::slice::from_ref(&raw), |raws| {
        // SAFETY: `owned` keeps the buffer alive until after this call returns, every
        // bit pattern is a valid u32, and `claimed_detached` keeps every other
        // shardinit write off it while this closure runs.
        write(unsafe { raws[0].as_slice() })
    });
    drop(owned);
    result
}

/// Runs `write` on `raws` with the GIL released: the one way the glue writes into a
/// caller's buffers. Each is claimed first, one after the other, so a second shardinit
/// write of overlapping memory while this one runs is refused, and so is a buffer that
/// overlaps an earlier one of `raws`; a panic in `write` becomes `InternalError`.
///
/// Other Python threads do run while the GIL is released (and at all times on a
/// free-threaded build): the claims keep other shardinit writes off the bytes until
/// `write` returns; anything else writing or reading them meanwhile breaks the
/// documented contract of `out=` (concurrent writes to the same tensor are not allowed).
fn claimed_detached<W>(py: Python<'_>, raws: &[RawOut], write: W) -> PyResult<()>
where
    W: FnOnce(&[RawOut]) -> Result<(), Error> + Send,
{
    let claims = claim_all(raws)?;
    let result = py.detach(|| catch_panic(|| write(raws)));
    drop(claims);
    result
}
