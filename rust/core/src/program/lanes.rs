//! The evaluator's passes compiled for the CPU's vector width, as the fills and the math
//! lanes are: a block's evaluation ([`Compiled::eval_block_passes`], with every pass it
//! runs inlined into it), the destination's read-back and the result's write, each
//! compiled once more for AVX2 and for AVX-512F and chosen by the compiled program's
//! [`Backend`] once per block.
//!
//! The bits are the same on every backend: each pass is the same IEEE-754 operations in
//! the same order per element whatever the vector width (Rust never contracts `a * b +
//! c` into a fused multiply-add, and has no fast-math), and the math functions are the
//! backend's lanes of [`crate::math`], equal to the scalar functions bit for bit.
//! `tests::every_backend_gives_the_scalar_backends_bits` checks a program of every step
//! kind on each backend this CPU runs against [`Backend::Scalar`].

use super::compile::Compiled;
use super::eval::{read_back_passes, write_result_passes, Scratch};
use crate::init::Element;
use crate::philox::Backend;

impl Compiled {
    /// Evaluates every register the result needs at flat indices `[first, first + n)`
    /// with the pass code of `self.backend`.
    pub(super) fn eval_block(&self, first: u64, n: usize, scratch: &mut Scratch) {
        match self.backend {
            // SAFETY: `self.backend` is one this CPU runs (`Compiled::backend`: checked when
            // the program was compiled, `Program::compile_using`).
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => unsafe { x86::eval_block_avx2(self, first, n, scratch) },
            // SAFETY: as above.
            #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
            Backend::Avx2PhiloxAvx512Lanes => unsafe {
                x86::eval_block_avx512(self, first, n, scratch)
            },
            _ => self.eval_block_passes(first, n, scratch),
        }
    }

    /// `out`'s values, widened, into `dst` (the destination's register), with the pass
    /// code of `self.backend`.
    pub(super) fn read_back<T: Element>(&self, out: &[T], dst: &mut [f64]) {
        match self.backend {
            // SAFETY: `self.backend` is one this CPU runs (`Compiled::backend`: checked when
            // the program was compiled, `Program::compile_using`).
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => unsafe { x86::read_back_avx2(out, dst) },
            // SAFETY: as above.
            #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
            Backend::Avx2PhiloxAvx512Lanes => unsafe { x86::read_back_avx512(out, dst) },
            _ => read_back_passes(out, dst),
        }
    }

    /// The result's values written to `out`, with the pass code of `self.backend`.
    pub(super) fn write_result<T: Element>(&self, result: &[f64], out: &mut [T]) {
        match self.backend {
            // SAFETY: `self.backend` is one this CPU runs (`Compiled::backend`: checked when
            // the program was compiled, `Program::compile_using`).
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => unsafe { x86::write_result_avx2(result, out) },
            // SAFETY: as above.
            #[cfg(all(target_arch = "x86_64", shardinit_avx512))]
            Backend::Avx2PhiloxAvx512Lanes => unsafe { x86::write_result_avx512(result, out) },
            _ => write_result_passes(result, out),
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::compile::Compiled;
    use super::super::eval::{read_back_passes, write_result_passes, Scratch};
    use crate::init::Element;

    /// [`Compiled::eval_block_passes`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn eval_block_avx2(c: &Compiled, first: u64, n: usize, s: &mut Scratch) {
        c.eval_block_passes(first, n, s);
    }

    /// [`read_back_passes`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn read_back_avx2<T: Element>(out: &[T], dst: &mut [f64]) {
        read_back_passes(out, dst);
    }

    /// [`write_result_passes`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn write_result_avx2<T: Element>(result: &[f64], out: &mut [T]) {
        write_result_passes(result, out);
    }

    /// [`Compiled::eval_block_passes`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX2.
    #[cfg(shardinit_avx512)] // Rust >= 1.89: see build.rs
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn eval_block_avx512(c: &Compiled, first: u64, n: usize, s: &mut Scratch) {
        c.eval_block_passes(first, n, s);
    }

    /// [`read_back_passes`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX2.
    #[cfg(shardinit_avx512)]
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn read_back_avx512<T: Element>(out: &[T], dst: &mut [f64]) {
        read_back_passes(out, dst);
    }

    /// [`write_result_passes`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX2.
    #[cfg(shardinit_avx512)]
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn write_result_avx512<T: Element>(result: &[f64], out: &mut [T]) {
        write_result_passes(result, out);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::builder::Program;
    use super::super::ops::{BinaryOp, UnaryOp};
    use crate::init::{Dtype, Element, Init, OutBuf};
    use crate::philox::Backend;
    use crate::region::Region;
    use crate::Threads;
    use half::{bf16, f16};

    /// Registers of every step kind from a float32 uniform `u` in (-1, 1), a value `x`
    /// of another source (or `u`), the coordinates of a `[64, 512]` shape and a table:
    /// every unary and binary operation (on operands in its domain), `erfinv` rounded to
    /// float32 and not, a `Round` to each narrow dtype, a clamp, a `where` of a
    /// per-element condition and one of a row's (the same on each block of 256; with
    /// `wheres`), a column hoisted, `sin`/`cos` (refusals tracked), a rounded product
    /// and a clamp of a clamp (each one pass).
    fn every_step(p: &mut Program, u: usize, x: usize, wheres: bool) -> Vec<usize> {
        use BinaryOp::*;
        let k = |p: &mut Program, v: f64| p.constant(v);
        let (c0, c1, flat) = (p.coord(0).unwrap(), p.coord(1).unwrap(), p.flat());
        let table = p.table((0..64).map(|v| f64::from(v) / 7.0).collect(), vec![1, 0], 0);
        let abs = p.unary(UnaryOp::Abs, x).unwrap();
        let half = k(p, 0.5);
        let positive = p.binary(Add, abs, half).unwrap();
        let mut terms = vec![table, flat];
        for &op in UnaryOp::ALL {
            let domain = match op {
                UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Reciprocal => positive,
                UnaryOp::Erfinv | UnaryOp::Log1p => u,
                _ => x,
            };
            terms.push(p.unary(op, domain).unwrap());
        }
        let e = p.unary(UnaryOp::Erfinv, u).unwrap();
        terms.push(p.round(e, Dtype::F32).unwrap());
        for &op in BinaryOp::ALL {
            let (a, b) = match op {
                Pow => (positive, x),
                Div | FloorDiv | Mod => (x, positive),
                _ => (x, u),
            };
            terms.push(p.binary(op, a, b).unwrap());
        }
        for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
            terms.push(p.round(x, dtype).unwrap());
        }
        let lo = k(p, -0.25);
        let below = p.binary(Lt, x, lo).unwrap();
        terms.push(p.select(below, lo, x).unwrap());
        let (zero, scale) = (k(p, 0.0), k(p, -0.01));
        if wheres {
            let positive_x = p.binary(Gt, x, zero).unwrap();
            terms.push(p.select(positive_x, u, x).unwrap());
            let thirty_two = k(p, 32.0);
            let top_rows = p.binary(Lt, c0, thirty_two).unwrap();
            terms.push(p.select(top_rows, x, u).unwrap());
        }
        // `Round` of `mul` and a clamp of a clamp, each one pass.
        let product = p.binary(Mul, x, u).unwrap();
        terms.push(p.round(product, Dtype::BF16).unwrap());
        let (low, high) = (k(p, -0.5), k(p, 0.75));
        let above = p.binary(Gt, x, high).unwrap();
        let clamped = p.select(above, high, x).unwrap();
        let below_low = p.binary(Lt, clamped, low).unwrap();
        terms.push(p.select(below_low, low, clamped).unwrap());
        let scaled = p.binary(Mul, c1, scale).unwrap();
        terms.push(p.unary(UnaryOp::Exp, scaled).unwrap());
        terms
    }

    /// Each term at the elements whose flat index is its position modulo the number of
    /// terms (a chain of `where`s: conditions first, branches as needed), or their sum.
    fn combined(p: &mut Program, terms: &[usize], select: bool) -> usize {
        let flat = p.flat();
        let count = p.constant(terms.len() as f64);
        let position = p.binary(BinaryOp::Mod, flat, count).unwrap();
        let mut result = terms[0];
        for (i, &term) in terms.iter().enumerate().skip(1) {
            result = if select {
                let i = p.constant(i as f64);
                let here = p.binary(BinaryOp::Eq, position, i).unwrap();
                p.select(here, term, result).unwrap()
            } else {
                p.binary(BinaryOp::Add, result, term).unwrap()
            };
        }
        result
    }

    /// The program's values on `backend` as bits (binary64 read of each element), on two
    /// regions (a box whose runs cut blocks, and a flat range across fused spans).
    fn values(p: &Program, backend: Backend, dtype: Dtype) -> Vec<u64> {
        let shape = [64u64, 512];
        let regions = [
            (
                Region::Box {
                    ranges: vec![(3, 61), (7, 500)],
                    offset: None,
                },
                58 * 493,
            ),
            (Region::Flat { start: 1000 }, 20_000),
        ];
        let mut bits = Vec::new();
        for (region, len) in regions {
            macro_rules! fill {
                ($t:ty, $variant:ident) => {{
                    let mut out = vec![<$t>::from_f64(0.0); len];
                    let buf = OutBuf::$variant(&mut out);
                    p.fill_region_using(backend, 11, &shape, &region, buf, Threads::Count(2))
                        .unwrap();
                    bits.extend(out.iter().map(|v| v.widen().to_bits()));
                }};
            }
            match dtype {
                Dtype::F32 => fill!(f32, F32),
                Dtype::F64 => fill!(f64, F64),
                Dtype::BF16 => fill!(bf16, BF16),
                Dtype::F16 => fill!(f16, F16),
            }
        }
        bits
    }

    /// A program of every step kind, fused over its source (one float32 source) or with
    /// its sources evaluated (a binary64 normal beside it), its terms selected per
    /// element (conditions first) or summed (no `where`: every step in order), into
    /// every dtype: the bits of the scalar backend on every backend this CPU runs.
    #[test]
    fn every_backend_gives_the_scalar_backends_bits() {
        let backends = Backend::available();
        assert!(backends.len() >= 2 && backends[0] == Backend::Scalar);
        let uniform = Init::Uniform { a: -1.0, b: 1.0 };
        let normal = Init::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let mut kinds = HashSet::new();
        for (two_sources, select) in [(false, true), (false, false), (true, true)] {
            let mut p = Program::new();
            let u = p.source(uniform, Dtype::F32).unwrap();
            let x = if two_sources {
                p.source(normal, Dtype::F64).unwrap()
            } else {
                u
            };
            let terms = every_step(&mut p, u, x, select);
            combined(&mut p, &terms, select);
            for dtype in Dtype::ALL {
                let fused = p.fused_source(dtype).map(|(register, _)| register);
                let compiled = p.compile(11, &[64, 512], dtype, fused).unwrap();
                kinds.extend(compiled.steps.iter().map(std::mem::discriminant));
                assert_eq!(compiled.conditions.is_empty(), !select);
                let want = values(&p, Backend::Scalar, dtype);
                let finite = want.iter().filter(|&&b| f64::from_bits(b).is_finite());
                assert!(finite.count() > want.len() * 9 / 10);
                for &backend in &backends[1..] {
                    let got = values(&p, backend, dtype);
                    let case = format!("{backend:?} {dtype:?} {two_sources} {select}");
                    assert!(got == want, "{case}");
                }
            }
        }
        // Source, Destination, Constant, Coord, Flat, Table, Unary, Binary, Where,
        // Round, ErfinvToF32, Column, Unused, Clamp, RoundedBinary, ClampPair.
        assert_eq!(kinds.len(), 16);
    }
}
