//! Criterion benchmarks of the core, reported in bytes/s of output: raw words, uniform
//! f32, normal f32, trunc_normal f32, normal bf16, each on 1 thread and on all threads;
//! then uniform / normal / trunc_normal f32 on one thread for every backend this CPU
//! runs (the scalar reference, the portable lane code, AVX2, AVX-512).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::bf16;
use shardinit_core::{Backend, Init, ParamStream, Stream, Threads};

const ELEMENTS: usize = 1 << 22;

fn param(init: Init) -> ParamStream {
    ParamStream {
        key64: 0x47a9_4443_d83c_cf19,
        global_shape: vec![ELEMENTS as u64],
        init,
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("shardinit");
    group.sample_size(10);

    let mut words = vec![0u32; ELEMENTS];
    group.throughput(Throughput::Bytes((ELEMENTS * 4) as u64));
    group.bench_function("raw_words", |b| {
        b.iter(|| Stream::new(1).fill_words(0, &mut words));
    });

    let inits = [
        ("uniform_f32", Init::Uniform { a: -1.0, b: 1.0 }),
        (
            "normal_f32",
            Init::Normal {
                mean: 0.0,
                std: 0.02,
            },
        ),
        (
            "trunc_normal_f32",
            Init::TruncNormal {
                mean: 0.0,
                std: 0.02,
                a: -0.04,
                b: 0.04,
            },
        ),
    ];
    for (threads_name, threads) in [
        ("1_thread", Threads::Count(1)),
        ("all_threads", Threads::All),
    ] {
        let mut out = vec![0f32; ELEMENTS];
        for (name, init) in inits {
            let p = param(init);
            group.bench_with_input(BenchmarkId::new(name, threads_name), &p, |b, p| {
                b.iter(|| p.fill_flat(0, &mut out, threads).unwrap());
            });
        }
        let mut out16 = vec![bf16::ZERO; ELEMENTS];
        group.throughput(Throughput::Bytes((ELEMENTS * 2) as u64));
        let p = param(Init::Normal {
            mean: 0.0,
            std: 0.02,
        });
        group.bench_with_input(BenchmarkId::new("normal_bf16", threads_name), &p, |b, p| {
            b.iter(|| p.fill_flat(0, &mut out16, threads).unwrap());
        });
        group.throughput(Throughput::Bytes((ELEMENTS * 4) as u64));
    }
    group.finish();

    // Each backend on one thread (the scalar reference is slow: fewer elements).
    let mut group = c.benchmark_group("backends");
    group.sample_size(10);
    let elements = 1 << 18;
    let mut out = vec![0f32; elements];
    group.throughput(Throughput::Bytes((elements * 4) as u64));
    for backend in Backend::available() {
        for (name, init) in inits {
            let p = ParamStream {
                key64: 7,
                global_shape: vec![elements as u64],
                init,
            };
            let id = BenchmarkId::new(name, format!("{backend:?}"));
            group.bench_with_input(id, &p, |b, p| {
                b.iter(|| {
                    p.fill_flat_using(backend, 0, &mut out, Threads::Count(1))
                        .unwrap()
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
