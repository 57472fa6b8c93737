//! Typed arguments of the boundary: initializers are parsed once into the core's
//! [`Init`] (validated when built), never passed as a kind string plus positional floats.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use shardinit_core::Init;

use crate::errors::to_py_err;

/// A validated base initializer of stream-format.md §4, as the core holds it.
#[pyclass(frozen, eq, name = "Init", module = "shardinit._core")]
#[derive(Clone, Copy, PartialEq)]
pub struct PyInit(pub Init);

impl PyInit {
    fn checked(init: Init) -> PyResult<PyInit> {
        init.validate().map_err(to_py_err)?;
        Ok(PyInit(init))
    }
}

#[pymethods]
impl PyInit {
    /// Every element equal to `value` (consumes no stream words).
    #[staticmethod]
    fn constant(value: f64) -> PyResult<PyInit> {
        PyInit::checked(Init::Constant { value })
    }

    /// Uniform on [a, b).
    #[staticmethod]
    fn uniform(a: f64, b: f64) -> PyResult<PyInit> {
        PyInit::checked(Init::Uniform { a, b })
    }

    /// Normal(mean, std), std >= 0.
    #[staticmethod]
    fn normal(mean: f64, std: f64) -> PyResult<PyInit> {
        PyInit::checked(Init::Normal { mean, std })
    }

    /// Normal(mean, std) truncated to [a, b], std > 0.
    #[staticmethod]
    fn trunc_normal(mean: f64, std: f64, a: f64, b: f64) -> PyResult<PyInit> {
        PyInit::checked(Init::TruncNormal { mean, std, a, b })
    }

    fn __repr__(&self) -> String {
        format!("<shardinit._core.Init {:?}>", self.0)
    }
}

/// The per-parameter constants the core's sampler for `init` precomputes, by name, to
/// the bit (see `shardinit_core::Sampler::constants`): a GPU kernel takes them from
/// here instead of recomputing them.
#[pyfunction]
pub fn sampler_constants<'py>(py: Python<'py>, init: &PyInit) -> PyResult<Bound<'py, PyDict>> {
    let sampler = init.0.prepare().map_err(to_py_err)?;
    let constants = PyDict::new(py);
    for (name, value) in sampler.constants() {
        constants.set_item(name, value)?;
    }
    Ok(constants)
}
