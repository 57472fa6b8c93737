//! Every backend (the SIMD paths and the portable lane code) equals the scalar
//! reference bit for bit, and one thread equals all threads: random keys, starts
//! mid-block, lengths that are not multiples of a batch, every dtype and initializer,
//! including trunc_normal intervals that drive the inverse CDF through each of its
//! branches (central, `r <= 5` tail, `r > 5` tail, `log`'s special cases).
//!
//! Backends this CPU lacks are skipped, and the test prints which ones ran.

use half::{bf16, f16};
use proptest::prelude::*;
use shardinit_core::{Backend, Element, Init, ParamStream, Threads};

fn inits() -> Vec<Init> {
    let trunc = |mean: f64, std: f64, a: f64, b: f64| Init::TruncNormal { mean, std, a, b };
    vec![
        Init::Constant { value: -0.75 },
        Init::Uniform { a: -0.5, b: 2.0 },
        Init::Uniform {
            a: -0.03125,
            b: 0.03125,
        },
        Init::Normal {
            mean: 0.1,
            std: 0.02,
        },
        Init::Normal {
            mean: 0.0,
            std: 1.0,
        },
        // Overflow: `b - a` is infinite, so `U24 = 0` gives inf * 0 = NaN (the 16-bit
        // roundings' NaN handling must stay on); `std * x` overflows to infinities.
        Init::Uniform {
            a: -f64::MAX,
            b: f64::MAX,
        },
        Init::Normal {
            mean: 0.0,
            std: f64::MAX,
        },
        // `width * 2^-24` subnormal: the kernel's one-multiplication uniform is off.
        Init::Uniform { a: 0.0, b: 1e-301 },
        trunc(0.0, 0.02, -0.04, 0.04),
        trunc(0.0, 1.0, -2.0, 2.0),
        // Far in the upper tail: computed through the complement.
        trunc(0.0, 1.0, 5.0, 5.5),
        trunc(0.0, 1.0, 8.0, 40.0),
        // Far in the lower tail: r = sqrt(-log(p)) > 5 for every element.
        trunc(0.0, 1.0, -9.0, -8.0),
        trunc(1.0, 3.0, -30.0, -29.0),
        // t within 2^-20 of 2^-5: log's |f| < 2^-20 branch on many elements.
        trunc(0.0, 1.0, -1.862_735, -1.862_725),
        // Straddling the mean, one-sided.
        trunc(0.0, 1.0, -0.1, 1e-9),
        trunc(0.0, 1.0, -1e-9, 0.1),
    ]
}

fn backends() -> Vec<Backend> {
    let available = Backend::available();
    for backend in [Backend::Avx2, Backend::Avx2PhiloxAvx512Lanes] {
        if !available.contains(&backend) {
            eprintln!("note: this CPU has no {backend:?}; that backend is not tested here");
        }
    }
    available
}

fn bits<T: Element>(values: &[T]) -> Vec<u64> {
    values
        .iter()
        .map(|v| {
            // Compare bit patterns, not values (NaN, signed zero).
            let size = std::mem::size_of::<T>();
            let mut word = 0u64;
            // SAFETY: `v` points at a live `T` of `size` bytes (2, 4 or 8), and every
            // bit pattern of those types is a valid byte sequence to read.
            let bytes = unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size) };
            for (i, &b) in bytes.iter().enumerate() {
                word |= u64::from(b) << (8 * i);
            }
            word
        })
        .collect()
}

/// Fills `[start, start + len)` with every backend and thread count and compares
/// against the scalar reference on one thread.
fn check_flat<T: Element>(param: &ParamStream, start: u64, len: usize) {
    let zero = T::from_f64(0.0);
    let mut reference = vec![zero; len];
    param
        .fill_flat_using(Backend::Scalar, start, &mut reference, Threads::Count(1))
        .unwrap();
    let reference = bits(&reference);
    for backend in backends() {
        for threads in [Threads::Count(1), Threads::Count(3), Threads::All] {
            let mut got = vec![zero; len];
            param
                .fill_flat_using(backend, start, &mut got, threads)
                .unwrap();
            let got = bits(&got);
            if got != reference {
                let first = got.iter().zip(&reference).position(|(a, b)| a != b);
                panic!(
                    "{backend:?} {threads:?} {:?} {param:?} start {start} len {len}: first \
                     difference at {first:?}",
                    T::DTYPE
                );
            }
        }
    }
    // The default entry point is one of the above.
    let mut got = vec![zero; len];
    param.fill_flat(start, &mut got, Threads::All).unwrap();
    assert_eq!(bits(&got), reference);
}

fn check_all_dtypes(param: &ParamStream, start: u64, len: usize) {
    check_flat::<f32>(param, start, len);
    check_flat::<f64>(param, start, len);
    check_flat::<bf16>(param, start, len);
    check_flat::<f16>(param, start, len);
}

#[test]
fn every_backend_equals_the_scalar_reference_on_fixed_cases() {
    for (which, init) in inits().into_iter().enumerate() {
        let param = ParamStream {
            key64: 0x47a9_4443_d83c_cf19 ^ which as u64,
            global_shape: vec![1 << 20],
            init,
        };
        for (start, len) in [
            (0, 0),
            (0, 1),
            (3, 1),
            (1, 5),
            (5, 63),
            (7, 64),
            (0, 64),
            (2, 129),
            (61, 4099),
            (1000, 70_001), // crosses a chunk boundary
        ] {
            check_all_dtypes(&param, start, len);
        }
    }
}

#[test]
fn every_backend_equals_the_scalar_reference_near_the_end_of_the_word_space() {
    // Word positions near 2^64 and across the 2^32-block carry.
    let init = Init::Normal {
        mean: 0.0,
        std: 1.0,
    };
    let param = ParamStream {
        key64: 0x6b59_ead9_09d7_045b,
        global_shape: vec![u64::MAX],
        init,
    };
    for start in [u64::MAX - 200, (1u64 << 34) - 101] {
        check_flat::<f32>(&param, start, 200);
        check_flat::<bf16>(&param, start, 200);
    }
    let param64 = ParamStream {
        key64: 0x6b59_ead9_09d7_045b,
        global_shape: vec![1u64 << 63],
        init,
    };
    for start in [(1u64 << 63) - 150, (1u64 << 33) - 51] {
        check_flat::<f64>(&param64, start, 150);
    }
}

#[test]
fn boxes_agree_across_backends() {
    for init in inits() {
        let param = ParamStream {
            key64: 99,
            global_shape: vec![37, 41, 9],
            init,
        };
        let region = [(3, 30), (5, 40), (1, 8)];
        let len = 27 * 35 * 7;
        let mut reference = vec![0f32; len];
        param
            .fill_box_part_using(
                Backend::Scalar,
                &region,
                0,
                &mut reference,
                Threads::Count(1),
            )
            .unwrap();
        for backend in backends() {
            let mut got = vec![0f32; len];
            param
                .fill_box_part_using(backend, &region, 0, &mut got, Threads::All)
                .unwrap();
            assert_eq!(bits(&got), bits(&reference), "{backend:?} {init:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_ranges_equal_the_scalar_reference(key in any::<u64>(), which in 0usize..17,
                                               start in 0u64..5000, len in 0usize..700,
                                               mean in -2.0f64..2.0, std in 0.001f64..3.0) {
        let init = match inits()[which] {
            Init::Normal { .. } => Init::Normal { mean, std },
            other => other,
        };
        let param = ParamStream { key64: key, global_shape: vec![6000], init };
        check_all_dtypes(&param, start, len);
    }
}
