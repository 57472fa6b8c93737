//! The one error type of the core.

use std::fmt;

/// Everything the core can refuse. Each variant names the offending argument so the
/// bindings can raise a specific exception with a clear message. The messages name the
/// core's own arguments and limits only: how a caller's API sets them (a cap, a thread
/// count) is for that API's layer to add.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The parameter name is empty.
    EmptyName,
    /// An initializer parameter is NaN or infinite.
    NonFinite {
        /// Name of the initializer argument (`"mean"`, `"std"`, `"a"`, ...).
        arg: &'static str,
        /// The value given.
        value: f64,
    },
    /// A standard deviation is negative.
    NegativeStd {
        /// The value given.
        std: f64,
    },
    /// A standard deviation that must be positive (trunc_normal's) is zero or negative.
    NonPositiveStd {
        /// The value given.
        std: f64,
    },
    /// An interval `[a, b]` (uniform or truncation bounds) is empty or reversed.
    EmptyInterval {
        /// Lower bound given.
        a: f64,
        /// Upper bound given.
        b: f64,
    },
    /// The number of elements of the global shape does not fit the stream's 64-bit
    /// word positions (2^64 - 1 elements for one-word dtypes, 2^63 for float64).
    ShapeTooLarge {
        /// The global shape given.
        global_shape: Vec<u64>,
        /// Largest element count allowed for this dtype.
        max_numel: u128,
    },
    /// A box has the wrong number of dimensions.
    BoxRankMismatch {
        /// Dimensions of the box.
        box_dims: usize,
        /// Dimensions of the global shape.
        shape_dims: usize,
    },
    /// A box range is reversed or exceeds the global shape.
    BoxOutOfBounds {
        /// The dimension.
        dim: usize,
        /// Range start.
        start: u64,
        /// Range stop (exclusive).
        stop: u64,
        /// Size of the global shape along `dim`.
        size: u64,
    },
    /// A flat element range exceeds the global number of elements.
    RangeOutOfBounds {
        /// First element.
        start: u64,
        /// Number of elements requested.
        len: u64,
        /// Global number of elements.
        numel: u64,
    },
    /// The output buffer has the wrong number of elements.
    OutputSizeMismatch {
        /// Elements the region holds.
        expected: u64,
        /// Elements the buffer holds.
        got: u64,
    },
    /// The operating system refused to start the requested worker threads.
    ThreadPool {
        /// Threads requested.
        threads: usize,
        /// What the thread-pool builder reported.
        reason: String,
    },
    /// An orthogonal initializer's parameter has more elements than its cap (the caller's,
    /// [`crate::Init::Orthogonal`]'s `max_numel`): every rank would hold the whole matrix
    /// in binary64.
    OrthogonalTooLarge {
        /// The global shape.
        global_shape: Vec<u64>,
        /// Its number of elements.
        numel: u64,
        /// The cap (`0`: the working matrix could not be allocated).
        max_numel: u64,
    },
    /// An orthogonal initializer's parameter has fewer than 2 dims.
    OrthogonalShape {
        /// The global shape.
        global_shape: Vec<u64>,
    },
    /// The initializer has no per-element sampler (orthogonal: each value depends on the
    /// whole matrix).
    NoSampler {
        /// The initializer's name.
        init: &'static str,
    },
    /// `rank`/`world`/`dim` arguments of a chunked shard are out of range.
    InvalidShard {
        /// Which argument (`"rank"`, `"world"`, `"dim"`).
        arg: &'static str,
        /// The value given.
        value: u64,
        /// Description of the allowed range.
        allowed: String,
    },
    /// A name argument (an operation) is not one of the allowed names.
    UnknownName {
        /// Which argument (`"op"`).
        arg: &'static str,
        /// The name given.
        got: String,
        /// Every allowed name.
        allowed: Vec<&'static str>,
    },
    /// An init program operand is not an earlier register.
    BadRegister {
        /// Which argument (`"x"`, `"a"`, `"b"`, `"cond"`).
        arg: &'static str,
        /// The register given.
        value: i128,
        /// Registers the program had.
        len: usize,
    },
    /// An init program's `coord` dim is negative or not a dim of the global shape.
    CoordDim {
        /// The dim given.
        dim: i64,
        /// Dims of the global shape (`None`: negative, refused before any shape).
        dims: Option<usize>,
    },
    /// An init program's table has not one stride per dim of the global shape.
    TableRank {
        /// Strides given.
        strides: usize,
        /// Dims of the global shape.
        dims: usize,
    },
    /// An init program's table is indexed outside its values over the global shape.
    TableOutOfBounds {
        /// Lowest index reached.
        low: i128,
        /// Highest index reached.
        high: i128,
        /// Number of values.
        len: usize,
    },
    /// An init program has no registers.
    EmptyProgram,
    /// `sin` or `cos` of an argument beyond the exactly reduced range.
    TrigArgument {
        /// `"sin"` or `"cos"`.
        op: &'static str,
        /// The argument.
        value: f64,
        /// The largest magnitude allowed ([`crate::math::TRIG_MAX`]).
        limit: f64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EmptyName => write!(f, "name must be a non-empty string"),
            Error::NonFinite { arg, value } => {
                write!(f, "{arg} must be a finite number, got {value}")
            }
            Error::NegativeStd { std } => write!(f, "std must be >= 0, got {std}"),
            Error::NonPositiveStd { std } => write!(f, "std must be > 0, got {std}"),
            Error::EmptyInterval { a, b } => {
                write!(f, "a must be < b, got a={a}, b={b}")
            }
            Error::ShapeTooLarge {
                global_shape,
                max_numel,
            } => write!(
                f,
                "shape {global_shape:?} has more elements than stream format v1 can \
                 address for this dtype (at most {max_numel})"
            ),
            Error::BoxRankMismatch {
                box_dims,
                shape_dims,
            } => write!(
                f,
                "box has {box_dims} (start, stop) pairs but the shape has {shape_dims} dims"
            ),
            Error::BoxOutOfBounds {
                dim,
                start,
                stop,
                size,
            } => write!(
                f,
                "box[{dim}] = ({start}, {stop}) must satisfy 0 <= start <= stop <= {size}"
            ),
            Error::RangeOutOfBounds { start, len, numel } => write!(
                f,
                "element range [{start}, {start} + {len}) exceeds the {numel} elements of \
                 the shape"
            ),
            Error::OutputSizeMismatch { expected, got } => {
                write!(f, "out has {got} elements but the region has {expected}")
            }
            Error::ThreadPool { threads, reason } => {
                write!(f, "could not start {threads} worker threads ({reason})")
            }
            Error::OrthogonalTooLarge {
                global_shape,
                numel,
                max_numel: 0,
            } => write!(
                f,
                "orthogonal init of shape {global_shape:?}: the {numel}-element binary64 \
                 working matrix could not be allocated"
            ),
            Error::OrthogonalTooLarge {
                global_shape,
                numel,
                max_numel,
            } => write!(
                f,
                "orthogonal init of shape {global_shape:?} has {numel} elements, above the \
                 cap of {max_numel} (every rank computes the whole matrix in binary64, 8 \
                 bytes per element)"
            ),
            Error::OrthogonalShape { global_shape } => write!(
                f,
                "orthogonal init needs a shape with at least 2 dims, got {global_shape:?}"
            ),
            Error::NoSampler { init } => write!(
                f,
                "{init} has no per-element sampler: its values depend on the whole matrix"
            ),
            Error::InvalidShard {
                arg,
                value,
                allowed,
            } => {
                write!(f, "{arg} must be {allowed}, got {value}")
            }
            Error::UnknownName { arg, got, allowed } => {
                let allowed: Vec<String> = allowed.iter().map(|n| format!("'{n}'")).collect();
                write!(
                    f,
                    "{arg} must be one of {}, got '{got}'",
                    allowed.join(", ")
                )
            }
            Error::BadRegister { arg, value, len } => write!(
                f,
                "{arg} must be an earlier register of the program (0 <= {arg} < {len}), got \
                 {value}"
            ),
            Error::CoordDim { dim, dims: None } => {
                write!(f, "dim must be >= 0, got {dim}")
            }
            Error::CoordDim {
                dim,
                dims: Some(dims),
            } => write!(
                f,
                "coord dim must be < {dims}, the dims of the global shape, got {dim}"
            ),
            Error::TableRank { strides, dims } => write!(
                f,
                "table strides must have one entry per dim of the global shape ({dims}), got \
                 {strides}"
            ),
            Error::TableOutOfBounds { low, high, len } => write!(
                f,
                "table indices over the global shape range over [{low}, {high}] but values \
                 has {len} elements"
            ),
            Error::EmptyProgram => write!(
                f,
                "program has no registers (its last register is the value to fill)"
            ),
            Error::TrigArgument { op, value, limit } => write!(
                f,
                "{op} argument must satisfy |x| <= {limit} (2^20 * pi/2, the range reduced \
                 exactly), got {value}"
            ),
        }
    }
}

impl std::error::Error for Error {}
