#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod error;
pub mod fill;
pub mod init;
mod kernel;
mod key;
pub mod math;
pub mod philox;

pub use error::Error;
pub use fill::{
    box_numel, checked_numel, chunk_range, OutBuf, ParamStream, Threads, CHUNK_ELEMENTS,
};
pub use init::{Dtype, Element, Init, Sampler};
pub use key::{key64, KEY_DOMAIN_V1};
pub use philox::{philox4x32_10, Backend, Stream};
