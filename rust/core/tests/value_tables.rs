//! Fills through the core's value tables (bfloat16 and float16 normal values looked up by
//! the word's top bits, for fills of 2^20 elements or more and then any fill of the same
//! mean and std: rust/core/src/table.rs) equal the scalar reference, bit for bit. The
//! tables' own tests (every bucket's edges, random words, the exhaustive monotonicity of
//! PhiInv) are next to them.

use half::{bf16, f16};
use shardinit_core::{Backend, Element, Init, ParamStream, Threads};

/// A fill large enough to build a table: 2^20 elements and a few more.
const LEN: usize = (1 << 20) + 77;

/// Bits of each value (`-0` and `+0` differ).
fn bits<T: Element>(values: &[T]) -> Vec<u64> {
    values.iter().map(|v| v.widen().to_bits()).collect()
}

/// From a word in the middle of a block, `LEN` elements; then a box of short rows (which
/// uses the table the large fill built): every batched backend equals the scalar one.
fn fills_equal_the_reference<T: Element>(param: &ParamStream) {
    let fill = |backend: Backend| {
        let mut out = vec![T::from_f64(0.0); LEN];
        param
            .fill_flat_using(backend, 5, &mut out, Threads::Count(2))
            .unwrap();
        bits(&out)
    };
    let rows = |backend: Backend| {
        let region = [(0, 3), (5, 70)];
        let mut out = vec![T::from_f64(0.0); 3 * 65];
        param
            .fill_box_part_using(backend, &region, 0, &mut out, Threads::Count(1))
            .unwrap();
        bits(&out)
    };
    let reference = fill(Backend::Scalar);
    let reference_rows = rows(Backend::Scalar);
    for backend in Backend::available() {
        assert!(fill(backend) == reference, "{backend:?} {:?}", param.init);
        assert!(
            rows(backend) == reference_rows,
            "{backend:?} {:?}",
            param.init
        );
    }
}

#[test]
fn fills_through_value_tables_equal_the_scalar_reference() {
    // The usual init, unit, a nonzero mean, values in the subnormals and at zero (a tiny
    // and a zero std), values that overflow float16 to infinities.
    let normals = [
        (0.0, 0.02),
        (0.0, 1.0),
        (1.0, 0.02),
        (-3.5, 7.0),
        (0.0, 1e-30),
        (-0.0, 0.0),
        (65504.0, 1000.0),
    ];
    for (i, (mean, std)) in normals.into_iter().enumerate() {
        let param = ParamStream {
            key64: 0x5eed_0000 + i as u64,
            global_shape: vec![3, LEN as u64],
            init: Init::Normal { mean, std },
        };
        fills_equal_the_reference::<bf16>(&param);
        fills_equal_the_reference::<f16>(&param);
    }
}
