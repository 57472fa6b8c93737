//! The registry of fills in flight: a second fill of memory that a running fill is
//! writing is refused, instead of two threads writing the same tensor at once.
//!
//! The GIL is released while the core writes an `out` buffer, and the module declares
//! free-threading support, so other threads run meanwhile. Concurrent writes to the same
//! tensor are not allowed (the documented contract of every `out=`); this registry
//! turns the case shardinit can see, two shardinit fills of overlapping memory, into a
//! clean `ShardInitError` naming `out`. Fills of disjoint memory still run concurrently.

use std::sync::Mutex;

use pyo3::PyResult;
use shardinit_core::pool::PerProcess;

use crate::errors::ShardInitError;

/// Byte ranges `[start, end)` being written by fills of this process. Per process, so
/// that a forked child neither inherits its parent's fills (their threads do not exist
/// there) nor a lock taken by one of them.
static IN_FLIGHT: PerProcess<Mutex<Vec<(usize, usize)>>> =
    PerProcess::new(|| Mutex::new(Vec::new()));

fn in_flight() -> std::sync::MutexGuard<'static, Vec<(usize, usize)>> {
    // A panic while the lock was held cannot leave the list inconsistent (one push or
    // one swap_remove), so a poisoned lock is taken over.
    IN_FLIGHT
        .get()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The right to write bytes `[start, end)` until dropped.
pub struct Claim {
    range: Option<(usize, usize)>,
}

impl Claim {
    /// Claims the `bytes` bytes at `address`, or fails if a fill still running in this
    /// process writes any of them. An empty buffer claims nothing.
    pub fn new(address: usize, bytes: usize) -> PyResult<Claim> {
        if bytes == 0 {
            return Ok(Claim { range: None });
        }
        let range = (address, address.saturating_add(bytes));
        let mut ranges = in_flight();
        if ranges
            .iter()
            .any(|&(start, end)| start < range.1 && range.0 < end)
        {
            return Err(ShardInitError::new_err(
                "out overlaps the memory of another shardinit fill that is still running; \
                 concurrent writes to the same tensor are not allowed",
            ));
        }
        ranges.push(range);
        Ok(Claim { range: Some(range) })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(range) = self.range {
            let mut ranges = in_flight();
            if let Some(index) = ranges.iter().position(|&r| r == range) {
                ranges.swap_remove(index);
            }
        }
    }
}
