//! The fill API: write any [`Region`] of a parameter's global tensor into a
//! caller-provided contiguous buffer, through the one region walk
//! ([`crate::region`]): per run, the serial stream writer ([`crate::serial`]) for the
//! elementwise initializers, or a read of the orthogonal matrix, computed once per fill.

use half::{bf16, f16};
use rayon::prelude::*;

use crate::geometry::{box_numel, checked_numel};
use crate::init::{Dtype, Element, Init, Sampler};
use crate::kernel;
use crate::orthogonal::OrthogonalMatrix;
use crate::philox::{Backend, Stream};
use crate::pool::{self, Threads};
use crate::program::Program;
use crate::region::{Region, RunWriter, Walk};
use crate::serial::write_stream;
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
            } => write_stream(*backend, stream, sampler, start, out),
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
            init => Ok(Source::Stream {
                backend,
                stream: Stream::new(self.key64),
                sampler: init.prepare()?,
            }),
        }
    }

    /// Checks the initializer, then `region` for `out`, then computes the source and
    /// walks the region (the one fill every entry point below ends in).
    fn fill_using<T: Element>(
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
        Ok(Some((walk, self.source(backend, threads)?)))
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
        // A whole box's size is checked before the initializer (`walk_and_source`).
        self.fill_using(Backend::detect(), region, out, threads)
    }
}

/// One fill of a batch ([`fill_many`]): a region of a parameter's values into its own
/// buffer.
#[derive(Debug)]
pub struct FillJob<'a> {
    /// The values: the parameter's stream, or an init program keyed by the parameter.
    pub values: JobValues,
    /// The region of its global tensor `out` holds.
    pub region: Region,
    /// The buffer, of the region's length.
    pub out: OutBuf<'a>,
}

/// What a [`FillJob`] writes.
#[derive(Debug)]
pub enum JobValues {
    /// The parameter's stream ([`ParamStream::fill_region`]).
    Stream(ParamStream),
    /// An init program over the parameter `(key64, global_shape)`
    /// ([`Program::fill_region`]).
    Program {
        /// The program.
        program: Program,
        /// The parameter's key (stream-format.md §1).
        key64: u64,
        /// The parameter's global shape.
        global_shape: Vec<u64>,
    },
}

impl FillJob<'_> {
    /// The job's fill, its chunks on `threads`.
    fn run(self, threads: Threads) -> Result<(), Error> {
        match self.values {
            JobValues::Stream(param) => param.fill_region(&self.region, self.out, threads),
            JobValues::Program {
                program,
                key64,
                global_shape,
            } => program.fill_region(key64, &global_shape, &self.region, self.out, threads),
        }
    }
}

/// Runs every job's fill on `threads`: side by side, each job's chunks on the same
/// threads too (so a batch of many mid-sized programs keeps every thread busy, where one
/// job at a time leaves threads idle at its end). The batch of one call (the Python
/// writer starts one on a thread of its own while it plans the next parameters). Which
/// thread writes what changes no value: each element is a function of its index.
///
/// # Errors
/// The first job's error in job order (every job is attempted);
/// [`Error::ThreadPool`] if the pool's threads cannot be started.
pub fn fill_many(jobs: Vec<FillJob<'_>>, threads: Threads) -> Result<(), Error> {
    let total = jobs.iter().map(|job| job.out.len()).sum();
    let results: Vec<Result<(), Error>> = pool::install(total, threads, |parallel| {
        if parallel {
            jobs.into_par_iter().map(|job| job.run(threads)).collect()
        } else {
            jobs.into_iter().map(|job| job.run(threads)).collect()
        }
    })?;
    results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    fn boxed(ranges: &[(u64, u64)], offset: Option<u64>) -> Region {
        Region::Box {
            ranges: ranges.to_vec(),
            offset,
        }
    }

    #[test]
    fn programs_side_by_side_in_fill_many_equal_each_programs_own_fill() {
        use crate::program::UnaryOp;
        // An erfinv of a uniform (timm's trunc_normal_ core), over shapes of one chunk,
        // several chunks and a part of a box, among a stream job.
        let mut program = Program::new();
        let source = program
            .source(Init::Uniform { a: -1.0, b: 1.0 }, Dtype::F32)
            .unwrap();
        program.unary(UnaryOp::Erfinv, source).unwrap();
        let shapes: [&[u64]; 3] = [&[300, 700], &[64, 64], &[5, 90_001]];
        let regions = [
            boxed(&[(0, 300), (0, 700)], None),
            boxed(&[(3, 40), (1, 64)], None),
            Region::Flat { start: 7 },
        ];
        let lens = [210_000, 37 * 63, 449_998];
        let expected: Vec<Vec<f32>> = (0..3)
            .map(|i| {
                let mut out = vec![0f32; lens[i]];
                program
                    .fill_region(
                        40 + i as u64,
                        shapes[i],
                        &regions[i],
                        OutBuf::F32(&mut out),
                        Threads::Count(1),
                    )
                    .unwrap();
                out
            })
            .collect();
        let stream = ParamStream {
            key64: 9,
            global_shape: vec![100_000],
            init: Init::Uniform { a: 0.0, b: 1.0 },
        };
        let mut stream_expected = vec![0f32; 100_000];
        stream
            .fill_region(
                &Region::Flat { start: 0 },
                OutBuf::F32(&mut stream_expected),
                Threads::Count(1),
            )
            .unwrap();
        for threads in [Threads::Count(1), Threads::Count(2), Threads::Count(3)] {
            let mut outs: Vec<Vec<f32>> = lens.iter().map(|&len| vec![0f32; len]).collect();
            let mut stream_out = vec![0f32; 100_000];
            let mut jobs: Vec<FillJob<'_>> = outs
                .iter_mut()
                .enumerate()
                .map(|(i, out)| FillJob {
                    values: JobValues::Program {
                        program: program.clone(),
                        key64: 40 + i as u64,
                        global_shape: shapes[i].to_vec(),
                    },
                    region: regions[i].clone(),
                    out: OutBuf::F32(out),
                })
                .collect();
            jobs.insert(
                1,
                FillJob {
                    values: JobValues::Stream(stream.clone()),
                    region: Region::Flat { start: 0 },
                    out: OutBuf::F32(&mut stream_out),
                },
            );
            fill_many(jobs, threads).unwrap();
            assert_eq!(outs, expected, "{threads:?}");
            assert_eq!(stream_out, stream_expected, "{threads:?}");
        }
    }

    #[test]
    fn fill_many_is_each_jobs_fill_on_any_thread_count_and_reports_the_first_error() {
        let param = |key64, shape: &[u64], init| ParamStream {
            key64,
            global_shape: shape.to_vec(),
            init,
        };
        let normal = Init::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let uniform = Init::Uniform { a: -1.0, b: 1.0 };
        // Small jobs and one larger than a chunk, on any thread count.
        let params = [
            param(1, &[64, 64], normal),
            param(2, &[64], uniform),
            param(3, &[3, 70_000], normal),
            param(4, &[7, 5], uniform),
        ];
        let regions = [
            boxed(&[(0, 64), (0, 64)], None),
            boxed(&[(8, 40)], None),
            Region::Flat { start: 11 },
            boxed(&[(2, 7), (1, 4)], None),
        ];
        let lens = [4096, 32, 150_000, 15];
        let expected: Vec<Vec<f32>> = (0..4)
            .map(|i| {
                let mut out = vec![0f32; lens[i]];
                let region = &regions[i];
                params[i]
                    .fill_region(region, OutBuf::F32(&mut out), Threads::Count(1))
                    .unwrap();
                out
            })
            .collect();
        for threads in [Threads::Count(1), Threads::Count(3), Threads::All] {
            let mut outs: Vec<Vec<f32>> = lens.iter().map(|&len| vec![0f32; len]).collect();
            let jobs = outs
                .iter_mut()
                .enumerate()
                .map(|(i, out)| FillJob {
                    values: JobValues::Stream(params[i].clone()),
                    region: regions[i].clone(),
                    out: OutBuf::F32(out),
                })
                .collect();
            fill_many(jobs, threads).unwrap();
            assert_eq!(outs, expected, "{threads:?}");
        }
        // Two refused jobs: the error is the first one's, in job order.
        let (mut short, mut past, mut fine) = (vec![0f32; 3], vec![0f32; 4], vec![0f32; 64]);
        let jobs = vec![
            FillJob {
                values: JobValues::Stream(params[1].clone()),
                region: Region::Flat { start: 0 },
                out: OutBuf::F32(&mut fine),
            },
            FillJob {
                values: JobValues::Stream(params[3].clone()),
                region: boxed(&[(0, 2), (0, 2)], None),
                out: OutBuf::F32(&mut short),
            },
            FillJob {
                values: JobValues::Stream(params[1].clone()),
                region: Region::Flat { start: 62 },
                out: OutBuf::F32(&mut past),
            },
        ];
        let error = fill_many(jobs, Threads::Count(2)).unwrap_err();
        assert_eq!(
            error,
            Error::OutputSizeMismatch {
                expected: 4,
                got: 3
            }
        );
        // The jobs that were not refused were written all the same.
        let mut whole = vec![0f32; 64];
        params[1]
            .fill_region(
                &Region::Flat { start: 0 },
                OutBuf::F32(&mut whole),
                Threads::Count(1),
            )
            .unwrap();
        assert_eq!((fine, &whole[8..40]), (whole.clone(), &expected[1][..]));
    }
}
