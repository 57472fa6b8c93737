//! Threads: the [`Threads`] setting, the fork-aware registry of worker pools, and the
//! chunked parallel loop every fill runs through.
//!
//! Pools are built once per thread count and reused (building one costs far more than a
//! small fill). `fork()` copies only the calling thread, so a forked child must never
//! wait on its parent's pools or locks: per-process state lives in a [`PerProcess`],
//! which hands a child a fresh value.

use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rayon::prelude::*;

use crate::Error;

/// Output elements per unit of parallel work (256 KiB of float32): large enough that
/// scheduling costs nothing, small enough to balance across cores and stay in L2.
pub const CHUNK_ELEMENTS: usize = 1 << 16;

/// How many threads a fill may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Threads {
    /// Every CPU this process may use (`std::thread::available_parallelism`).
    #[default]
    All,
    /// Exactly this many threads; `Count(1)` runs on the calling thread only.
    Count(usize),
}

/// A value of which each process has its own: a forked child (a new process id) gets a
/// fresh one from `init` instead of its parent's.
///
/// `fork()` copies only the calling thread: in a child, the parent's value may hold a
/// lock taken by a thread that does not exist there, or worker threads that are gone.
/// So the value is reached through a pointer whose process id is checked *before*
/// anything in it is touched, and a child installs a fresh value, leaking the parent's
/// (dropping it could wait on or signal threads that do not exist). Published values
/// are never freed; a process leaks at most one per fork generation.
///
/// ```
/// use std::sync::Mutex;
/// use shardinit_core::pool::PerProcess;
///
/// static COUNTS: PerProcess<Mutex<Vec<u32>>> = PerProcess::new(|| Mutex::new(Vec::new()));
/// COUNTS.get().lock().unwrap().push(1);
/// assert_eq!(*COUNTS.get().lock().unwrap(), [1]); // the same value in the same process
/// ```
pub struct PerProcess<T> {
    current: AtomicPtr<Published<T>>,
    init: fn() -> T,
}

/// A value with the process that created it.
struct Published<T> {
    pid: u32,
    value: T,
}

impl<T: Send + Sync + 'static> PerProcess<T> {
    /// A registry that creates its value with `init` on first use in each process.
    pub const fn new(init: fn() -> T) -> PerProcess<T> {
        PerProcess {
            current: AtomicPtr::new(ptr::null_mut()),
            init,
        }
    }

    /// This process's value.
    pub fn get(&'static self) -> &'static T {
        self.get_for(std::process::id())
    }

    /// The value of the process `pid` (tests pass a made-up id to act as a child).
    fn get_for(&'static self, pid: u32) -> &'static T {
        loop {
            let current = self.current.load(Ordering::Acquire);
            // SAFETY: a non-null pointer here came from `Box::into_raw` below and was
            // published by a successful compare-exchange; published values are never
            // freed, so it is valid for the rest of the program.
            if let Some(published) = unsafe { current.as_ref() } {
                if published.pid == pid {
                    return &published.value;
                }
            }
            let fresh = Box::into_raw(Box::new(Published {
                pid,
                value: (self.init)(),
            }));
            match self
                .current
                .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: just published; never freed (see above).
                Ok(_) => return unsafe { &(*fresh).value },
                // SAFETY: `fresh` lost the race and was never published: this is its
                // only owner.
                Err(_) => drop(unsafe { Box::from_raw(fresh) }),
            }
        }
    }
}

/// The thread pools of this process, by thread count.
type PoolTable = Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>;

static POOLS: PerProcess<PoolTable> = PerProcess::new(|| Mutex::new(HashMap::new()));

/// Locks a pool table. A panic while it was held cannot leave it inconsistent (one
/// `insert`), so a poisoned lock is taken over.
fn lock(table: &PoolTable) -> MutexGuard<'_, HashMap<usize, Arc<rayon::ThreadPool>>> {
    table
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A new pool of `threads` threads (`stack_bytes` per thread, else rayon's default).
/// The operating system may refuse the threads (limits on processes or address space):
/// that is an error for the caller, not a panic.
fn build_pool(threads: usize, stack_bytes: Option<usize>) -> Result<rayon::ThreadPool, Error> {
    let mut builder = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("shardinit-{i}"));
    if let Some(bytes) = stack_bytes {
        builder = builder.stack_size(bytes);
    }
    builder.build().map_err(|error| Error::ThreadPool {
        threads,
        reason: error.to_string(),
    })
}

/// The cached pool of `threads` threads in `table`, built on first use (see
/// [`build_pool`]; a refused pool is not cached).
fn pool_in(
    table: &PoolTable,
    threads: usize,
    stack_bytes: Option<usize>,
) -> Result<Arc<rayon::ThreadPool>, Error> {
    let mut by_threads = lock(table);
    if let Some(pool) = by_threads.get(&threads) {
        return Ok(pool.clone());
    }
    let pool = Arc::new(build_pool(threads, stack_bytes)?);
    by_threads.insert(threads, pool.clone());
    Ok(pool)
}

/// This process's cached pool of `threads` threads.
fn pool_with(threads: usize) -> Result<Arc<rayon::ThreadPool>, Error> {
    pool_in(POOLS.get(), threads, None)
}

/// The number of threads of [`Threads::All`], once read (a test checks that it is kept).
static ALL_THREADS: OnceLock<usize> = OnceLock::new();

/// The number of threads of [`Threads::All`]: the CPUs this process may use (read once:
/// it may read cgroup files).
fn all_threads() -> usize {
    *ALL_THREADS
        .get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// The threads a loop over `len` elements runs on: one when it fits a single chunk
/// (no pool for small fills), else the setting.
fn threads_for(len: usize, threads: Threads) -> usize {
    match threads {
        _ if len <= CHUNK_ELEMENTS => 1,
        Threads::All => all_threads(),
        Threads::Count(n) => n,
    }
}

/// Runs `work(chunk_index, chunk)` over [`CHUNK_ELEMENTS`]-sized chunks of `out`, on
/// the calling thread or on a cached pool.
///
/// # Errors
/// [`Error::ThreadPool`] if the pool's threads cannot be started.
pub(crate) fn for_each_chunk<T, F>(out: &mut [T], threads: Threads, work: F) -> Result<(), Error>
where
    T: Send,
    F: Fn(usize, &mut [T]) + Send + Sync,
{
    let threads = threads_for(out.len(), threads);
    if threads <= 1 {
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

/// Runs `work` with `threads` threads available to rayon's parallel iterators inside
/// it: on the calling thread alone when the job is small (`len` elements, at most one
/// chunk) or one thread is asked for (rayon's global pool is never used), else on a
/// cached pool. What `work` computes must not depend on the thread count.
///
/// # Errors
/// [`Error::ThreadPool`] if the pool's threads cannot be started.
pub(crate) fn install<R, F>(len: usize, threads: Threads, work: F) -> Result<R, Error>
where
    R: Send,
    F: FnOnce(bool) -> R + Send,
{
    let threads = threads_for(len, threads);
    if threads <= 1 {
        return Ok(work(false));
    }
    Ok(pool_with(threads)?.install(move || work(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_is_built_once_per_thread_count_and_reused() {
        let table = PoolTable::default();
        let two = pool_in(&table, 2, None).unwrap();
        assert_eq!(two.current_num_threads(), 2);
        assert!(Arc::ptr_eq(&two, &pool_in(&table, 2, None).unwrap()));
        let three = pool_in(&table, 3, None).unwrap();
        assert_eq!(three.current_num_threads(), 3);
        assert!(!Arc::ptr_eq(&two, &three));
        assert_eq!(lock(&table).len(), 2);
        // The process-wide table caches too.
        assert!(Arc::ptr_eq(&pool_with(2).unwrap(), &pool_with(2).unwrap()));
    }

    #[test]
    fn a_refused_thread_count_is_error_thread_pool() {
        // Stacks larger than the 47-bit user address space: the operating system
        // refuses to start the threads, as it does under a low RLIMIT_AS or RLIMIT_NPROC.
        let table = PoolTable::default();
        let threads = 2;
        match pool_in(&table, threads, Some(1 << 48)) {
            Err(Error::ThreadPool { threads: t, reason }) => {
                assert_eq!(t, threads);
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("expected Error::ThreadPool, got {other}"),
            Ok(_) => panic!("{threads} threads were started"),
        }
        assert!(lock(&table).is_empty(), "a refused pool is not cached");
    }

    #[test]
    fn the_all_threads_count_is_cached_and_used_only_for_parallel_loops() {
        let all = all_threads();
        assert!(all >= 1);
        // Kept after the first read (equal reads alone would hold without a cache too).
        assert_eq!(ALL_THREADS.get(), Some(&all));
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(all, cpus);
        assert_eq!(threads_for(CHUNK_ELEMENTS, Threads::All), 1);
        assert_eq!(threads_for(CHUNK_ELEMENTS, Threads::Count(8)), 1);
        assert_eq!(threads_for(CHUNK_ELEMENTS + 1, Threads::All), all_threads());
        assert_eq!(threads_for(CHUNK_ELEMENTS + 1, Threads::Count(3)), 3);
    }

    #[test]
    fn a_new_process_id_gets_a_fresh_value_and_the_old_one_stays_valid() {
        static VALUES: PerProcess<Mutex<Vec<u32>>> = PerProcess::new(|| Mutex::new(Vec::new()));
        let parent = VALUES.get_for(100);
        parent.lock().unwrap().push(1);
        assert!(ptr::eq(parent, VALUES.get_for(100)));
        // A "forked child": its own, empty value, even while the parent's lock is held.
        let held = parent.lock().unwrap();
        let child = VALUES.get_for(101);
        assert!(!ptr::eq(parent, child));
        assert!(child.lock().unwrap().is_empty());
        drop(held);
        // The parent's value was leaked, not freed: still readable through `parent`.
        assert_eq!(*parent.lock().unwrap(), [1]);
        assert!(ptr::eq(child, VALUES.get_for(101)));
    }

    #[test]
    fn chunks_cover_the_output_in_order_on_any_thread_count() {
        for threads in [Threads::Count(1), Threads::Count(3), Threads::All] {
            let mut out = vec![0usize; 3 * CHUNK_ELEMENTS + 5];
            for_each_chunk(&mut out, threads, |index, chunk| {
                for (i, slot) in chunk.iter_mut().enumerate() {
                    *slot = index * CHUNK_ELEMENTS + i;
                }
            })
            .unwrap();
            assert!(out.iter().enumerate().all(|(i, &v)| i == v), "{threads:?}");
        }
    }
}
