//! The fill API: write any [`Region`] of a parameter's global tensor into a
//! caller-provided contiguous buffer, through the one region walk
//! ([`crate::region`]): per run, the serial stream writer ([`crate::serial`]) for the
//! elementwise initializers, or a read of the orthogonal matrix, computed once per fill.

use crate::geometry::{box_numel, checked_numel};
use crate::init::{Dtype, Element, Init, OutBuf, Sampler};
use crate::kernel::{self, WordTable};
use crate::orthogonal::OrthogonalMatrix;
use crate::philox::{Backend, Stream};
use crate::pool::Threads;
use crate::region::{Region, RunWriter, Walk};
use crate::serial::write_stream;
use crate::table::{self, AnyTable, ValueTable};
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

/// Where a fill's values come from: the stream through an elementwise sampler, or a
/// matrix computed whole (orthogonal).
pub(crate) enum Source {
    Stream {
        backend: Backend,
        stream: Stream,
        sampler: Sampler,
        /// The value table of the sampler and the fill's dtype ([`crate::table`]).
        table: Option<AnyTable>,
    },
    Orthogonal(OrthogonalMatrix),
}

impl<T: Element> RunWriter<T> for Source {
    type Scratch = ();

    fn scratch(&self) {}

    #[inline(always)]
    fn write_run(&self, _: &mut (), start: u64, out: &mut [T]) -> Result<(), (u64, Error)> {
        match self {
            Source::Stream {
                backend,
                stream,
                sampler,
                table,
            } => {
                // A table of another dtype is no table of `T`'s.
                let table = table
                    .as_deref()
                    .and_then(|t| t.downcast_ref::<ValueTable<T>>())
                    .map(|t| t as &dyn WordTable<T>);
                write_stream(*backend, stream, sampler, table, start, out);
            }
            Source::Orthogonal(matrix) => {
                for (slot, index) in out.iter_mut().zip(start..) {
                    *slot = T::from_f64(matrix.value(index));
                }
            }
        }
        Ok(())
    }
}

impl ParamStream {
    /// Validates the initializer for the shape and `dtype`; returns the element count.
    fn checked(&self, dtype: Dtype) -> Result<u64, Error> {
        let numel = checked_numel(&self.global_shape, dtype.max_numel())?;
        self.init.validate()?;
        self.init.check_shape(&self.global_shape, numel)?;
        Ok(numel)
    }

    /// The source of the values of a fill of `len` elements of `dtype`, once the region
    /// is known to be valid and non-empty (an orthogonal matrix is computed here, on
    /// `threads`; a value table is taken from the cache or built here).
    fn source(
        &self,
        backend: Backend,
        dtype: Dtype,
        len: u64,
        threads: Threads,
    ) -> Result<Source, Error> {
        match self.init {
            Init::Orthogonal { gain, .. } => Ok(Source::Orthogonal(OrthogonalMatrix::compute(
                self.key64,
                &self.global_shape,
                gain,
                backend,
                threads,
            )?)),
            init => {
                let sampler = init.prepare()?;
                // The scalar reference always computes its values.
                let table = match backend {
                    Backend::Scalar => None,
                    _ => table::table_for(&sampler, dtype, len),
                };
                Ok(Source::Stream {
                    backend,
                    stream: Stream::new(self.key64),
                    sampler,
                    table,
                })
            }
        }
    }

    /// A fill of a buffer whose element type the caller names: the buffer as its
    /// [`OutBuf`], then the one fill below. Only this conversion is generic, so the crates
    /// that call a typed fill (the tests, the benchmarks) do not compile the kernels again
    /// for their element types: `cargo test` built them once per test binary.
    fn fill_using<T: Element>(
        &self,
        backend: Backend,
        region: &Region,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        self.fill_any(backend, region, T::out_buf(out), threads)
    }

    /// The one fill every entry point ends in, for an element type chosen at run time.
    fn fill_any(
        &self,
        backend: Backend,
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        match out {
            OutBuf::F32(s) => self.fill_typed(backend, region, s, threads),
            OutBuf::F64(s) => self.fill_typed(backend, region, s, threads),
            OutBuf::BF16(s) => self.fill_typed(backend, region, s, threads),
            OutBuf::F16(s) => self.fill_typed(backend, region, s, threads),
        }
    }

    /// Checks the initializer, then `region` for `out`, then computes the source and
    /// walks the region.
    fn fill_typed<T: Element>(
        &self,
        backend: Backend,
        region: &Region,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        match self.walk_and_source(backend, T::DTYPE, region, out.len() as u64, threads)? {
            Some((walk, source)) => walk.write(out, threads, &source),
            None => Ok(()),
        }
    }

    /// The walk of `region` for an output of `len` elements of `dtype` and the source of
    /// its values (`None` when there is nothing to write), after the checks of
    /// [`ParamStream::fill_region`] in its order: a whole box's size, the initializer,
    /// the region. A program whose source is this fill writes it through them, a span
    /// at a time before its steps.
    pub(crate) fn walk_and_source(
        &self,
        backend: Backend,
        dtype: Dtype,
        region: &Region,
        len: u64,
        threads: Threads,
    ) -> Result<Option<(Walk, Source)>, Error> {
        if let Region::Box {
            ref ranges,
            offset: None,
        } = *region
        {
            let box_len = box_numel(&self.global_shape, ranges)?;
            if len != box_len {
                return Err(Error::OutputSizeMismatch {
                    expected: box_len,
                    got: len,
                });
            }
        }
        let numel = self.checked(dtype)?;
        let Some(walk) = Walk::new(&self.global_shape, numel, region, len)? else {
            return Ok(None);
        };
        Ok(Some((walk, self.source(backend, dtype, len, threads)?)))
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
        self.fill_using(backend, &Region::Flat { start }, out, threads)
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
        let region = Region::Box {
            ranges: region.to_vec(),
            offset: Some(out_offset),
        };
        self.fill_using(backend, &region, out, threads)
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
        // A whole box's size is checked before the initializer (`walk_and_source`).
        self.fill_any(Backend::detect(), region, out, threads)
    }
}
