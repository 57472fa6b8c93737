//! Batches of fills ([`fill_many`]): each job a region of a parameter's values into its
//! own buffer, either the parameter's stream ([`crate::fill`]) or an init program
//! ([`crate::program`]), all of them side by side on one pool. It sits above both: a
//! job names a [`Program`], and a program's fill goes through the stream fills.

use rayon::prelude::*;

use crate::fill::ParamStream;
use crate::init::OutBuf;
use crate::pool::{self, Threads};
use crate::program::Program;
use crate::region::Region;
use crate::Error;

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
    use crate::init::{Dtype, Init};

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
