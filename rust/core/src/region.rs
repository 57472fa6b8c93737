//! Regions of a parameter's global tensor and the one walk over them.
//!
//! Two kinds of region ([`Region`]):
//! * a **flat range** `[start, start + len)` of flat row-major element indices
//!   (FSDP1 flat-parameter shards);
//! * a **box**, one `(start, stop)` range per dimension of the global shape, written in
//!   C order (DTensor shards, `torch.chunk` pieces), or a part of one.
//!
//! The walk is written once, here, for every fill ([`crate::ParamStream`]'s sampled and
//! orthogonal values, [`crate::Program`]'s evaluator): the output is cut into chunks of
//! [`CHUNK_ELEMENTS`] elements run over the pool ([`crate::pool`]), each chunk into
//! *runs*, stretches contiguous both in the global tensor and in the output
//! ([`crate::geometry`]), and each run is handed to a [`RunWriter`], generic (inlined) over
//! what is written. Each element's value depends only on its global flat index, so the
//! result never depends on how the work is split or on the thread count.

use std::sync::Mutex;

use crate::geometry::{box_numel, RunLayout};
use crate::pool::{for_each_chunk, Threads, CHUNK_ELEMENTS};
use crate::Error;

/// A region of a parameter's global tensor, as [`crate::ParamStream::fill_region`] and
/// [`crate::Program::fill_region`] write it.
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

/// What a walk writes into each run.
pub(crate) trait RunWriter<T>: Sync {
    /// State reused by the runs of one chunk (an evaluator's registers).
    type Scratch;

    /// A fresh scratch, once per chunk.
    fn scratch(&self) -> Self::Scratch;

    /// Writes global flat indices `[start, start + out.len())` into `out`. An error, with
    /// the flat index it is at, ends the chunk; the walk reports the lowest one.
    fn write_run(
        &self,
        scratch: &mut Self::Scratch,
        start: u64,
        out: &mut [T],
    ) -> Result<(), (u64, Error)>;
}

/// A checked, non-empty region, ready to be walked.
pub(crate) enum Walk {
    /// Global flat index of the output's first element.
    Flat { start: u64 },
    /// The box's runs, and where in the box (in C order) the output starts.
    Box { layout: RunLayout, offset: u64 },
}

impl Walk {
    /// Checks `region` of a tensor of `global_shape` (`numel` elements, checked against
    /// the dtype) for an output of `len` elements; `None` when there is nothing to write.
    ///
    /// # Errors
    /// [`Error::RangeOutOfBounds`] (a flat range past the end), the errors of
    /// [`box_numel`], [`Error::OutputSizeMismatch`] (an output that is not the box, or a
    /// part that runs past its end).
    pub(crate) fn new(
        global_shape: &[u64],
        numel: u64,
        region: &Region,
        len: u64,
    ) -> Result<Option<Walk>, Error> {
        let walk = match *region {
            Region::Flat { start } => {
                if start.checked_add(len).is_none_or(|end| end > numel) {
                    return Err(Error::RangeOutOfBounds { start, len, numel });
                }
                Walk::Flat { start }
            }
            Region::Box { ref ranges, offset } => {
                let box_len = box_numel(global_shape, ranges)?;
                let out_offset = offset.unwrap_or(0);
                let fits = match offset {
                    None => len == box_len,
                    Some(o) => o.checked_add(len).is_some_and(|end| end <= box_len),
                };
                if !fits {
                    return Err(Error::OutputSizeMismatch {
                        expected: box_len.saturating_sub(out_offset),
                        got: len,
                    });
                }
                Walk::Box {
                    layout: RunLayout::new(global_shape, ranges),
                    offset: out_offset,
                }
            }
        };
        Ok((len > 0).then_some(walk))
    }

    /// Writes `out` (the length [`Walk::new`] checked) with `writer`, run by run, on
    /// `threads` threads.
    ///
    /// # Errors
    /// [`Error::ThreadPool`]; the error of the lowest flat index `writer` reported (`out`
    /// is then partly written).
    pub(crate) fn write<T: Send, W: RunWriter<T>>(
        &self,
        out: &mut [T],
        threads: Threads,
        writer: &W,
    ) -> Result<(), Error> {
        let first_error: FirstError = Mutex::new(None);
        for_each_chunk(out, threads, |index, chunk| {
            let position = (index * CHUNK_ELEMENTS) as u64;
            if let Err((at, error)) = self.write_chunk(position, chunk, writer) {
                record(&first_error, at, error);
            }
        })?;
        match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some((_, error)) => Err(error),
            None => Ok(()),
        }
    }

    /// The chunk of `out` that starts at output element `position`, run by run.
    #[inline(always)]
    fn write_chunk<T, W: RunWriter<T>>(
        &self,
        position: u64,
        chunk: &mut [T],
        writer: &W,
    ) -> Result<(), (u64, Error)> {
        let mut scratch = writer.scratch();
        match self {
            Walk::Flat { start } => writer.write_run(&mut scratch, start + position, chunk),
            Walk::Box { layout, offset } => {
                let mut position = offset + position;
                let mut done = 0usize;
                while done < chunk.len() {
                    let run = position / layout.run_len;
                    let within = position % layout.run_len;
                    let take = ((layout.run_len - within) as usize).min(chunk.len() - done);
                    let global_start = layout.run_start(run) + within;
                    let run_out = &mut chunk[done..done + take];
                    writer.write_run(&mut scratch, global_start, run_out)?;
                    done += take;
                    position += take as u64;
                }
                Ok(())
            }
        }
    }
}

/// The first error of a walk, by lowest flat index (so the report does not depend on
/// the order chunks finish in).
type FirstError = Mutex<Option<(u64, Error)>>;

fn record(first: &FirstError, at: u64, error: Error) {
    let mut slot = first
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if slot.as_ref().is_none_or(|(index, _)| at < *index) {
        *slot = Some((at, error));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out_of_bounds(start: u64) -> Error {
        Error::RangeOutOfBounds {
            start,
            len: 1,
            numel: 1,
        }
    }

    /// Chunks finish in any order on a pool: the error kept is the one at the lowest
    /// index, and of two at one index the first recorded (a survivor of `make mutants`:
    /// no test reached two errors in one walk).
    #[test]
    fn the_first_error_is_the_one_at_the_lowest_index_in_any_order() {
        let first: FirstError = Mutex::new(None);
        record(&first, 10, out_of_bounds(10));
        record(&first, 3, out_of_bounds(3));
        record(&first, 7, out_of_bounds(7));
        record(&first, 3, out_of_bounds(4));
        assert_eq!(first.into_inner().unwrap(), Some((3, out_of_bounds(3))));
    }
}
