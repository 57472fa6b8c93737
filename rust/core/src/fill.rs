//! Shard geometry and the fill kernels: write any region of a parameter's global
//! tensor into a caller-provided contiguous buffer.
//!
//! Two kinds of region:
//! * a **flat range** `[start, start + len)` of flat row-major element indices
//!   (FSDP1 flat-parameter shards);
//! * a **box**, one `(start, stop)` range per dimension of the global shape, written in
//!   C order (DTensor shards, `torch.chunk` pieces).
//!
//! Work is split into chunks of [`CHUNK_ELEMENTS`] output elements. Each element's value
//! depends only on its global flat index, so the result never depends on how the work
//! is split or on the thread count.

use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use half::{bf16, f16};
use rayon::prelude::*;

use crate::init::{Element, Init, Sampler};
use crate::kernel;
use crate::philox::{Backend, Stream};
use crate::Error;

/// Output elements per unit of parallel work (256 KiB of float32): large enough that
/// scheduling costs nothing, small enough to balance across cores and stay in L2.
pub const CHUNK_ELEMENTS: usize = 1 << 16;

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

/// How many threads a fill may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Threads {
    /// Every CPU this process may use (`std::thread::available_parallelism`).
    #[default]
    All,
    /// Exactly this many threads; `Count(1)` runs on the calling thread only.
    Count(usize),
}

/// Number of elements of `global_shape`, or an error if it does not fit `max_numel`.
///
/// # Errors
/// [`Error::ShapeTooLarge`].
pub fn checked_numel(global_shape: &[u64], max_numel: u64) -> Result<u64, Error> {
    let mut numel: u128 = 1;
    for &size in global_shape {
        numel = numel.saturating_mul(u128::from(size));
    }
    if numel > u128::from(max_numel) {
        return Err(Error::ShapeTooLarge {
            global_shape: global_shape.to_vec(),
            max_numel: u128::from(max_numel),
        });
    }
    Ok(numel as u64)
}

/// The `rank`-th of `world` chunks of a dimension of `size`, with `torch.chunk` /
/// FSDP2 / DTensor `Shard(dim)` semantics: chunks of `ceil(size / world)`, the last
/// non-empty one possibly shorter, trailing ones empty. Returns `(start, stop)`.
///
/// # Errors
/// [`Error::InvalidShard`] if `world == 0` or `rank >= world`.
///
/// ```
/// use shardinit_core::chunk_range;
/// let chunks: Vec<_> = (0..3).map(|rank| chunk_range(7, rank, 3).unwrap()).collect();
/// assert_eq!(chunks, [(0, 3), (3, 6), (6, 7)]);
/// assert_eq!(chunk_range(4, 2, 3).unwrap(), (4, 4)); // an empty trailing chunk
/// ```
pub fn chunk_range(size: u64, rank: u64, world: u64) -> Result<(u64, u64), Error> {
    if world == 0 {
        return Err(Error::InvalidShard {
            arg: "world",
            value: world,
            allowed: ">= 1".into(),
        });
    }
    if rank >= world {
        return Err(Error::InvalidShard {
            arg: "rank",
            value: rank,
            allowed: format!("in [0, {world}) (world = {world})"),
        });
    }
    let chunk = size.div_ceil(world);
    let start = rank.saturating_mul(chunk).min(size);
    let stop = start.saturating_add(chunk).min(size);
    Ok((start, stop))
}

/// Checks a box against a global shape; returns its number of elements.
///
/// # Errors
/// [`Error::BoxRankMismatch`] or [`Error::BoxOutOfBounds`].
pub fn box_numel(global_shape: &[u64], region: &[(u64, u64)]) -> Result<u64, Error> {
    if region.len() != global_shape.len() {
        return Err(Error::BoxRankMismatch {
            box_dims: region.len(),
            shape_dims: global_shape.len(),
        });
    }
    let mut numel: u64 = 1;
    for (dim, (&(start, stop), &size)) in region.iter().zip(global_shape).enumerate() {
        if start > stop || stop > size {
            return Err(Error::BoxOutOfBounds {
                dim,
                start,
                stop,
                size,
            });
        }
        // Cannot overflow: bounded by the global numel, which the caller checked.
        numel = numel.saturating_mul(stop - start);
    }
    Ok(numel)
}

/// A box as a sequence of *runs*: stretches contiguous both in the global tensor and
/// in the output. The innermost fully covered dims merge into the run.
struct RunLayout {
    /// Elements per run.
    run_len: u64,
    /// Global flat index of the first element of the first run.
    base: u64,
    /// For each leading dim that indexes runs: (extent in the box, global stride).
    leading: Vec<(u64, u64)>,
}

impl RunLayout {
    /// `global_shape` has a checked numel and `region` is valid and non-empty.
    fn new(global_shape: &[u64], region: &[(u64, u64)]) -> RunLayout {
        let dims = global_shape.len();
        let mut strides = vec![1u64; dims];
        for d in (0..dims.saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * global_shape[d + 1];
        }
        // The run starts at the outermost dim below which everything is fully covered.
        let mut run_dim = dims;
        while run_dim > 0 && region[run_dim - 1] == (0, global_shape[run_dim - 1]) {
            run_dim -= 1;
        }
        let (run_len, leading_dims) = if run_dim == 0 {
            (global_shape.iter().product(), 0)
        } else {
            let (start, stop) = region[run_dim - 1];
            ((stop - start) * strides[run_dim - 1], run_dim - 1)
        };
        let base = region
            .iter()
            .zip(&strides)
            .map(|(&(start, _), &stride)| start * stride)
            .sum();
        let leading = (0..leading_dims)
            .map(|d| (region[d].1 - region[d].0, strides[d]))
            .collect();
        RunLayout {
            run_len,
            base,
            leading,
        }
    }

    /// Global flat index of the first element of run `run` (C order over `leading`).
    fn run_start(&self, mut run: u64) -> u64 {
        let mut offset = 0;
        for &(extent, stride) in self.leading.iter().rev() {
            offset += (run % extent) * stride;
            run /= extent;
        }
        self.base + offset
    }
}

/// Writes elements `[start, start + out.len())` (global flat indices) of one parameter.
/// Single-threaded; the building block of all fills.
fn fill_flat_serial<T: Element>(
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

/// The thread pools one process built, per thread count.
struct Pools {
    /// The process that built them.
    pid: u32,
    by_threads: Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>,
}

/// This process's pool table. `fork()` copies only the calling thread: in a forked
/// child the parent's pools have no workers (waiting on them would hang) and the
/// table's lock may be held by a thread that does not exist there. So the table is
/// reached through a pointer whose `pid` is checked *before* locking, and a child (a
/// new process id) installs a fresh table, leaking the parent's (dropping a pool would
/// signal threads that do not exist). Published tables are never freed.
fn pools() -> &'static Pools {
    static TABLE: AtomicPtr<Pools> = AtomicPtr::new(ptr::null_mut());
    let pid = std::process::id();
    loop {
        let current = TABLE.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in TABLE came from `Box::into_raw` below and was
        // published by a successful compare-exchange; published tables are never freed,
        // so it is valid for the rest of the program.
        if let Some(table) = unsafe { current.as_ref() } {
            if table.pid == pid {
                return table;
            }
        }
        let fresh = Box::into_raw(Box::new(Pools {
            pid,
            by_threads: Mutex::new(HashMap::new()),
        }));
        match TABLE.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just published; never freed (see above).
            Ok(_) => return unsafe { &*fresh },
            // SAFETY: `fresh` lost the race and was never published: this is its only
            // owner.
            Err(_) => drop(unsafe { Box::from_raw(fresh) }),
        }
    }
}

/// A cached thread pool of `threads` threads (building a pool costs far more than a
/// small fill). The operating system may refuse the threads (limits on processes or
/// address space): that is an error for the caller, not a panic.
fn pool_with(threads: usize) -> Result<Arc<rayon::ThreadPool>, Error> {
    let mut by_threads = pools()
        .by_threads
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(pool) = by_threads.get(&threads) {
        return Ok(pool.clone());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("shardinit-{i}"))
        .build()
        .map_err(|error| Error::ThreadPool {
            threads,
            reason: error.to_string(),
        })?;
    let pool = Arc::new(pool);
    by_threads.insert(threads, pool.clone());
    Ok(pool)
}

/// The number of threads of [`Threads::All`]: the CPUs this process may use (read once:
/// it may read cgroup files).
fn all_threads() -> usize {
    static ALL: OnceLock<usize> = OnceLock::new();
    *ALL.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// Runs `work(chunk_index, chunk)` over `CHUNK_ELEMENTS`-sized chunks of `out`.
fn for_each_chunk<T, F>(out: &mut [T], threads: Threads, work: F) -> Result<(), Error>
where
    T: Send,
    F: Fn(usize, &mut [T]) + Send + Sync,
{
    let threads = match threads {
        _ if out.len() <= CHUNK_ELEMENTS => 1,
        Threads::All => all_threads(),
        Threads::Count(n) => n,
    };
    let serial = threads <= 1;
    if serial {
        for (index, chunk) in out.chunks_mut(CHUNK_ELEMENTS).enumerate() {
            work(index, chunk);
        }
        return Ok(());
    }
    let run = move || {
        out.par_chunks_mut(CHUNK_ELEMENTS)
            .enumerate()
            .for_each(|(index, chunk)| work(index, chunk));
    };
    pool_with(threads)?.install(run);
    Ok(())
}

impl ParamStream {
    fn checked<T: Element>(&self) -> Result<(Stream, Sampler, u64), Error> {
        let numel = checked_numel(&self.global_shape, T::DTYPE.max_numel())?;
        let sampler = self.init.prepare()?;
        Ok((Stream::new(self.key64), sampler, numel))
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
        let (stream, sampler, numel) = self.checked::<T>()?;
        let len = out.len() as u64;
        if start.checked_add(len).is_none_or(|end| end > numel) {
            return Err(Error::RangeOutOfBounds { start, len, numel });
        }
        for_each_chunk(out, threads, |index, chunk| {
            let chunk_start = start + (index * CHUNK_ELEMENTS) as u64;
            fill_flat_serial(backend, &stream, &sampler, chunk_start, chunk);
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
        let (stream, sampler, _) = self.checked::<T>()?;
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
        for_each_chunk(out, threads, |index, chunk| {
            let mut position = out_offset + (index * CHUNK_ELEMENTS) as u64;
            let mut done = 0usize;
            while done < chunk.len() {
                let run = position / layout.run_len;
                let within = position % layout.run_len;
                let take = ((layout.run_len - within) as usize).min(chunk.len() - done);
                let global_start = layout.run_start(run) + within;
                fill_flat_serial(
                    backend,
                    &stream,
                    &sampler,
                    global_start,
                    &mut chunk[done..done + take],
                );
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

impl ParamStream {
    /// [`ParamStream::fill_flat`] for a run-time dtype.
    ///
    /// # Errors
    /// As [`ParamStream::fill_flat`].
    pub fn fill_flat_dyn(
        &self,
        start: u64,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        match out {
            OutBuf::F32(s) => self.fill_flat(start, s, threads),
            OutBuf::F64(s) => self.fill_flat(start, s, threads),
            OutBuf::BF16(s) => self.fill_flat(start, s, threads),
            OutBuf::F16(s) => self.fill_flat(start, s, threads),
        }
    }

    /// [`ParamStream::fill_box`] (`out_offset: None`) or
    /// [`ParamStream::fill_box_part`] (`Some(offset)`) for a run-time dtype.
    ///
    /// # Errors
    /// As those functions.
    pub fn fill_box_dyn(
        &self,
        region: &[(u64, u64)],
        out_offset: Option<u64>,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        fn dispatch<T: Element>(
            param: &ParamStream,
            region: &[(u64, u64)],
            out_offset: Option<u64>,
            out: &mut [T],
            threads: Threads,
        ) -> Result<(), Error> {
            match out_offset {
                None => param.fill_box(region, out, threads),
                Some(offset) => param.fill_box_part(region, offset, out, threads),
            }
        }
        match out {
            OutBuf::F32(s) => dispatch(self, region, out_offset, s, threads),
            OutBuf::F64(s) => dispatch(self, region, out_offset, s, threads),
            OutBuf::BF16(s) => dispatch(self, region, out_offset, s, threads),
            OutBuf::F16(s) => dispatch(self, region, out_offset, s, threads),
        }
    }
}
