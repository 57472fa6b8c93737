//! The fill API: write any [`Region`] of a parameter's global tensor into a
//! caller-provided contiguous buffer, through the one region walk
//! ([`crate::region`]): per run, the serial stream writer ([`crate::serial`]) for the
//! elementwise initializers, or a read of the orthogonal matrix, computed once per fill.

use half::{bf16, f16};

use crate::geometry::{box_numel, checked_numel};
use crate::init::{Dtype, Element, Init, Sampler};
use crate::kernel;
use crate::orthogonal::OrthogonalMatrix;
use crate::philox::{Backend, Stream};
use crate::pool::Threads;
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
enum Source {
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
        let numel = self.checked(T::DTYPE)?;
        let Some(walk) = Walk::new(&self.global_shape, numel, region, out.len() as u64)? else {
            return Ok(());
        };
        let source = self.source(backend, threads)?;
        walk.write(out, threads, &source)
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

    /// Fills each `(region, out)` of `parts` with that region of the parameter, from one
    /// source: an orthogonal matrix is computed once for all the parts (a rank's region
    /// made of several boxes, or a flat range cut into boxes) instead of once per fill.
    /// Every part is checked before anything is computed or written.
    ///
    /// # Errors
    /// As [`ParamStream::fill_region`], for the first part refused.
    pub fn fill_regions(
        &self,
        parts: Vec<(Region, OutBuf<'_>)>,
        threads: Threads,
    ) -> Result<(), Error> {
        let mut walks = Vec::with_capacity(parts.len());
        for (region, out) in &parts {
            let (numel, len) = (self.checked(out.dtype())?, out.len() as u64);
            walks.push(Walk::new(&self.global_shape, numel, region, len)?);
        }
        if walks.iter().all(Option::is_none) {
            return Ok(());
        }
        let source = self.source(Backend::detect(), threads)?;
        for (walk, (_, out)) in walks.iter().zip(parts) {
            let Some(walk) = walk else { continue };
            match out {
                OutBuf::F32(s) => walk.write(s, threads, &source),
                OutBuf::F64(s) => walk.write(s, threads, &source),
                OutBuf::BF16(s) => walk.write(s, threads, &source),
                OutBuf::F16(s) => walk.write(s, threads, &source),
            }?;
        }
        Ok(())
    }

    /// [`ParamStream::fill_region`] for one element type.
    pub(crate) fn fill_region_typed<T: Element>(
        &self,
        region: &Region,
        out: &mut [T],
        threads: Threads,
    ) -> Result<(), Error> {
        match *region {
            // The whole box: its size is checked before the initializer.
            Region::Box {
                ref ranges,
                offset: None,
            } => self.fill_box(ranges, out, threads),
            _ => self.fill_using(Backend::detect(), region, out, threads),
        }
    }
}

/// One fill of a batch ([`fill_many`]): a region of a parameter into its own buffer.
#[derive(Debug)]
pub struct FillJob<'a> {
    /// The parameter.
    pub param: ParamStream,
    /// The region of its global tensor `out` holds.
    pub region: Region,
    /// The buffer, of the region's length.
    pub out: OutBuf<'a>,
}

/// Runs every job's [`ParamStream::fill_region`], one after the other, each on
/// `threads`: the batch of one call (the Python writer starts one on a thread of its
/// own while it plans the next parameters).
///
/// # Errors
/// The first job's error in job order (every job is attempted).
pub fn fill_many(jobs: Vec<FillJob<'_>>, threads: Threads) -> Result<(), Error> {
    let mut first = Ok(());
    for job in jobs {
        let result = job.param.fill_region(&job.region, job.out, threads);
        if first.is_ok() {
            first = result;
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orthogonal::COMPUTED;

    fn computed() -> usize {
        COMPUTED.with(std::cell::Cell::get)
    }

    fn boxed(ranges: &[(u64, u64)], offset: Option<u64>) -> Region {
        Region::Box {
            ranges: ranges.to_vec(),
            offset,
        }
    }

    #[test]
    fn fill_regions_computes_one_orthogonal_matrix_for_every_part() {
        let param = ParamStream {
            key64: 11,
            global_shape: vec![12, 10],
            init: Init::Orthogonal {
                gain: 2.0,
                max_numel: 1 << 20,
            },
        };
        let mut full = vec![0f64; 120];
        param.fill_flat(0, &mut full, Threads::Count(1)).unwrap();
        // An uneven flat range [7, 113) as three boxes (the tail of row 0, rows 1..11,
        // the head of row 11), and part of a column box in float32.
        let (mut head, mut rows, mut tail) = (vec![0f64; 3], vec![0f64; 100], vec![0f64; 3]);
        let mut column = vec![0f32; 5];
        let before = computed();
        let parts = vec![
            (boxed(&[(0, 1), (7, 10)], None), OutBuf::F64(&mut head)),
            (boxed(&[(1, 11), (0, 10)], None), OutBuf::F64(&mut rows)),
            (boxed(&[(11, 12), (0, 3)], None), OutBuf::F64(&mut tail)),
            (boxed(&[(0, 12), (4, 5)], Some(6)), OutBuf::F32(&mut column)),
        ];
        param.fill_regions(parts, Threads::Count(2)).unwrap();
        assert_eq!(computed() - before, 1);
        assert_eq!(head, full[7..10]);
        assert_eq!(rows, full[10..110]);
        assert_eq!(tail, full[110..113]);
        let expected: Vec<f32> = (6..11).map(|row| full[row * 10 + 4] as f32).collect();
        assert_eq!(column, expected);
        // One fill per box computes the matrix once per box.
        let before = computed();
        param
            .fill_box(&[(0, 1), (7, 10)], &mut head, Threads::Count(1))
            .unwrap();
        param
            .fill_box(&[(11, 12), (0, 3)], &mut tail, Threads::Count(1))
            .unwrap();
        assert_eq!(computed() - before, 2);
    }

    #[test]
    fn fill_regions_checks_every_part_before_writing_any() {
        let param = ParamStream {
            key64: 3,
            global_shape: vec![4, 6],
            init: Init::Orthogonal {
                gain: 1.0,
                max_numel: 100,
            },
        };
        let (mut first, mut second) = (vec![7f32; 6], vec![7f32; 5]);
        let before = computed();
        let parts = vec![
            (boxed(&[(0, 1), (0, 6)], None), OutBuf::F32(&mut first)),
            (Region::Flat { start: 20 }, OutBuf::F32(&mut second)),
        ];
        let error = param.fill_regions(parts, Threads::Count(1)).unwrap_err();
        assert_eq!(
            error,
            Error::RangeOutOfBounds {
                start: 20,
                len: 5,
                numel: 24
            }
        );
        assert_eq!(computed(), before);
        assert_eq!((first, second), (vec![7f32; 6], vec![7f32; 5]));
    }

    #[test]
    fn fill_regions_of_a_sampled_initializer_is_each_fill() {
        let param = ParamStream {
            key64: 5,
            global_shape: vec![3, 70_000],
            init: Init::TruncNormal {
                mean: 0.0,
                std: 1.0,
                a: -2.0,
                b: 2.0,
            },
        };
        let region = boxed(&[(0, 3), (5, 69_000)], None);
        let flat = Region::Flat { start: 1000 };
        let mut expected_box = vec![0f32; 3 * 68_995];
        let mut expected_flat = vec![0f64; 100_000];
        param
            .fill_region(&region, OutBuf::F32(&mut expected_box), Threads::Count(1))
            .unwrap();
        param
            .fill_region(&flat, OutBuf::F64(&mut expected_flat), Threads::Count(1))
            .unwrap();
        let mut got_box = vec![0f32; 3 * 68_995];
        let mut got_flat = vec![0f64; 100_000];
        let mut empty: Vec<f32> = Vec::new();
        let parts = vec![
            (region, OutBuf::F32(&mut got_box)),
            (Region::Flat { start: 0 }, OutBuf::F32(&mut empty)),
            (flat, OutBuf::F64(&mut got_flat)),
        ];
        param.fill_regions(parts, Threads::Count(3)).unwrap();
        assert_eq!(got_box, expected_box);
        assert_eq!(got_flat, expected_flat);
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
                    param: params[i].clone(),
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
                param: params[1].clone(),
                region: Region::Flat { start: 0 },
                out: OutBuf::F32(&mut fine),
            },
            FillJob {
                param: params[3].clone(),
                region: boxed(&[(0, 2), (0, 2)], None),
                out: OutBuf::F32(&mut short),
            },
            FillJob {
                param: params[1].clone(),
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
