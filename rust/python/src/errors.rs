//! Mapping of core errors (and panics) to Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::PyErr;
use shardinit_core::Error;

create_exception!(
    shardinit,
    ShardInitError,
    PyValueError,
    "Invalid input to shardinit (a ValueError): the message names the argument."
);
create_exception!(
    shardinit,
    ShapeTooLargeError,
    ShardInitError,
    "The global shape has more elements than stream format v1 can address."
);
create_exception!(
    shardinit,
    InternalError,
    PyRuntimeError,
    "A bug in shardinit (an internal panic), reported instead of aborting the interpreter."
);

/// A core error as the most specific Python exception.
pub fn to_py_err(error: Error) -> PyErr {
    match error {
        Error::ShapeTooLarge { .. } => ShapeTooLargeError::new_err(error.to_string()),
        // Not a bad value: the machine refused a resource; the Python API sets the count.
        Error::ThreadPool { .. } => PyRuntimeError::new_err(format!(
            "{error}; lower the count with shardinit.set_num_threads"
        )),
        other => ShardInitError::new_err(other.to_string()),
    }
}

/// Runs `work`, turning a panic into `InternalError` so it never unwinds into Python.
pub fn catch_panic<T>(work: impl FnOnce() -> Result<T, Error>) -> Result<T, PyErr> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(result) => result.map_err(to_py_err),
        Err(payload) => Err(internal_error(payload.as_ref())),
    }
}

/// The `InternalError` of a panic's payload (a thread's, or `catch_unwind`'s).
pub fn internal_error(payload: &(dyn std::any::Any + Send)) -> PyErr {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    InternalError::new_err(format!(
        "internal error in shardinit (please report): {message}"
    ))
}
