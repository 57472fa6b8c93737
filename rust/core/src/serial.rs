//! The serial stream writer: elements `[start, start + out.len())` (global flat indices)
//! of one parameter's stream through a [`Sampler`], on the calling thread, by one
//! [`Backend`]. The building block below every fill: the region walk
//! ([`crate::region`]) calls it per run, and the orthogonal initializer
//! ([`crate::orthogonal`]) draws its normal matrix with it.

use crate::init::{Element, Sampler};
use crate::kernel::{self, WordTable};
use crate::philox::{Backend, Stream};

/// Writes elements `[start, start + out.len())` (global flat indices) of the stream
/// `stream` through `sampler`, with the word layout of `T`'s dtype (stream-format.md §3),
/// looking the values up in `table` when one is given and the backend is batched (the
/// scalar reference always computes).
pub(crate) fn write_stream<T: Element>(
    backend: Backend,
    stream: &Stream,
    sampler: &Sampler,
    table: Option<&dyn WordTable<T>>,
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
            kernel::fill_lanes::<T, false>(backend, stream.key_words(), sampler, table, start, out)
        }
        (_, true) => {
            kernel::fill_lanes::<T, true>(backend, stream.key_words(), sampler, None, start, out)
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
