#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod batch;
mod error;
pub mod fill;
pub mod fingerprint;
pub mod geometry;
pub mod init;
mod kernel;
mod key;
pub mod math;
pub mod orthogonal;
pub mod philox;
pub mod pool;
pub mod program;
pub mod region;
mod serial;
mod table;

pub use batch::{fill_many, FillJob, JobValues};
pub use error::Error;
pub use fill::ParamStream;
pub use geometry::{box_numel, checked_numel, chunk_range};
pub use init::{Dtype, Element, Init, OutBuf, Sampler};
pub use key::{key64, KEY_DOMAIN_V1};
pub use orthogonal::OrthogonalMatrix;
pub use philox::{philox4x32_10, Backend, Stream};
pub use pool::{Threads, CHUNK_ELEMENTS};
pub use program::{BinaryOp, Program, UnaryOp};
pub use region::Region;
