//! The fill API: write any region of a parameter's global tensor into a
//! caller-provided contiguous buffer.
//!
//! Two kinds of region ([`Region`]):
//! * a **flat range** `[start, start + len)` of flat row-major element indices
//!   (FSDP1 flat-parameter shards);
//! * a **box**, one `(start, stop)` range per dimension of the global shape, written in
//!   C order (DTensor shards, `torch.chunk` pieces), or a part of one.
//!
//! Work is split into chunks of [`CHUNK_ELEMENTS`] output elements
//! ([`crate::pool`]). Each element's value depends only on its global flat index
//! ([`crate::geometry`]), so the result never depends on how the work is split or on
//! the thread count.

use half::{bf16, f16};

use crate::geometry::{box_numel, checked_numel, RunLayout};
use crate::init::{Dtype, Element, Init, Sampler};
use crate::kernel;
use crate::orthogonal::OrthogonalMatrix;
use crate::philox::{Backend, Stream};
use crate::pool::{for_each_chunk, Threads, CHUNK_ELEMENTS};
use crate::Error;

/// One parameter of stream format v1, everything but the dtype (which comes from the
/// output element type): the key, the global shape and the base initializer.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamStream {
    /// The key (stream-format.md §1), see [`crate::key64`].
    pub key64: u64,
    /// The global (unsharded) shape.
    pub global_shape: Vec<u64>,
    /// The base initializer.
    pub init: Init,
}

/// A region of a parameter's global tensor, as [`ParamStream::fill_region`] writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Region {
    /// Elements `[start, start + out.len())` of the row-major flattened tensor.
    Flat {
        /// First flat element index.
        start: u64,
    },
    /// The box `ranges` (one `(start, stop)` per dim), in C order: the whole box when
    /// `offset` is `None` (then `out` must hold exactly the box), else its elements
    /// `[offset, offset + out.len())`.
    Box {
        /// One `(start, stop)` per dimension of the global shape.
        ranges: Vec<(u64, u64)>,
        /// Where in the box (in C order) `out` starts, or `None` for the whole box.
        offset: Option<u64>,
    },
}

/// Writes elements `[start, start + out.len())` (global flat indices) of one parameter.
/// Single-threaded; the building block of all fills.
pub(crate) fn fill_flat_serial<T: Element>(
    backend: Backend,
    stream: &Stream,
    sampler: &Sampler,
    start: u64,
    out: &mut [T],
) {
    if let Sampler::Constant { value } = *sampler {
        out.fill(T::from_f64(value));
        return;
    }
    let two_words = T::DTYPE.words_per_element() == 2;
    match (backend, two_words) {
        (Backend::Scalar, false) => scalar_one_word(stream, sampler, start, out),
        (Backend::Scalar, true) => scalar_two_word(stream, sampler, start, out),
        (_, false) => {
            kernel::fill_lanes::<T, false>(backend, stream.key_words(), sampler, start, out)
        }
        (_, true) => {
            kernel::fill_lanes::<T, true>(backend, stream.key_words(), sampler, start, out)
        }
    }
}

/// The scalar reference for one-word dtypes: element `i` is
/// `T::from_f64(sampler.one_word(word i))`, one Philox block at a time.
fn scalar_one_word<T: Element>(stream: &Stream, sampler: &Sampler, start: u64, out: &mut [T]) {
    // `out` first: the index range is never advanced past the last element.
    for (slot, index) in out.iter_mut().zip(start..) {
        let block = stream.block(index >> 2);
        *slot = T::from_f64(sampler.one_word(block[(index & 3) as usize]));
    }
}

/// The scalar reference for float64: element `i` uses words `2i` and `2i + 1` (both in
/// block `i >> 1`).
fn scalar_two_word<T: Element>(stream: &Stream, sampler: &Sampler, start: u64, out: &mut [T]) {
    // `out` first: the index range is never advanced past the last element.
    for (slot, index) in out.iter_mut().zip(start..) {
        let block = stream.block(index >> 1);
        let pair = 2 * (index & 1) as usize;
        *slot = T::from_f64(sampler.two_words(block[pair], block[pair + 1]));
    }
}

/// Where a fill's values come from: the stream through an elementwise sampler, or a
/// matrix computed whole (orthogonal).
enum Source {
    Stream(Stream, Sampler),
    Orthogonal(OrthogonalMatrix),
}

impl Source {
    /// Writes elements `[start, start + out.len())` (global flat indices).
    fn write<T: Element>(&self, backend: Backend, start: u64, out: &mut [T]) {
        match self {
            Source::Stream(stream, sampler) => {
                fill_flat_serial(backend, stream, sampler, start, out);
            }
            Source::Orthogonal(matrix) => {
                for (slot, index) in out.iter_mut().zip(start..) {
                    *slot = T::from_f64(matrix.value(index));
                }
            }
        }
    }
}

impl ParamStream {
    /// Validates the initializer for the shape and dtype; returns the element count.
    fn checked<T: Element>(&self) -> Result<u64, Error> {
        let numel = checked_numel(&self.global_shape, T::DTYPE.max_numel())?;
        self.init.validate()?;
        self.init.check_shape(&self.global_shape, numel)?;
        Ok(numel)
    }

    /// The source of the values, once the region is known to be valid and non-empty
    /// (an orthogonal matrix is computed here, on `threads`).
    fn source(&self, backend: Backend, threads: Threads) -> Result<Source, Error> {
        match self.init {
            Init::Orthogonal { gain, .. } => Ok(Source::Orthogonal(OrthogonalMatrix::compute(
                self.key64,
                &self.global_shape,
                gain,
                backend,
                threads,
            )?)),
            init => Ok(Source::Stream(Stream::new(self.key64), init.prepare()?)),
        }
    }

    /// Fills `out` with elements `[start, start + out.len())` of the flattened global
    /// tensor (FSDP1 flat shards).
    ///
    /// # Errors
    /// Invalid initializer, a shape too large for the dtype, or a range past the end.
    pub fn fill_flat<T: Element>(
        &self,
        start: u64,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        self.fill_flat_using(Backend::detect(), start, out, threads)
    }

    /// [`ParamStream::fill_flat`] with a forced backend (tests and benchmarks compare
    /// them; every backend gives the same bits).
    ///
    /// # Errors
    /// As [`ParamStream::fill_flat`].
    ///
    /// # Panics
    /// If this CPU cannot run `backend` ([`Backend::is_available`]).
    pub fn fill_flat_using<T: Element>(
        &self,
        backend: Backend,
        start: u64,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        kernel::check_available(backend);
        let numel = self.checked::<T>()?;
        let len = out.len() as u64;
        if start.checked_add(len).is_none_or(|end| end > numel) {
            return Err(Error::RangeOutOfBounds { start, len, numel });
        }
        if len == 0 {
            return Ok(());
        }
        let source = self.source(backend, threads)?;
        for_each_chunk(out, threads, |index, chunk| {
            let chunk_start = start + (index * CHUNK_ELEMENTS) as u64;
            source.write(backend, chunk_start, chunk);
        })
    }

    /// Fills `out` with the box `region` (one `(start, stop)` per dim) of the global
    /// tensor, in C order. `out` must hold exactly the box's elements.
    ///
    /// # Errors
    /// Invalid initializer, a shape too large for the dtype, a box that does not fit the
    /// shape, or an `out` of the wrong length.
    pub fn fill_box<T: Element>(
        &self,
        region: &[(u64, u64)],
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        let box_len = box_numel(&self.global_shape, region)?;
        if out.len() as u64 != box_len {
            return Err(Error::OutputSizeMismatch {
                expected: box_len,
                got: out.len() as u64,
            });
        }
        self.fill_box_part(region, 0, out, threads)
    }

    /// Fills `out` with elements `[out_offset, out_offset + out.len())`, in C order, of
    /// the box `region`, so a caller can stream a large box through a bounded buffer
    /// (the CUDA path does).
    ///
    /// # Errors
    /// Invalid initializer, a shape too large for the dtype, a box that does not fit the
    /// shape, or a part that runs past the end of the box.
    pub fn fill_box_part<T: Element>(
        &self,
        region: &[(u64, u64)],
        out_offset: u64,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        self.fill_box_part_using(Backend::detect(), region, out_offset, out, threads)
    }

    /// [`ParamStream::fill_box_part`] with a forced backend (tests and benchmarks
    /// compare them; every backend gives the same bits).
    ///
    /// # Errors
    /// As [`ParamStream::fill_box_part`].
    ///
    /// # Panics
    /// If this CPU cannot run `backend` ([`Backend::is_available`]).
    pub fn fill_box_part_using<T: Element>(
        &self,
        backend: Backend,
        region: &[(u64, u64)],
        out_offset: u64,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        kernel::check_available(backend);
        self.checked::<T>()?;
        let box_len = box_numel(&self.global_shape, region)?;
        let len = out.len() as u64;
        if out_offset.checked_add(len).is_none_or(|end| end > box_len) {
            return Err(Error::OutputSizeMismatch {
                expected: box_len.saturating_sub(out_offset),
                got: len,
            });
        }
        if len == 0 {
            return Ok(());
        }
        let layout = RunLayout::new(&self.global_shape, region);
        let source = self.source(backend, threads)?;
        for_each_chunk(out, threads, |index, chunk| {
            let mut position = out_offset + (index * CHUNK_ELEMENTS) as u64;
            let mut done = 0usize;
            while done < chunk.len() {
                let run = position / layout.run_len;
                let within = position % layout.run_len;
                let take = ((layout.run_len - within) as usize).min(chunk.len() - done);
                let global_start = layout.run_start(run) + within;
                source.write(backend, global_start, &mut chunk[done..done + take]);
                done += take;
                position += take as u64;
            }
        })
    }
}

/// A mutable output buffer of one of the supported dtypes, for callers (like the Python
/// bindings) that choose the dtype at run time.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutBuf<'a> {
    /// float32 elements.
    F32(&'a mut [f32]),
    /// float64 elements.
    F64(&'a mut [f64]),
    /// bfloat16 elements.
    BF16(&'a mut [bf16]),
    /// float16 elements.
    F16(&'a mut [f16]),
}

impl OutBuf<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            OutBuf::F32(s) => s.len(),
            OutBuf::F64(s) => s.len(),
            OutBuf::BF16(s) => s.len(),
            OutBuf::F16(s) => s.len(),
        }
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl OutBuf<'_> {
    /// The dtype of the elements.
    pub fn dtype(&self) -> Dtype {
        match self {
            OutBuf::F32(_) => Dtype::F32,
            OutBuf::F64(_) => Dtype::F64,
            OutBuf::BF16(_) => Dtype::BF16,
            OutBuf::F16(_) => Dtype::F16,
        }
    }
}

impl ParamStream {
    /// Fills `out`, of a dtype chosen at run time, with `region`: the one entry point of
    /// callers such as the Python bindings.
    ///
    /// # Errors
    /// As [`ParamStream::fill_flat`] for [`Region::Flat`], as [`ParamStream::fill_box`]
    /// (whole box) or [`ParamStream::fill_box_part`] (with an offset) for
    /// [`Region::Box`].
    pub fn fill_region(
        &self,
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        match out {
            OutBuf::F32(s) => self.fill_region_typed(region, s, threads),
            OutBuf::F64(s) => self.fill_region_typed(region, s, threads),
            OutBuf::BF16(s) => self.fill_region_typed(region, s, threads),
            OutBuf::F16(s) => self.fill_region_typed(region, s, threads),
        }
    }

    /// [`ParamStream::fill_region`] for one element type.
    pub(crate) fn fill_region_typed<T: Element>(
        &self,
        region: &Region,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        match *region {
            Region::Flat { start } => self.fill_flat(start, out, threads),
            Region::Box {
                ref ranges,
                offset: None,
            } => self.fill_box(ranges, out, threads),
            Region::Box {
                ref ranges,
                offset: Some(offset),
            } => self.fill_box_part(ranges, offset, out, threads),
        }
    }
}
