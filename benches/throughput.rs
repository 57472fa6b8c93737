//! Criterion benchmarks of the core, reported in bytes/s of output: raw words, uniform
//! f32, normal f32, trunc_normal f32, normal bf16 and f16 (value tables), each on 1
//! thread and on all threads; then uniform / normal / trunc_normal f32 on one thread
//! for every backend this CPU runs (the scalar reference, the portable lane code, AVX2,
//! AVX-512); then the region walk on one thread: boxes of short runs (a column slice)
//! and init programs over a box, fused (a source then steps) and evaluated
//! (coordinates).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::{bf16, f16};
use shardinit_core::program::{BinaryOp, Program, UnaryOp};
use shardinit_core::{Backend, Dtype, Init, OutBuf, ParamStream, Region, Stream, Threads};

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
        // Both 16-bit dtypes look normal values up in the core's value tables (built by
        // the first fill, then cached: rust/core/src/table.rs).
        let mut out_f16 = vec![f16::ZERO; ELEMENTS];
        group.bench_with_input(BenchmarkId::new("normal_f16", threads_name), &p, |b, p| {
            b.iter(|| p.fill_flat(0, &mut out_f16, threads).unwrap());
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

/// The global shape of the region benchmarks, and the column slice they fill: runs of
/// `cols` elements, one per row.
const ROWS: u64 = 4096;
const COLUMNS: u64 = 1024;

fn column_box(cols: u64) -> Region {
    Region::Box {
        ranges: vec![(0, ROWS), (8, 8 + cols)],
        offset: None,
    }
}

fn bench_regions(c: &mut Criterion) {
    let mut group = c.benchmark_group("regions");
    group.sample_size(10);
    let normal = Init::Normal {
        mean: 0.0,
        std: 0.02,
    };
    let p = ParamStream {
        key64: 7,
        global_shape: vec![ROWS, COLUMNS],
        init: normal,
    };
    for cols in [16u64, 512] {
        let region = column_box(cols);
        let mut out = vec![0f32; (ROWS * cols) as usize];
        group.throughput(Throughput::Bytes((out.len() * 4) as u64));
        let id = BenchmarkId::new("box_normal_f32", format!("runs_of_{cols}"));
        group.bench_function(id, |b| {
            b.iter(|| {
                p.fill_region(&region, OutBuf::F32(&mut out), Threads::Count(1))
                    .unwrap()
            });
        });
    }
    // normal * 2 + 1 (the fused path) and log(coord1 + 1) (the evaluator).
    let mut fused = Program::new();
    let x = fused.source(normal, Dtype::F32).unwrap();
    let two = fused.constant(2.0);
    let doubled = fused.binary(BinaryOp::Mul, x, two).unwrap();
    let one = fused.constant(1.0);
    fused.binary(BinaryOp::Add, doubled, one).unwrap();
    let mut evaluated = Program::new();
    let n = evaluated.coord(1).unwrap();
    let one = evaluated.constant(1.0);
    let sum = evaluated.binary(BinaryOp::Add, n, one).unwrap();
    evaluated.unary(UnaryOp::Log, sum).unwrap();
    for (name, program) in [
        ("program_fused_f32", fused),
        ("program_coords_f32", evaluated),
    ] {
        for cols in [16u64, 512] {
            let region = column_box(cols);
            let mut out = vec![0f32; (ROWS * cols) as usize];
            group.throughput(Throughput::Bytes((out.len() * 4) as u64));
            let id = BenchmarkId::new(name, format!("runs_of_{cols}"));
            group.bench_function(id, |b| {
                b.iter(|| {
                    let out = OutBuf::F32(&mut out);
                    program
                        .fill_region(7, &[ROWS, COLUMNS], &region, out, Threads::Count(1))
                        .unwrap()
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, bench_regions);
criterion_main!(benches);
