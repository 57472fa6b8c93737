//! Typed arguments of the boundary, each parsed once into a core type: the dtype from
//! its name (strictly: anything unknown is an error), the initializer and the region
//! as small classes built by named constructors, never a kind string plus positional
//! floats.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use shardinit_core::{Dtype, Init, Region};

use crate::errors::{to_py_err, ShardInitError};

/// A `dtype` argument: one of the names of [`Dtype::name`], nothing else.
pub struct DtypeArg(pub Dtype);

impl<'a, 'py> FromPyObject<'a, 'py> for DtypeArg {
    type Error = PyErr;

    fn extract(object: Borrowed<'a, 'py, PyAny>) -> PyResult<DtypeArg> {
        let name: String = object.extract()?;
        Dtype::from_name(&name).map(DtypeArg).ok_or_else(|| {
            let allowed: Vec<_> = Dtype::ALL
                .iter()
                .map(|dtype| format!("'{}'", dtype.name()))
                .collect();
            ShardInitError::new_err(format!(
                "dtype must be one of {}, got '{name}'",
                allowed.join(", ")
            ))
        })
    }
}

/// A region of a parameter's global tensor (see `shardinit_core::Region`).
#[pyclass(frozen, eq, name = "Region", module = "shardinit._core")]
#[derive(Clone, PartialEq)]
pub struct PyRegion(pub Region);

#[pymethods]
impl PyRegion {
    /// The box `ranges` (one `(start, stop)` per dim) in C order: all of it when
    /// `offset` is None, else its elements `[offset, offset + len(out))`.
    #[staticmethod]
    #[pyo3(name = "box", signature = (ranges, offset = None))]
    fn box_(ranges: Vec<(u64, u64)>, offset: Option<u64>) -> PyRegion {
        PyRegion(Region::Box { ranges, offset })
    }

    /// Flat elements `[start, start + len(out))` of the row-major flattened tensor.
    #[staticmethod]
    fn flat(start: u64) -> PyRegion {
        PyRegion(Region::Flat { start })
    }

    fn __repr__(&self) -> String {
        format!("<shardinit._core.Region {:?}>", self.0)
    }
}

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

    /// torch's orthogonal_ times `gain` (finite), for parameters of at most
    /// `max_numel` elements (checked at fill time against the global shape).
    #[staticmethod]
    fn orthogonal(gain: f64, max_numel: u64) -> PyResult<PyInit> {
        PyInit::checked(Init::Orthogonal { gain, max_numel })
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
