//! Shard geometry: element counts, `torch.chunk` ranges, boxes and the runs a box is
//! made of. Pure index arithmetic over the global shape (stream-format.md §2: an
//! element's words depend only on its global flat index), independent of dtypes,
//! initializers and threads.

use crate::Error;

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
pub(crate) struct RunLayout {
    /// Elements per run.
    pub(crate) run_len: u64,
    /// Global flat index of the first element of the first run.
    base: u64,
    /// For each leading dim that indexes runs: (extent in the box, global stride).
    leading: Vec<(u64, u64)>,
}

impl RunLayout {
    /// `global_shape` has a checked numel and `region` is valid and non-empty.
    pub(crate) fn new(global_shape: &[u64], region: &[(u64, u64)]) -> RunLayout {
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
    pub(crate) fn run_start(&self, mut run: u64) -> u64 {
        let mut offset = 0;
        for &(extent, stride) in self.leading.iter().rev() {
            offset += (run % extent) * stride;
            run /= extent;
        }
        self.base + offset
    }
}
