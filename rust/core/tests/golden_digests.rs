//! Golden digests: SHA-256 of the little-endian bytes of fixed fills, committed as test
//! vectors, so that a change that alters a single bit on any platform, backend or
//! thread count fails loudly. The digests were computed with the scalar reference
//! path (`Backend::Scalar`), the one that follows docs/stream-format.md operation by operation, and
//! every other backend must reproduce them.

use half::{bf16, f16};
use sha2::{Digest, Sha256};
use shardinit_core::{key64, Backend, Element, Init, ParamStream, Threads};

/// Little-endian bytes of a slice of elements.
trait LeBytes: Element {
    fn le_bytes(values: &[Self]) -> Vec<u8>;
}

impl LeBytes for f32 {
    fn le_bytes(values: &[Self]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}
impl LeBytes for f64 {
    fn le_bytes(values: &[Self]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}
impl LeBytes for bf16 {
    fn le_bytes(values: &[Self]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}
impl LeBytes for f16 {
    fn le_bytes(values: &[Self]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
}

/// The cases: (name, shape, initializer). Seed 1234 for all.
fn cases() -> Vec<(&'static str, Vec<u64>, Init)> {
    vec![
        (
            "layers.0.attention.wq.weight",
            vec![257, 389],
            Init::Uniform {
                a: -0.0625,
                b: 0.0625,
            },
        ),
        (
            "layers.0.mlp.w1.weight",
            vec![311, 331],
            Init::Normal {
                mean: 0.0,
                std: 0.02,
            },
        ),
        (
            "tok_embeddings.weight",
            vec![100_003],
            Init::TruncNormal {
                mean: 0.0,
                std: 0.02,
                a: -0.04,
                b: 0.04,
            },
        ),
        (
            "tail.weight",
            vec![4099],
            Init::TruncNormal {
                mean: 0.0,
                std: 1.0,
                a: 5.0,
                b: 9.0,
            },
        ),
        ("norm.weight", vec![1000], Init::Constant { value: 1.0 }),
    ]
}

/// Hex SHA-256 of the box `region` of a case (the whole tensor when `None`).
fn digest<T: LeBytes>(
    backend: Backend,
    threads: Threads,
    name: &str,
    shape: &[u64],
    init: Init,
    region: Option<&[(u64, u64)]>,
) -> String {
    let param = ParamStream {
        key64: key64(1234, name).unwrap(),
        global_shape: shape.to_vec(),
        init,
    };
    let full: Vec<(u64, u64)> = shape.iter().map(|&n| (0, n)).collect();
    let region = region.unwrap_or(&full);
    let numel: u64 = region.iter().map(|&(a, b)| b - a).product();
    let mut out = vec![T::from_f64(0.0); numel as usize];
    param
        .fill_box_part_using(backend, region, 0, &mut out, threads)
        .unwrap();
    let hash = Sha256::digest(T::le_bytes(&out));
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

/// (case index, dtype, first 16 hex digits of the SHA-256 of the whole tensor).
const GOLDEN: &[(usize, &str, &str)] = &[
    (0, "f32", "de9324a2a169b6f0"),
    (0, "f64", "529e78fb6bb4203b"),
    (0, "bf16", "dd9880ed1ea33dfb"),
    (0, "f16", "4f5816ee241a1be7"),
    (1, "f32", "3b25b5a1d84e1b55"),
    (1, "f64", "45fc276bcc4c0d73"),
    (1, "bf16", "804dffcb00355296"),
    (1, "f16", "b5a7c688b0d9e1ff"),
    (2, "f32", "9c4fda87b49e7cb0"),
    (2, "f64", "c6c0ebe97fcf1839"),
    (2, "bf16", "c18e1dac58ba2f99"),
    (2, "f16", "251b5a60fa62a678"),
    (3, "f32", "5164ffc38a2e9f0d"),
    (3, "f64", "b4b6a536b724746a"),
    (3, "bf16", "09689d5b3c38e99a"),
    (3, "f16", "5a43fdde4473ab3a"),
    (4, "f32", "9e504c05d5c0da9e"),
    (4, "f64", "e4190bf93e24bcf8"),
    (4, "bf16", "fedbacf004a65d69"),
    (4, "f16", "58d869fcd5c86978"),
];

fn all_digests(backend: Backend, threads: Threads) -> Vec<(usize, &'static str, String)> {
    let mut out = Vec::new();
    for (i, (name, shape, init)) in cases().into_iter().enumerate() {
        out.push((
            i,
            "f32",
            digest::<f32>(backend, threads, name, &shape, init, None),
        ));
        out.push((
            i,
            "f64",
            digest::<f64>(backend, threads, name, &shape, init, None),
        ));
        out.push((
            i,
            "bf16",
            digest::<bf16>(backend, threads, name, &shape, init, None),
        ));
        out.push((
            i,
            "f16",
            digest::<f16>(backend, threads, name, &shape, init, None),
        ));
    }
    out
}

#[test]
fn golden_digests_of_every_backend() {
    let reference = all_digests(Backend::Scalar, Threads::Count(1));
    if GOLDEN.is_empty() {
        // Printing the table is how it was made: run with `--nocapture` and paste.
        for (i, dtype, hex) in &reference {
            println!("    ({i}, \"{dtype}\", \"{}\"),", &hex[..16]);
        }
        panic!("no golden digests yet");
    }
    assert_eq!(reference.len(), GOLDEN.len());
    for ((i, dtype, hex), &(gi, gdtype, ghex)) in reference.iter().zip(GOLDEN) {
        assert_eq!((*i, *dtype), (gi, gdtype));
        assert_eq!(
            &hex[..16],
            ghex,
            "case {i} {dtype}: the scalar reference changed"
        );
    }
    for backend in Backend::available() {
        for threads in [Threads::Count(1), Threads::All] {
            assert_eq!(
                all_digests(backend, threads),
                reference,
                "{backend:?} {threads:?}"
            );
        }
    }
}

/// The normal case's 16-bit digests once its value tables exist (the core builds them for
/// fills of 2^20 elements or more and keeps them; smaller fills then use them too), for
/// every batched backend: the tables give the golden bits.
#[test]
fn golden_digests_through_the_value_tables() {
    let (name, _, init) = cases().swap_remove(1);
    let large = ParamStream {
        key64: key64(1234, name).unwrap(),
        global_shape: vec![1 << 20],
        init,
    };
    large
        .fill_flat(0, &mut vec![bf16::ZERO; 1 << 20], Threads::Count(1))
        .unwrap();
    large
        .fill_flat(0, &mut vec![f16::ZERO; 1 << 20], Threads::Count(1))
        .unwrap();
    let golden = |dtype: &str| {
        let &(_, _, hex) = GOLDEN
            .iter()
            .find(|&&(case, d, _)| case == 1 && d == dtype)
            .unwrap();
        hex
    };
    let (_, shape, _) = &cases()[1];
    for backend in Backend::available() {
        for threads in [Threads::Count(1), Threads::All] {
            let bf16_hex = digest::<bf16>(backend, threads, name, shape, init, None);
            let f16_hex = digest::<f16>(backend, threads, name, shape, init, None);
            assert_eq!(&bf16_hex[..16], golden("bf16"), "{backend:?} {threads:?}");
            assert_eq!(&f16_hex[..16], golden("f16"), "{backend:?} {threads:?}");
        }
    }
}
