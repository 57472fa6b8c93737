//! The inverse error function of init programs (stream-format.md §7): one reference and
//! two fast paths, each fast path proven to give the reference's bits.
//!
//! * [`reference`](mod@reference): **the definition of the bits.** AS 241's start refined by one Newton
//!   step whose residual `erf(y0) - a` is a double-double from `erf`'s Maclaurin series
//!   (`erfc` in the far tail); within 1 ulp. `erfinv_series` is this function, and
//!   nothing but the fast paths' fallbacks and the tests call it.
//! * [`fast`]: **[`erfinv`] itself** (the scalar function [`erfinv`](fn@crate::math::erfinv) and its
//!   slices, `erfinv_slice`): the same Newton step with the residual from a Taylor table,
//!   taken only where a proven error bound shows that the result rounds to the
//!   reference's bits (Ziv's strategy), else the reference. The proof is the module
//!   docs of [`fast`]; the sweep `exhaustive_fast_path_gives_the_series_bits_for_every_float32_input`
//!   checks it against the reference for every float32 argument (`make test-slow`).
//! * [`fast_f32`]: `erfinv` rounded to float32 for float32 arguments (a program's
//!   `erfinv` seen only through that rounding), from a start good to `2^-40` without the
//!   Newton step where no float32 midpoint lies within the start's error, else
//!   [`erfinv`]. The proof is the module docs of [`fast_f32`]; a sweep over every float32
//!   checks the start's bound (`make test-slow`).
//!
//! Every backend's lanes of the fast paths give the scalar code's bits
//! ([`crate::math::lane_primitives`]); `rust/core/tests/slices.rs` compares the slices
//! with the scalar function.

mod fast;
mod fast_f32;
mod reference;

pub use fast::{erfinv, erfinv_slice, erfinv_slice_with};
pub use fast_f32::{erfinv_f32_slice, erfinv_f32_slice_with};
