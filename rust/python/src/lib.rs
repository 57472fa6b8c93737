//! `shardinit._core`: the thin PyO3 layer over `shardinit-core`.
//!
//! It only parses arguments into the core's types ([`types`]: the dtype, the
//! initializer, the region), releases the GIL around O(n) work, writes straight into
//! the caller's buffer ([`buffers`]; a second fill of memory being written is refused,
//! [`inflight`]), and maps core errors to specific Python exceptions ([`errors`]). All
//! validation that needs torch happens in the Python package.

mod buffers;
mod errors;
mod fill;
mod fingerprint;
mod inflight;
mod program;
mod stream;
mod types;

use pyo3::prelude::*;

/// The extension module. Every function releases the GIL for its O(n) part.
#[pymodule(gil_used = false)]
mod _core {
    #[pymodule_export]
    use crate::errors::{InternalError, ShapeTooLargeError, ShardInitError};
    #[pymodule_export]
    use crate::fill::{fill, start_fills, PyStartedFills};
    #[pymodule_export]
    use crate::fingerprint::flat_range_term;
    #[pymodule_export]
    use crate::program::{fill_program, PyProgram};
    #[pymodule_export]
    use crate::stream::{chunk_range, key64, panic_for_test, phi, phi_inv, stream_words};
    #[pymodule_export]
    use crate::types::{sampler_constants, PyInit, PyRegion};

    /// Output elements per unit of parallel work: a fill of at most this many elements
    /// runs on the calling thread, whatever `threads` it is given.
    #[pymodule_export]
    const CHUNK_ELEMENTS: usize = shardinit_core::CHUNK_ELEMENTS;

    /// Version of the stream format this build implements (stream format v1).
    #[pymodule_export]
    const STREAM_FORMAT_VERSION: u32 = crate::stream::STREAM_FORMAT_VERSION;

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(module: &Bound<'_, PyModule>) -> PyResult<()> {
        module.add("__version__", env!("CARGO_PKG_VERSION"))?;
        module.add("backend", shardinit_core::Backend::detect().name())?;
        let py = module.py();
        use shardinit_core::math::{LOG_CONSTANTS, PHI_INV_CONSTANTS};
        module.add(
            "LOG_CONSTANTS",
            crate::stream::constant_table(py, &LOG_CONSTANTS)?,
        )?;
        module.add(
            "PHI_INV_CONSTANTS",
            crate::stream::constant_table(py, &PHI_INV_CONSTANTS)?,
        )?;
        use pyo3::types::PyTuple;
        module.add("UNARY_OPS", PyTuple::new(py, crate::program::unary_ops())?)?;
        module.add(
            "BINARY_OPS",
            PyTuple::new(py, crate::program::binary_ops())?,
        )?;
        Ok(())
    }
}
