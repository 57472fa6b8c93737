//! The orthogonal initializer (stream-format.md §4.5): torch's `orthogonal_` definition
//! with a QR factorization whose bits do not depend on the machine.
//!
//! A parameter of global shape `(rows, ...)` is flattened to `rows x cols`
//! (`cols = numel / rows`). Its normal matrix `N` is the stream-v1 float64
//! `normal(0, 1)` of the parameter's key at each element's flat index (words `2g`,
//! `2g + 1`), for every target dtype, so every dtype rounds the same binary64 matrix.
//! `A = N` when `rows >= cols`, else `A = N^T`; `A` is `m x n` with `m >= n`. An
//! unblocked Householder QR of `A` (`make_reflector`, `apply_reflector`) gives
//! `R`'s diagonal and the reflectors; `Q = H_0 H_1 ... H_{n-1} [I_n; 0]` is formed
//! column by column; column `j` is negated when `R_jj < 0` (torch's
//! `Q *= sign(diag(R))`) and multiplied by `gain`. The result is `Q` (or `Q^T` when
//! `rows < cols`), rounded once to the target dtype.
//!
//! Determinism: binary64 only, every operation written out (Rust never contracts
//! `a * b + c` into an FMA), the one dot product `dot_portable` with a fixed reduction tree
//! (eight interleaved partial sums combined pairwise), and parallelism only over
//! independent columns of a reflector application. Loops are blocked over panels of
//! `PANEL` reflectors for cache reuse, which reorders only *independent* work: each
//! column receives exactly the unblocked algorithm's operations in the same order.
//! So the bits do not depend on the thread count, the backend (the portable build of
//! the column kernels and the AVX2 build of the same source give the same bits) or the
//! region filled.
//!
//! Cost: `4 m n^2 - 4 n^3 / 3` flops (the QR and forming `Q`), one `m x n` binary64
//! matrix per call (plus a panel of `PANEL` columns), freed when the fill returns.

use crate::init::Sampler;
use crate::philox::{Backend, Stream};
use crate::pool::{install, Threads};
use crate::serial::write_stream;
use crate::Error;
use rayon::prelude::*;

/// Reflectors per panel: the loops apply this many reflectors to one column while it
/// stays in cache. Changes no bits (see the module docs).
const PANEL: usize = 16;

/// Columns per unit of work when generating the normal matrix column-major.
const GENERATE_COLUMNS: usize = 64;

/// The orthogonal matrix of one parameter, scaled by `gain`, ready to be read at any
/// global flat index.
#[derive(Debug)]
pub struct OrthogonalMatrix {
    /// `Q` (signs corrected, times `gain`), column-major, `m x n`.
    q: Vec<f64>,
    /// Rows of `A` (and `Q`): `max(rows, cols)`.
    m: usize,
    /// Columns of the flattened parameter.
    cols: u64,
    /// Whether the parameter is `Q^T` (`rows < cols`).
    transposed: bool,
}

impl OrthogonalMatrix {
    /// Computes the matrix of the parameter `(key64, global_shape)` with `gain`.
    /// `global_shape` has at least 2 dims and a checked, non-zero element count that
    /// fits `usize`.
    ///
    /// # Errors
    /// [`Error::OrthogonalTooLarge`] (with `max_numel = 0`) if the working matrix cannot
    /// be allocated; [`Error::ThreadPool`] if the worker threads cannot be started.
    pub fn compute(
        key64: u64,
        global_shape: &[u64],
        gain: f64,
        backend: Backend,
        threads: Threads,
    ) -> Result<OrthogonalMatrix, Error> {
        Self::compute_with_panel(key64, global_shape, gain, backend, threads, PANEL)
    }

    /// [`OrthogonalMatrix::compute`] with `panel` reflectors per panel (tests: any
    /// panel size gives the same bits).
    fn compute_with_panel(
        key64: u64,
        global_shape: &[u64],
        gain: f64,
        backend: Backend,
        threads: Threads,
        panel: usize,
    ) -> Result<OrthogonalMatrix, Error> {
        let rows = global_shape[0];
        let numel: u64 = global_shape.iter().product();
        let cols = numel / rows;
        let transposed = rows < cols;
        let (m, n) = if transposed {
            (cols, rows)
        } else {
            (rows, cols)
        };
        let (m, n) = (m as usize, n as usize);
        let mut a = Vec::new();
        a.try_reserve_exact(m * n)
            .map_err(|_| Error::OrthogonalTooLarge {
                global_shape: global_shape.to_vec(),
                numel,
                max_numel: 0,
            })?;
        a.resize(m * n, 0.0);
        let kernel = Kernel::of(backend);
        install(m * n, threads, |parallel| {
            let stream = Stream::new(key64);
            generate(&stream, backend, &mut a, m, n, transposed, parallel);
            let (tau, diag) = factor(kernel, &mut a, m, n, panel, parallel);
            form_q(kernel, &mut a, m, n, &tau, panel, parallel);
            for (column, &r) in a.chunks_exact_mut(m).zip(&diag) {
                let factor = if r < 0.0 { -gain } else { gain };
                for value in column {
                    *value *= factor;
                }
            }
        })?;
        Ok(OrthogonalMatrix {
            q: a,
            m,
            cols,
            transposed,
        })
    }

    /// The value (binary64, before rounding) at global flat index `index`.
    #[inline(always)]
    pub fn value(&self, index: u64) -> f64 {
        if self.transposed {
            // The parameter is Q^T: row r of it is column r of Q, contiguous.
            self.q[index as usize]
        } else {
            let (row, col) = (index / self.cols, index % self.cols);
            self.q[col as usize * self.m + row as usize]
        }
    }
}

/// Fills the column-major `m x n` matrix `a` with `A`: the float64 normal(0, 1) of
/// `stream` at flat index `g` of the `rows x cols` parameter, transposed when the
/// parameter is wide (then `A`'s columns are the parameter's rows, contiguous).
fn generate(
    stream: &Stream,
    backend: Backend,
    a: &mut [f64],
    m: usize,
    n: usize,
    transposed: bool,
    parallel: bool,
) {
    let normal = Sampler::Normal {
        mean: 0.0,
        std: 1.0,
    };
    if transposed {
        // a[j * m + i] = A[i, j] = N[j, i], flat index j * m + i: the stream in order.
        let fill = |(index, part): (usize, &mut [f64])| {
            write_stream(backend, stream, &normal, None, (index * m) as u64, part);
        };
        if parallel {
            a.par_chunks_mut(m).enumerate().for_each(fill);
        } else {
            a.chunks_mut(m).enumerate().for_each(fill);
        }
        return;
    }
    // a[j * m + i] = A[i, j] = N[i, j], flat index i * n + j: per block of columns,
    // one short run of the stream per row, scattered into the block's columns.
    let fill = |(block, part): (usize, &mut [f64])| {
        let first = block * GENERATE_COLUMNS;
        let width = part.len() / m;
        let mut row = [0f64; GENERATE_COLUMNS];
        for i in 0..m {
            let start = (i * n + first) as u64;
            write_stream(backend, stream, &normal, None, start, &mut row[..width]);
            for (c, &value) in row[..width].iter().enumerate() {
                part[c * m + i] = value;
            }
        }
    };
    if parallel {
        a.par_chunks_mut(GENERATE_COLUMNS * m)
            .enumerate()
            .for_each(fill);
    } else {
        a.chunks_mut(GENERATE_COLUMNS * m)
            .enumerate()
            .for_each(fill);
    }
}

/// Householder QR of the column-major `m x n` `a` in place (LAPACK's storage: `R` on
/// and above the diagonal, reflector `k`'s vector below it with an implicit 1 at row
/// `k`). Returns `(tau, diag(R))`.
fn factor(
    kernel: Kernel,
    a: &mut [f64],
    m: usize,
    n: usize,
    panel_size: usize,
    parallel: bool,
) -> (Vec<f64>, Vec<f64>) {
    let mut tau = vec![0.0; n];
    let mut diag = vec![0.0; n];
    for p0 in (0..n).step_by(panel_size) {
        let p1 = (p0 + panel_size).min(n);
        let (head, tail) = a.split_at_mut(p1 * m);
        // The panel, column by column: reflector k, then applied to the panel's
        // columns right of k.
        for k in p0..p1 {
            let (left, right) = head.split_at_mut((k + 1) * m);
            let column = &mut left[k * m..];
            (tau[k], diag[k]) = make_reflector(column, k);
            for other in right.chunks_exact_mut(m) {
                kernel.apply(&left[k * m..], &tau[k..=k], k, other);
            }
        }
        // Every later column gets the panel's reflectors in order, independently.
        let panel = &head[p0 * m..];
        let apply = |column: &mut [f64]| kernel.apply(panel, &tau[p0..p1], p0, column);
        if parallel {
            tail.par_chunks_exact_mut(m).for_each(apply);
        } else {
            tail.chunks_exact_mut(m).for_each(apply);
        }
    }
    (tau, diag)
}

/// Overwrites the factored `a` with `Q = H_0 ... H_{n-1} [I_n; 0]` in place. Column
/// `j` of `Q` is `e_j` with reflectors `j, j - 1, ..., 0` applied in that order;
/// panels are processed last to first so that a panel's reflectors are applied to
/// every column right of it before its own columns are overwritten.
fn form_q(
    kernel: Kernel,
    a: &mut [f64],
    m: usize,
    n: usize,
    tau: &[f64],
    panel_size: usize,
    parallel: bool,
) {
    let panels: Vec<usize> = (0..n).step_by(panel_size).collect();
    let mut saved = vec![0.0; panel_size * m];
    for &p0 in panels.iter().rev() {
        let p1 = (p0 + panel_size).min(n);
        let (head, tail) = a.split_at_mut(p1 * m);
        let saved = &mut saved[..(p1 - p0) * m];
        saved.copy_from_slice(&head[p0 * m..]);
        let saved = &*saved;
        let later = |column: &mut [f64]| kernel.apply_reversed(saved, &tau[p0..p1], p0, column);
        let own = |(offset, column): (usize, &mut [f64])| {
            let j = p0 + offset;
            column.fill(0.0);
            column[j] = 1.0;
            kernel.apply_reversed(&saved[..(offset + 1) * m], &tau[p0..=j], p0, column);
        };
        let panel_columns = &mut head[p0 * m..];
        if parallel {
            tail.par_chunks_exact_mut(m).for_each(later);
            panel_columns
                .par_chunks_exact_mut(m)
                .enumerate()
                .for_each(own);
        } else {
            tail.chunks_exact_mut(m).for_each(later);
            panel_columns.chunks_exact_mut(m).enumerate().for_each(own);
        }
    }
}

/// Turns `column[k..]` (`x`, with `alpha = x[0]`) into reflector `k` (LAPACK's
/// `dlarfg` without rescaling: the entries are normal samples, far from overflow):
/// `sigma = dot(x[1..], x[1..])`; if `sigma == 0`, `tau = 0` and `R_kk = alpha`
/// (`H = I`); else `norm = sqrt(alpha * alpha + sigma)`,
/// `beta = -norm` if `alpha >= 0` else `norm`, `tau = (beta - alpha) / beta`,
/// `x[i] = x[i] / (alpha - beta)` for `i >= 1`, `x[0] = R_kk = beta`.
/// Returns `(tau, R_kk)`.
fn make_reflector(column: &mut [f64], k: usize) -> (f64, f64) {
    let x = &mut column[k..];
    let alpha = x[0];
    let sigma = dot_portable(&x[1..], &x[1..]);
    if sigma == 0.0 {
        return (0.0, alpha);
    }
    let norm = (alpha * alpha + sigma).sqrt();
    let beta = if alpha >= 0.0 { -norm } else { norm };
    let tau = (beta - alpha) / beta;
    let scale = alpha - beta;
    for value in &mut x[1..] {
        *value /= scale;
    }
    x[0] = beta;
    (tau, beta)
}

/// `sum(v[i] * y[i])` with a fixed reduction tree: partial sum `s[l]` (from `0.0`)
/// accumulates `v[i] * y[i]` for `i = l, l + 8, l + 16, ...` in increasing `i`, then
/// `((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))`. Products and sums are rounded
/// separately (no FMA).
#[inline(always)]
fn dot_portable(v: &[f64], y: &[f64]) -> f64 {
    let mut s = [0f64; 8];
    let (v_main, v_rest) = v.split_at(v.len() - v.len() % 8);
    let (y_main, y_rest) = y[..v.len()].split_at(v_main.len());
    for (vc, yc) in v_main.chunks_exact(8).zip(y_main.chunks_exact(8)) {
        for l in 0..8 {
            s[l] += vc[l] * yc[l];
        }
    }
    for (l, (&vi, &yi)) in v_rest.iter().zip(y_rest).enumerate() {
        s[l] += vi * yi;
    }
    ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

/// Applies reflector `k` (vector in `reflector[k + 1..]`, implicit 1 at row `k`) to
/// `column`: nothing if `tau == 0`; else `w = x[0] + dot(v, x[1..])`, `t = tau * w`,
/// `x[0] = x[0] - t`, `x[i] = x[i] - t * v[i - 1]` (with `x = column[k..]`).
#[inline(always)]
fn apply_reflector(reflector: &[f64], tau: f64, k: usize, column: &mut [f64]) {
    if tau == 0.0 {
        return;
    }
    let v = &reflector[k + 1..];
    let x = &mut column[k..];
    let w = x[0] + dot_portable(v, &x[1..]);
    let t = tau * w;
    x[0] -= t;
    for (xi, &vi) in x[1..].iter_mut().zip(v) {
        *xi -= t * vi;
    }
}

/// Reflectors `first, first + 1, ...` (columns of `panel`, `m` apart; `taus[i]` is
/// reflector `first + i`'s) applied to `column` in increasing (`REVERSED = false`) or
/// decreasing order.
#[inline(always)]
fn apply_panel<const REVERSED: bool>(
    panel: &[f64],
    taus: &[f64],
    first: usize,
    column: &mut [f64],
) {
    let m = column.len();
    let one = |i: usize| {
        let reflector = &panel[i * m..(i + 1) * m];
        (reflector, taus[i], first + i)
    };
    if REVERSED {
        for i in (0..taus.len()).rev() {
            let (reflector, tau, k) = one(i);
            apply_reflector(reflector, tau, k, column);
        }
    } else {
        for i in 0..taus.len() {
            let (reflector, tau, k) = one(i);
            apply_reflector(reflector, tau, k, column);
        }
    }
}

/// Which build of the column kernels runs: the same source compiled for the baseline
/// target or with AVX2 enabled (wider vectors for the eight partial sums and the
/// update; no FMA either way). Both give the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    /// The kernel build for `backend` (which the caller checked is available): AVX2 for
    /// the AVX2 backends, portable for [`Backend::Scalar`] and [`Backend::Portable`].
    fn of(backend: Backend) -> Kernel {
        match backend {
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 | Backend::Avx2PhiloxAvx512Lanes => Kernel::Avx2,
            _ => Kernel::Portable,
        }
    }

    fn apply(self, panel: &[f64], taus: &[f64], first: usize, column: &mut [f64]) {
        match self {
            Kernel::Portable => apply_panel::<false>(panel, taus, first, column),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Kernel::Avx2` comes only from an AVX2 backend, which the fill
            // checked is available on this CPU (`kernel::check_available`).
            Kernel::Avx2 => unsafe { avx2::apply_panel_forward(panel, taus, first, column) },
        }
    }

    fn apply_reversed(self, panel: &[f64], taus: &[f64], first: usize, column: &mut [f64]) {
        match self {
            Kernel::Portable => apply_panel::<true>(panel, taus, first, column),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `apply`: AVX2 was checked available.
            Kernel::Avx2 => unsafe { avx2::apply_panel_reversed(panel, taus, first, column) },
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! The column kernels compiled with AVX2 enabled (and not FMA: no contraction).

    /// [`super::apply_panel`] in increasing order, built for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn apply_panel_forward(
        panel: &[f64],
        taus: &[f64],
        first: usize,
        column: &mut [f64],
    ) {
        super::apply_panel::<false>(panel, taus, first, column);
    }

    /// [`super::apply_panel`] in decreasing order, built for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn apply_panel_reversed(
        panel: &[f64],
        taus: &[f64],
        first: usize,
        column: &mut [f64],
    ) {
        super::apply_panel::<true>(panel, taus, first, column);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Q^T Q` of a computed matrix, divided by `gain^2`, against the identity.
    fn max_gram_error(q: &OrthogonalMatrix, rows: u64, cols: u64, gain: f64) -> f64 {
        let (m, n) = (q.m, (rows * cols) as usize / q.m);
        let mut worst = 0f64;
        for i in 0..n {
            for j in 0..n {
                let mut s = 0.0;
                for r in 0..m {
                    s += q.q[i * m + r] * q.q[j * m + r];
                }
                let expected = if i == j { 1.0 } else { 0.0 };
                worst = worst.max((s / (gain * gain) - expected).abs());
            }
        }
        worst
    }

    fn compute(shape: &[u64], backend: Backend, threads: Threads) -> OrthogonalMatrix {
        OrthogonalMatrix::compute(0x1234_5678_9abc_def0, shape, 1.0, backend, threads).unwrap()
    }

    fn bits(q: &OrthogonalMatrix) -> Vec<u64> {
        q.q.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn q_is_orthogonal_in_binary64_for_tall_square_and_wide_shapes() {
        for shape in [[40u64, 40], [70, 9], [9, 70], [1, 5], [5, 1], [33, 17]] {
            let q = compute(&shape, Backend::detect(), Threads::Count(1));
            let error = max_gram_error(&q, shape[0], shape[1], 1.0);
            assert!(error < 1e-12, "{shape:?}: {error}");
        }
        let gain = 0.5;
        let q = OrthogonalMatrix::compute(7, &[20, 3, 2], gain, Backend::Portable, Threads::All)
            .unwrap();
        assert!(max_gram_error(&q, 20, 6, gain) < 1e-12);
    }

    #[test]
    fn r_diagonal_is_positive_after_the_sign_correction() {
        // Q^T A = R; with the signs corrected its diagonal is positive.
        let shape = [12u64, 7];
        let q = compute(&shape, Backend::Scalar, Threads::Count(1));
        let stream = Stream::new(0x1234_5678_9abc_def0);
        let normal = Sampler::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let mut n_matrix = vec![0.0; 84];
        write_stream(Backend::Scalar, &stream, &normal, None, 0, &mut n_matrix);
        for j in 0..7 {
            let mut r_jj = 0.0;
            for i in 0..12 {
                r_jj += q.value(i * 7 + j) * n_matrix[(i * 7 + j) as usize];
            }
            assert!(r_jj > 0.0, "column {j}: {r_jj}");
        }
    }

    #[test]
    fn thread_counts_and_kernels_give_the_same_bits() {
        // Sizes crossing panel and generation-block edges, above one chunk so that the
        // thread pool is used.
        for shape in [[300u64, 260], [200, 420], [17, 5]] {
            let reference = bits(&compute(&shape, Backend::Scalar, Threads::Count(1)));
            for backend in Backend::available() {
                for threads in [Threads::Count(1), Threads::Count(3), Threads::All] {
                    let got = bits(&compute(&shape, backend, threads));
                    assert!(got == reference, "{shape:?} {backend:?} {threads:?}");
                }
            }
        }
    }

    #[test]
    fn panel_sizes_reorder_only_independent_work() {
        // Panels of 1 are the unblocked algorithm of stream-format.md §4.5 step by step.
        for shape in [[45u64, 37], [20, 61]] {
            let with = |panel| {
                let q = OrthogonalMatrix::compute_with_panel(
                    3,
                    &shape,
                    1.0,
                    Backend::Portable,
                    Threads::Count(1),
                    panel,
                )
                .unwrap();
                bits(&q)
            };
            let unblocked = with(1);
            for panel in [2, 3, 16, 64] {
                assert!(with(panel) == unblocked, "{shape:?} panel {panel}");
            }
        }
    }

    #[test]
    fn the_dot_tree_is_the_documented_one() {
        let v: Vec<f64> = (0..13).map(|i| 1.0 + f64::from(i) * 1e-3).collect();
        let y: Vec<f64> = (0..13).map(|i| 1e16 * f64::from(i % 3) - 1.0).collect();
        let mut s = [0f64; 8];
        for i in 0..13 {
            s[i % 8] += v[i] * y[i];
        }
        let expected = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        assert_eq!(dot_portable(&v, &y).to_bits(), expected.to_bits());
        assert_eq!(dot_portable(&[], &[]), 0.0);
    }

    #[test]
    fn a_known_two_by_two() {
        // A = [[a, b], [c, d]]: Q's first column is (a, c) / |(a, c)| (sign fixed so
        // R_00 > 0) and the second the orthogonal unit vector with R_11 > 0.
        let q = compute(&[2, 2], Backend::Scalar, Threads::Count(1));
        let stream = Stream::new(0x1234_5678_9abc_def0);
        let normal = Sampler::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let mut n_matrix = [0.0f64; 4];
        write_stream(Backend::Scalar, &stream, &normal, None, 0, &mut n_matrix);
        let [a, b, c, d] = n_matrix;
        let norm = a.hypot(c);
        let (q00, q10) = (a / norm, c / norm);
        let det_sign = (a * d - b * c).signum();
        let (q01, q11) = (-q10 * det_sign, q00 * det_sign);
        for (index, expected) in [q00, q01, q10, q11].into_iter().enumerate() {
            let got = q.value(index as u64);
            assert!(
                (got - expected).abs() < 1e-15,
                "{index}: {got} vs {expected}"
            );
        }
    }
}
