//! Shard geometry: every region equals the matching part of the full tensor, for every
//! dtype, initializer, thread count and split (proptest).

use half::{bf16, f16};
use proptest::prelude::*;
use shardinit_core::{chunk_range, Element, Init, ParamStream, Stream, Threads};

fn inits() -> Vec<Init> {
    vec![
        Init::Constant { value: 0.25 },
        Init::Uniform { a: -0.5, b: 2.0 },
        Init::Normal {
            mean: 0.1,
            std: 0.02,
        },
        Init::TruncNormal {
            mean: 0.0,
            std: 1.0,
            a: -2.0,
            b: 2.0,
        },
    ]
}

fn full<T: Element + Default>(param: &ParamStream) -> Vec<T> {
    let numel: u64 = param.global_shape.iter().product();
    let mut out = vec![T::default(); numel as usize];
    param.fill_flat(0, &mut out, Threads::Count(1)).unwrap();
    out
}

/// The elements of `region` taken from a full C-order tensor, in C order.
fn slice_of<T: Copy>(full: &[T], shape: &[u64], region: &[(u64, u64)]) -> Vec<T> {
    let mut out = Vec::new();
    let dims = shape.len();
    if region.iter().any(|&(a, b)| a == b) {
        return out;
    }
    let mut index: Vec<u64> = region.iter().map(|&(a, _)| a).collect();
    loop {
        let mut flat = 0u64;
        for d in 0..dims {
            flat = flat * shape[d] + index[d];
        }
        out.push(full[flat as usize]);
        // Odometer over the region.
        let mut d = dims;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < region[d].1 {
                break;
            }
            index[d] = region[d].0;
        }
    }
}

fn check_region<T: Element + Default + PartialEq + std::fmt::Debug>(
    param: &ParamStream,
    region: &[(u64, u64)],
    threads: Threads,
) {
    let whole = full::<T>(param);
    let expected = slice_of(&whole, &param.global_shape, region);
    let mut got = vec![T::default(); expected.len()];
    param.fill_box(region, &mut got, threads).unwrap();
    assert_eq!(got, expected, "{param:?} {region:?}");
    // The same box streamed through a small buffer in pieces (the CUDA path).
    let piece = 7;
    let mut pieces = vec![T::default(); expected.len()];
    for (i, chunk) in pieces.chunks_mut(piece).enumerate() {
        param
            .fill_box_part(region, (i * piece) as u64, chunk, threads)
            .unwrap();
    }
    assert_eq!(pieces, expected);
}

fn shape_and_region() -> impl Strategy<Value = (Vec<u64>, Vec<(u64, u64)>)> {
    prop::collection::vec(0u64..7, 0..5).prop_flat_map(|shape| {
        let ranges: Vec<_> = shape
            .iter()
            .map(|&size| (0..=size).prop_flat_map(move |a| (Just(a), a..=size)))
            .collect();
        (Just(shape), ranges)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn boxes_equal_slices_of_full((shape, region) in shape_and_region(), key in any::<u64>(),
                                  which in 0usize..4, dtype in 0usize..4) {
        let param = ParamStream { key64: key, global_shape: shape, init: inits()[which] };
        match dtype {
            0 => check_region::<f32>(&param, &region, Threads::Count(1)),
            1 => check_region::<f64>(&param, &region, Threads::Count(1)),
            2 => check_region::<bf16>(&param, &region, Threads::Count(1)),
            _ => check_region::<f16>(&param, &region, Threads::Count(1)),
        }
    }

    #[test]
    fn flat_ranges_equal_slices_of_full(numel in 0u64..300, a in 0u64..300, b in 0u64..300,
                                        key in any::<u64>(), which in 0usize..4) {
        let (start, stop) = (a.min(b).min(numel), a.max(b).min(numel));
        let param = ParamStream { key64: key, global_shape: vec![numel], init: inits()[which] };
        let whole = full::<f32>(&param);
        let mut got = vec![0f32; (stop - start) as usize];
        param.fill_flat(start, &mut got, Threads::Count(1)).unwrap();
        prop_assert_eq!(&got[..], &whole[start as usize..stop as usize]);
        let whole64 = full::<f64>(&param);
        let mut got64 = vec![0f64; (stop - start) as usize];
        param.fill_flat(start, &mut got64, Threads::Count(1)).unwrap();
        prop_assert_eq!(&got64[..], &whole64[start as usize..stop as usize]);
    }

    #[test]
    fn chunks_tile_the_dimension(size in 0u64..1000, world in 1u64..70) {
        let mut next = 0;
        let chunk = size.div_ceil(world);
        for rank in 0..world {
            let (start, stop) = chunk_range(size, rank, world).unwrap();
            prop_assert_eq!(start, next);
            prop_assert!(stop - start <= chunk);
            next = stop;
        }
        prop_assert_eq!(next, size);
    }
}

#[test]
fn shards_for_every_world_and_dim_equal_full() {
    let shape = vec![7u64, 5, 3];
    for init in inits() {
        let param = ParamStream {
            key64: 99,
            global_shape: shape.clone(),
            init,
        };
        for world in 1..=9 {
            for dim in 0..3 {
                for rank in 0..world {
                    let (start, stop) = chunk_range(shape[dim], rank, world).unwrap();
                    let mut region: Vec<(u64, u64)> = shape.iter().map(|&s| (0, s)).collect();
                    region[dim] = (start, stop);
                    check_region::<f32>(&param, &region, Threads::Count(1));
                }
            }
        }
    }
}

#[test]
fn thread_count_never_changes_the_bits() {
    // Several chunks' worth so the parallel path really splits the work.
    let param = ParamStream {
        key64: 7,
        global_shape: vec![301, 1013],
        init: Init::TruncNormal {
            mean: 0.0,
            std: 0.02,
            a: -0.04,
            b: 0.04,
        },
    };
    let region = [(3u64, 290u64), (11u64, 1000u64)];
    let n = 287 * 989;
    let mut one = vec![0f32; n];
    let mut two = vec![0f32; n];
    let mut all = vec![0f32; n];
    param
        .fill_box(&region, &mut one, Threads::Count(1))
        .unwrap();
    param
        .fill_box(&region, &mut two, Threads::Count(2))
        .unwrap();
    param.fill_box(&region, &mut all, Threads::All).unwrap();
    assert_eq!(one, two);
    assert_eq!(one, all);
}

#[test]
fn uniform_elements_follow_the_spec_formula_at_far_offsets() {
    // A 2^62-element virtual tensor: only the last few elements are generated.
    let key = 0x47a9_4443_d83c_cf19;
    let param = ParamStream {
        key64: key,
        global_shape: vec![1 << 31, 1 << 31],
        init: Init::Uniform { a: -1.0, b: 3.0 },
    };
    let region = [((1 << 31) - 1, 1 << 31), ((1 << 31) - 6, 1 << 31)];
    let mut got = vec![0f32; 6];
    param.fill_box(&region, &mut got, Threads::All).unwrap();
    let stream = Stream::new(key);
    for (k, value) in got.iter().enumerate() {
        let index = (1u64 << 62) - 6 + k as u64;
        let word = stream.word(index);
        let expected = (-1.0 + 4.0 * (f64::from(word >> 8) * 2f64.powi(-24))) as f32;
        assert_eq!(*value, expected, "element {index}");
    }
}

#[test]
fn spec_golden_element_values() {
    // stream-format.md §6: seed 0, name "w", elements 0..3.
    let key = shardinit_core::key64(0, "w").unwrap();
    let uniform = ParamStream {
        key64: key,
        global_shape: vec![4],
        init: Init::Uniform { a: 0.0, b: 1.0 },
    };
    let normal = ParamStream {
        key64: key,
        global_shape: vec![4],
        init: Init::Normal {
            mean: 0.0,
            std: 1.0,
        },
    };
    let u = full::<f32>(&uniform);
    assert_eq!(u, [0.171_050_73, 0.979_664_27, 0.212_695_6, 0.708_700_4]);
    let n = full::<f32>(&normal);
    let bits: Vec<u32> = n.iter().map(|x| x.to_bits()).collect();
    assert_eq!(bits, [0xbf73_3495, 0x4002_ffd6, 0xbf4c_0ef0, 0x3f0c_b212]);
    let n64 = full::<f64>(&normal);
    let golden: [f64; 4] = [
        -0.950_021_076_179_305_2,
        -0.797_102_890_239_395_7,
        -1.439_876_477_938_700_5,
        0.478_859_767_398_901_1,
    ];
    for (got, want) in n64.iter().zip(golden) {
        // "exact values correctly rounded; an implementation may differ in the last bits"
        let ulps = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs();
        assert!(ulps <= 4, "{got} vs {want}: {ulps} ulp");
    }
}

#[test]
fn errors_name_the_problem() {
    let param = ParamStream {
        key64: 1,
        global_shape: vec![4, 4],
        init: Init::Normal {
            mean: 0.0,
            std: 1.0,
        },
    };
    let mut out = vec![0f32; 3];
    let err = param
        .fill_box(&[(0, 2), (0, 2)], &mut out, Threads::All)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("out has 3 elements but the region has 4"),
        "{err}"
    );
    let err = param
        .fill_box(&[(0, 5), (0, 2)], &mut out, Threads::All)
        .unwrap_err();
    assert!(err.to_string().contains("box[0] = (0, 5)"), "{err}");
    let err = param
        .fill_box(&[(0, 2)], &mut out, Threads::All)
        .unwrap_err();
    assert!(err.to_string().contains("1 (start, stop) pairs"), "{err}");
    let err = param.fill_flat(15, &mut out, Threads::All).unwrap_err();
    assert!(err.to_string().contains("exceeds the 16 elements"), "{err}");
    let huge = ParamStream {
        key64: 1,
        global_shape: vec![1 << 32, 1 << 32],
        init: Init::Constant { value: 0.0 },
    };
    let err = huge.fill_flat(0, &mut out, Threads::All).unwrap_err();
    assert!(
        err.to_string()
            .contains("more elements than stream format v1"),
        "{err}"
    );
    let half_huge = ParamStream {
        key64: 1,
        global_shape: vec![1 << 32, 1 << 31],
        init: Init::Constant { value: 0.0 },
    };
    let mut out64 = vec![0f64; 3];
    assert!(half_huge.fill_flat(0, &mut out64, Threads::All).is_ok());
    let over = ParamStream {
        key64: 1,
        global_shape: vec![1 << 32, (1 << 31) + 1],
        init: Init::Constant { value: 0.0 },
    };
    assert!(over.fill_flat(0, &mut out64, Threads::All).is_err());
    assert!(over.fill_flat(0, &mut out, Threads::All).is_ok());
}
