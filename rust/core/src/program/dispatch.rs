//! A program's fills ([`Program::fill_region`]): which computation writes them. A program
//! that is a single source of the destination's dtype is the stream fill itself; one
//! with a single such source and further steps has the source written by the fused
//! kernels and evaluated over it; any other is evaluated whole (see the module docs of
//! [`crate::program`]).

use super::builder::{Instr, Program};
use crate::fill::ParamStream;
use crate::init::{Dtype, Init, OutBuf};
use crate::philox::Backend;
use crate::pool::Threads;
use crate::region::Region;
use crate::Error;

impl Program {
    /// The single source of `dtype` this program is, if it is one (then a fill is the
    /// plain [`ParamStream`] fill).
    fn single_source(&self, dtype: Dtype) -> Option<Init> {
        match self.instrs.as_slice() {
            [Instr::Source { init, dtype: d }] if *d == dtype => Some(*init),
            _ => None,
        }
    }

    /// The register and initializer of the program's only source, when it has one, of
    /// `dtype`, and more registers than it (see the module docs).
    pub(super) fn fused_source(&self, dtype: Dtype) -> Option<(usize, Init)> {
        let mut sources = self
            .instrs
            .iter()
            .enumerate()
            .filter_map(|(r, i)| match *i {
                Instr::Source { init, dtype } => Some((r, init, dtype)),
                _ => None,
            });
        match (sources.next(), sources.next()) {
            (Some((register, init, d)), None) if d == dtype && self.instrs.len() > 1 => {
                Some((register, init))
            }
            _ => None,
        }
    }

    /// Fills `out` with `region` of the program's values over the parameter
    /// `(key64, global_shape)`, on `threads` threads: the last register, rounded to
    /// `out`'s dtype by stream-format.md §4's rule.
    ///
    /// # Errors
    /// An empty program; a `coord` dim or a `table` that does not fit the global shape;
    /// the errors of [`ParamStream::fill_region`] (shape too large, region); an
    /// argument of `sin`/`cos` beyond [`crate::math::TRIG_MAX`] ([`Error::TrigArgument`], the
    /// one of the lowest flat index; `out` is then partly written).
    pub fn fill_region(
        &self,
        key64: u64,
        global_shape: &[u64],
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        if let Some(init) = self.single_source(out.dtype()) {
            let param = ParamStream {
                key64,
                global_shape: global_shape.to_vec(),
                init,
            };
            return param.fill_region(region, out, threads);
        }
        self.fill_region_using(Backend::detect(), key64, global_shape, region, out, threads)
    }

    /// [`Program::fill_region`] of a program that is not a single source, evaluated by
    /// `backend`'s passes and math lanes (tests compare them: every backend gives the
    /// same bits).
    ///
    /// # Errors
    /// As [`Program::fill_region`].
    ///
    /// # Panics
    /// If this CPU cannot run `backend` ([`Backend::is_available`]).
    pub fn fill_region_using(
        &self,
        backend: Backend,
        key64: u64,
        global_shape: &[u64],
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        if let Some((register, init)) = self.fused_source(out.dtype()) {
            let compiled =
                self.compile_using(backend, key64, global_shape, out.dtype(), Some(register))?;
            let param = ParamStream {
                key64,
                global_shape: global_shape.to_vec(),
                init,
            };
            return match out {
                OutBuf::F32(s) => compiled.fill_over(&param, region, s, threads),
                OutBuf::F64(s) => compiled.fill_over(&param, region, s, threads),
                OutBuf::BF16(s) => compiled.fill_over(&param, region, s, threads),
                OutBuf::F16(s) => compiled.fill_over(&param, region, s, threads),
            };
        }
        let compiled = self.compile_using(backend, key64, global_shape, out.dtype(), None)?;
        compiled.fill_buffer(region, out, threads)
    }

    /// [`Program::fill_region`] always through the evaluator (tests compare it with the
    /// fused single-source dispatch).
    ///
    /// # Errors
    /// As [`Program::fill_region`].
    pub fn fill_region_evaluated(
        &self,
        key64: u64,
        global_shape: &[u64],
        region: &Region,
        out: OutBuf<'_>,
        threads: Threads,
    ) -> Result<(), Error> {
        let compiled = self.compile(key64, global_shape, out.dtype(), None)?;
        compiled.fill_buffer(region, out, threads)
    }
}
