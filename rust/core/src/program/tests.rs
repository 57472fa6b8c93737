//! The evaluator against the fills and its own parts: every path of a fill (single
//! source, fused source, evaluated) and every step kind, on every thread count,
//! backend and dtype.

use std::sync::Arc;

use half::{bf16, f16};

use super::builder::Program;
use super::ops::{BinaryOp, UnaryOp};
use super::scalar::{floor_divide, maximum, minimum, modulo, round_half_even, round_to};
use super::steps::Step;
use crate::fill::ParamStream;
use crate::init::{Dtype, Element, Init, OutBuf};
use crate::math;
use crate::pool::Threads;
use crate::pool::CHUNK_ELEMENTS;
use crate::region::Region;
use crate::Error;

/// A program touching every instruction kind: a source, coordinates, the flat
/// index, a broadcast table, unary and binary operations, a select and a rounding.
fn every_kind(init: Init) -> Program {
    let mut p = Program::new();
    let s = p.source(init, Dtype::F32).unwrap();
    let c0 = p.coord(0).unwrap();
    let c2 = p.coord(2).unwrap();
    let flat = p.flat();
    let values: Arc<[f64]> = (0..11).map(|v| f64::from(v) * 0.25 - 0.5).collect();
    let t = p.table(values, vec![2, 0, 1], 0);
    let e = p.unary(UnaryOp::Exp, s).unwrap();
    let sum = p.binary(BinaryOp::Add, e, t).unwrap();
    let l = p.unary(UnaryOp::Log1p, flat).unwrap();
    let big = p.binary(BinaryOp::Gt, c0, c2).unwrap();
    let w = p.select(big, sum, l).unwrap();
    p.round(w, Dtype::BF16).unwrap();
    p
}

fn fill_f64(p: &Program, shape: &[u64], region: Region, len: usize, threads: Threads) -> Vec<f64> {
    let mut out = vec![0.0; len];
    p.fill_region(5, shape, &region, OutBuf::F64(&mut out), threads)
        .unwrap();
    out
}

#[test]
fn any_part_of_a_box_or_flat_range_equals_the_full_evaluation() {
    let shape = [4u64, 3, 5];
    let p = every_kind(Init::Normal {
        mean: 0.0,
        std: 1.0,
    });
    let full = fill_f64(&p, &shape, Region::Flat { start: 0 }, 60, Threads::Count(1));
    // Values really vary (not a constant that would make every slice agree).
    assert!(full.iter().any(|&v| v != full[0]));
    for (start, len) in [(0, 1), (7, 9), (31, 29), (59, 1), (0, 60)] {
        let part = fill_f64(&p, &shape, Region::Flat { start }, len, Threads::Count(1));
        assert_eq!(part, full[start as usize..start as usize + len]);
    }
    let ranges = vec![(1, 3), (0, 3), (2, 5)];
    let whole = fill_f64(
        &p,
        &shape,
        Region::Box {
            ranges: ranges.clone(),
            offset: None,
        },
        18,
        Threads::Count(1),
    );
    let expect: Vec<f64> = (1..3)
        .flat_map(|i| (0..3).flat_map(move |j| (2..5).map(move |k| (i * 15 + j * 5 + k) as usize)))
        .map(|index| full[index])
        .collect();
    assert_eq!(whole, expect);
    for (offset, len) in [(0, 4), (4, 7), (11, 7), (17, 1)] {
        let region = Region::Box {
            ranges: ranges.clone(),
            offset: Some(offset),
        };
        assert_eq!(
            fill_f64(&p, &shape, region, len, Threads::Count(1)),
            expect[offset as usize..offset as usize + len]
        );
    }
}

#[test]
fn one_thread_equals_many() {
    let shape = [3u64, 50_000, 2];
    let p = every_kind(Init::Uniform { a: -1.0, b: 1.0 });
    let n = 300_000;
    let one = fill_f64(&p, &shape, Region::Flat { start: 0 }, n, Threads::Count(1));
    let three = fill_f64(&p, &shape, Region::Flat { start: 0 }, n, Threads::Count(3));
    assert_eq!(one, three);
}

#[test]
fn a_single_source_equals_the_evaluator_and_the_fill_for_every_dtype() {
    let inits = [
        Init::Constant { value: 0.3 },
        Init::Uniform { a: -2.0, b: 3.0 },
        Init::Normal {
            mean: 0.5,
            std: 2.0,
        },
        Init::TruncNormal {
            mean: 0.0,
            std: 1.0,
            a: -2.0,
            b: 1.0,
        },
    ];
    let shape = [7u64, 11];
    let region = Region::Box {
        ranges: vec![(2, 6), (3, 10)],
        offset: None,
    };
    for init in inits {
        for dtype in Dtype::ALL {
            let mut p = Program::new();
            p.source(init, dtype).unwrap();
            let mut q = Program::new();
            let s = q.source(init, dtype).unwrap();
            q.round(s, dtype).unwrap();
            let param = ParamStream {
                key64: 9,
                global_shape: shape.to_vec(),
                init,
            };
            macro_rules! check {
                ($t:ty, $variant:ident) => {{
                    let mut a = vec![<$t>::from_f64(0.0); 28];
                    let mut b = a.clone();
                    let mut c = a.clone();
                    let mut d = a.clone();
                    p.fill_region(
                        9,
                        &shape,
                        &region,
                        OutBuf::$variant(&mut a),
                        Threads::Count(1),
                    )
                    .unwrap();
                    p.fill_region_evaluated(
                        9,
                        &shape,
                        &region,
                        OutBuf::$variant(&mut b),
                        Threads::Count(1),
                    )
                    .unwrap();
                    q.fill_region(
                        9,
                        &shape,
                        &region,
                        OutBuf::$variant(&mut c),
                        Threads::Count(1),
                    )
                    .unwrap();
                    param
                        .fill_region(&region, OutBuf::$variant(&mut d), Threads::Count(1))
                        .unwrap();
                    let bits = |v: &[$t]| v.iter().map(|x| x.widen().to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a), bits(&d), "{init:?} {dtype:?}");
                    assert_eq!(bits(&b), bits(&d), "{init:?} {dtype:?}");
                    assert_eq!(bits(&c), bits(&d), "{init:?} {dtype:?}");
                }};
            }
            match dtype {
                Dtype::F32 => check!(f32, F32),
                Dtype::F64 => check!(f64, F64),
                Dtype::BF16 => check!(bf16, BF16),
                Dtype::F16 => check!(f16, F16),
            }
        }
    }
}

/// `source -> exp -> * 0.75 -> round to dtype` of `dtype`.
fn source_then_steps(init: Init, dtype: Dtype) -> Program {
    let mut p = Program::new();
    let s = p.source(init, dtype).unwrap();
    let e = p.unary(UnaryOp::Exp, s).unwrap();
    let k = p.constant(0.75);
    let m = p.binary(BinaryOp::Mul, e, k).unwrap();
    p.round(m, dtype).unwrap();
    p
}

#[test]
fn a_source_with_steps_fused_equals_the_evaluator_for_every_dtype_region_and_thread_count() {
    let init = Init::Normal {
        mean: 0.5,
        std: 2.0,
    };
    let shape = [300u64, 37];
    let regions = [
        (Region::Flat { start: 11 }, 9_000),
        (
            Region::Box {
                ranges: vec![(5, 290), (3, 30)],
                offset: None,
            },
            285 * 27,
        ),
        (
            Region::Box {
                ranges: vec![(5, 290), (3, 30)],
                offset: Some(101),
            },
            4_000,
        ),
    ];
    for dtype in Dtype::ALL {
        let p = source_then_steps(init, dtype);
        assert!(p.fused_source(dtype).is_some());
        for (region, len) in &regions {
            macro_rules! check {
                ($t:ty, $variant:ident) => {{
                    let bits = |v: &[$t]| v.iter().map(|x| x.widen().to_bits()).collect::<Vec<_>>();
                    let mut want = vec![<$t>::from_f64(0.0); *len];
                    p.fill_region_evaluated(
                        9,
                        &shape,
                        region,
                        OutBuf::$variant(&mut want),
                        Threads::Count(1),
                    )
                    .unwrap();
                    assert!(want.iter().any(|v| v.widen() != want[0].widen()));
                    for threads in [1, 3] {
                        let mut fused = vec![<$t>::from_f64(0.0); *len];
                        p.fill_region(
                            9,
                            &shape,
                            region,
                            OutBuf::$variant(&mut fused),
                            Threads::Count(threads),
                        )
                        .unwrap();
                        assert_eq!(bits(&fused), bits(&want), "{dtype:?} {region:?} {threads}");
                    }
                }};
            }
            match dtype {
                Dtype::F32 => check!(f32, F32),
                Dtype::F64 => check!(f64, F64),
                Dtype::BF16 => check!(bf16, BF16),
                Dtype::F16 => check!(f16, F16),
            }
        }
    }
    // A source of another dtype than the destination's is evaluated, not fused.
    assert!(source_then_steps(init, Dtype::BF16)
        .fused_source(Dtype::F32)
        .is_none());
}

#[test]
fn an_orthogonal_source_takes_steps_on_its_fused_fill() {
    // torch: orthogonal_(w); w.mul_(0.5) -- the matrix is computed whole, so only
    // the fused path can give its values to a program.
    let init = Init::Orthogonal {
        gain: 1.0,
        max_numel: 1 << 20,
    };
    let shape = [6u64, 9];
    let mut matrix = vec![0f32; 54];
    ParamStream {
        key64: 4,
        global_shape: shape.to_vec(),
        init,
    }
    .fill_region(
        &Region::Flat { start: 0 },
        OutBuf::F32(&mut matrix),
        Threads::Count(1),
    )
    .unwrap();
    let mut p = Program::new();
    let s = p.source(init, Dtype::F32).unwrap();
    let k = p.constant(0.5);
    p.binary(BinaryOp::Mul, s, k).unwrap();
    let region = Region::Box {
        ranges: vec![(1, 5), (2, 9)],
        offset: None,
    };
    let mut out = vec![0f32; 28];
    p.fill_region(4, &shape, &region, OutBuf::F32(&mut out), Threads::Count(2))
        .unwrap();
    let want: Vec<f32> = (1..5)
        .flat_map(|i| (2..9).map(move |j| i * 9 + j))
        .map(|index| matrix[index] * 0.5)
        .collect();
    assert_eq!(out, want);
    // Through the evaluator alone, an orthogonal source has no sampler.
    let err = p
        .fill_region_evaluated(4, &shape, &region, OutBuf::F32(&mut out), Threads::Count(1))
        .unwrap_err();
    assert!(matches!(err, Error::NoSampler { .. }), "{err:?}");
}

#[test]
fn the_evaluated_source_equals_the_fused_fill_of_every_backend() {
    // The evaluator is scalar; backends differ only in the fused kernels (and in
    // the Philox of `Stream::fill_words`, checked equal in philox.rs).
    let init = Init::TruncNormal {
        mean: 0.5,
        std: 2.0,
        a: -1.0,
        b: 4.0,
    };
    let param = ParamStream {
        key64: 3,
        global_shape: vec![1000],
        init,
    };
    let mut p = Program::new();
    let s = p.source(init, Dtype::F32).unwrap();
    p.round(s, Dtype::F32).unwrap();
    let mut evaluated = vec![0f32; 997];
    let region = Region::Flat { start: 3 };
    p.fill_region(
        3,
        &[1000],
        &region,
        OutBuf::F32(&mut evaluated),
        Threads::Count(1),
    )
    .unwrap();
    for backend in crate::Backend::available() {
        let mut fused = vec![0f32; 997];
        param
            .fill_flat_using(backend, 3, &mut fused, Threads::Count(1))
            .unwrap();
        assert_eq!(fused, evaluated, "{backend:?}");
    }
}

#[test]
fn nans_are_written_as_the_one_quiet_nan() {
    let mut p = Program::new();
    let neg = p.constant(-1.0);
    let z = p.unary(UnaryOp::Sqrt, neg).unwrap(); // x86 gives the negative default NaN
    let zero = p.constant(0.0);
    p.binary(BinaryOp::Div, z, zero).unwrap();
    let out = fill_f64(&p, &[2], Region::Flat { start: 0 }, 2, Threads::Count(1));
    assert!(out.iter().all(|v| v.to_bits() == f64::NAN.to_bits()));
}

#[test]
fn bad_programs_are_refused_with_their_argument_named() {
    let mut p = Program::new();
    let mut out = [0f64; 4];
    let flat = Region::Flat { start: 0 };
    let err = p
        .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
        .unwrap_err();
    assert_eq!(err, Error::EmptyProgram);
    assert_eq!(
        p.unary(UnaryOp::Exp, 0).unwrap_err().to_string(),
        "x must be an earlier register of the program (0 <= x < 0), got 0"
    );
    let x = p.constant(1.0);
    assert!(matches!(
        p.binary(BinaryOp::Add, x, 1),
        Err(Error::BadRegister {
            arg: "b",
            value: 1,
            len: 1
        })
    ));
    assert!(matches!(
        p.select(3, x, x),
        Err(Error::BadRegister { arg: "cond", .. })
    ));
    assert_eq!(
        p.coord(-1).unwrap_err().to_string(),
        "dim must be >= 0, got -1"
    );
    let msg = UnaryOp::from_name("atan").unwrap_err().to_string();
    assert!(msg.starts_with("op must be one of 'neg', 'abs', "), "{msg}");
    assert!(msg.ends_with("'round_half_even', got 'atan'"), "{msg}");
    assert!(BinaryOp::from_name("atan2")
        .unwrap_err()
        .to_string()
        .ends_with("'ne', got 'atan2'"));

    let mut c = Program::new();
    c.coord(1).unwrap();
    let err = c
        .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "coord dim must be < 1, the dims of the global shape, got 1"
    );

    let values: Arc<[f64]> = vec![0.0; 6].into();
    let mut t = Program::new();
    t.table(values.clone(), vec![3, 1], 0);
    let err = t
        .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
        .unwrap_err();
    assert_eq!(
        err,
        Error::TableRank {
            strides: 2,
            dims: 1
        }
    );
    let err = t
        .fill_region(0, &[2, 4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
        .unwrap_err();
    assert_eq!(
        err,
        Error::TableOutOfBounds {
            low: 0,
            high: 6,
            len: 6
        }
    );
    let mut n = Program::new();
    n.table(values, vec![-1], 2);
    let err = n
        .fill_region(0, &[4], &flat, OutBuf::F64(&mut out), Threads::Count(1))
        .unwrap_err();
    assert_eq!(
        err,
        Error::TableOutOfBounds {
            low: -1,
            high: 2,
            len: 6
        }
    );
    // The whole shape is checked, not only the region filled.
    let mut one = [0f64; 1];
    let err = n
        .fill_region(0, &[4], &flat, OutBuf::F64(&mut one), Threads::Count(1))
        .unwrap_err();
    assert!(matches!(err, Error::TableOutOfBounds { .. }));
}

#[test]
fn a_refused_sin_is_refused_only_where_it_reaches_the_result() {
    // Whisper's table: cat([sin(pos * f(c)), cos(pos * f(c - half))]) is a where of
    // the column; each branch, at the other half's columns, takes arguments far
    // beyond TRIG_MAX. Those values are never selected, so nothing is refused.
    let mut p = Program::new();
    let flat = p.flat();
    let half = p.constant(4.0);
    let right = p.binary(BinaryOp::Ge, flat, half).unwrap();
    let big = p.constant(1e9);
    let x = p.binary(BinaryOp::Mul, flat, big).unwrap();
    let left_value = p.unary(UnaryOp::Cos, x).unwrap(); // beyond TRIG_MAX at flat >= 1
    let zero = p.constant(0.0);
    let sum = p.binary(BinaryOp::Add, left_value, zero).unwrap();
    let w = p.select(right, zero, sum).unwrap();
    p.round(w, Dtype::F32).unwrap();
    let mut out = [f32::NAN; 8];
    // Flat 0 is cos(0); flat 1..4 select a refused value.
    let err = p
        .fill_region(
            0,
            &[8],
            &Region::Flat { start: 0 },
            OutBuf::F32(&mut out),
            Threads::Count(1),
        )
        .unwrap_err();
    assert_eq!(
        err,
        Error::TrigArgument {
            op: "cos",
            value: 1e9,
            limit: math::TRIG_MAX
        }
    );
    // Flats 4..8 take the other branch: filled, not refused.
    let mut right_half = [f32::NAN; 4];
    p.fill_region(
        0,
        &[8],
        &Region::Flat { start: 4 },
        OutBuf::F32(&mut right_half),
        Threads::Count(1),
    )
    .unwrap();
    assert_eq!(right_half, [0.0; 4]);
    // A refused condition refuses whichever branch it picks.
    let mut q = Program::new();
    let flat = q.flat();
    let big = q.constant(1e9);
    let x = q.binary(BinaryOp::Mul, flat, big).unwrap();
    let s = q.unary(UnaryOp::Sin, x).unwrap();
    let one = q.constant(1.0);
    q.select(s, one, one).unwrap();
    let mut two = [0f32; 2];
    let err = q
        .fill_region(
            0,
            &[2],
            &Region::Flat { start: 0 },
            OutBuf::F32(&mut two),
            Threads::Count(1),
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::TrigArgument { op: "sin", .. }),
        "{err:?}"
    );
}

#[test]
fn sin_beyond_trig_max_is_refused_at_the_lowest_index() {
    let mut p = Program::new();
    let flat = p.flat();
    let scale = p.constant(1e6);
    let x = p.binary(BinaryOp::Mul, flat, scale).unwrap();
    p.unary(UnaryOp::Sin, x).unwrap();
    let n = 3 * CHUNK_ELEMENTS;
    let mut out = vec![0f32; n];
    let err = p
        .fill_region(
            0,
            &[n as u64],
            &Region::Flat { start: 0 },
            OutBuf::F32(&mut out),
            Threads::Count(3),
        )
        .unwrap_err();
    assert_eq!(
        err,
        Error::TrigArgument {
            op: "sin",
            value: 2e6,
            limit: math::TRIG_MAX
        }
    );
    assert!(err
        .to_string()
        .starts_with("sin argument must satisfy |x| <= 1647099.3291652855"));
    // Up to the limit: computed.
    let mut ok = [0f32; 2];
    p.fill_region(
        0,
        &[2],
        &Region::Flat { start: 0 },
        OutBuf::F32(&mut ok),
        Threads::Count(1),
    )
    .unwrap();
    assert_eq!(ok, [0.0, math::sin(1e6) as f32]);
    // Infinities are not refused: sin(inf) is NaN.
    let mut inf = Program::new();
    let x = inf.constant(f64::NEG_INFINITY);
    inf.unary(UnaryOp::Cos, x).unwrap();
    inf.fill_region(
        0,
        &[2],
        &Region::Flat { start: 0 },
        OutBuf::F32(&mut ok),
        Threads::Count(1),
    )
    .unwrap();
    assert!(ok[0].is_nan() && ok[1].is_nan());
}

/// `source, erfinv` with the erfinv seen only rounded to float32 (the last register
/// of a float32 fill; read by a `Round` to float32) takes the rounded erfinv, and
/// gives what `erfinv` rounded after gives (where a `where` also reads it unrounded).
#[test]
fn erfinv_seen_only_rounded_to_float32_gives_the_rounded_erfinv() {
    let shape = [37u64, 1000];
    let fused = |p: &Program| {
        let c = p.compile(5, &shape, Dtype::F32, None).unwrap();
        c.steps.iter().any(|s| matches!(s, Step::ErfinvToF32(_)))
    };
    let fill = |p: &Program| {
        let mut out = vec![0f32; 37_000];
        let region = Region::Flat { start: 0 };
        p.fill_region(5, &shape, &region, OutBuf::F32(&mut out), Threads::Count(3))
            .unwrap();
        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    };
    // `round` rounds erfinv before the result; `also_read`: a `where` reads it too.
    let program = |round: bool, also_read: bool| {
        let mut p = Program::new();
        let s = p
            .source(Init::Uniform { a: -1.0, b: 1.0 }, Dtype::F32)
            .unwrap();
        let e = p.unary(UnaryOp::Erfinv, s).unwrap();
        if round || also_read {
            let r = if round {
                p.round(e, Dtype::F32).unwrap()
            } else {
                e
            };
            let other = if also_read { e } else { r };
            let c = p.binary(BinaryOp::Eq, other, other).unwrap();
            p.select(c, r, other).unwrap();
        }
        p
    };
    for round in [false, true] {
        let (fast, reference) = (program(round, false), program(round, true));
        assert!(fused(&fast) && !fused(&reference), "round: {round}");
        assert!(fill(&fast) == fill(&reference), "round: {round}");
    }
    // Into a binary64 fill, the last register's erfinv is not rounded.
    assert!(!program(false, false)
        .compile(5, &shape, Dtype::F64, None)
        .unwrap()
        .steps
        .iter()
        .any(|s| matches!(s, Step::ErfinvToF32(_))));
}

/// `clamp_(min, max)` as capture records it (`where(x < lo, lo, x)`, then `>`) runs
/// as two [`Step::Clamp`]s in one pass with the comparisons unused, and gives the bits of the
/// same `where`s whose bound is another register of the same value (not rewritten):
/// NaN, both zeros at a bound of zero, infinities, values at and beside the bounds,
/// bounds that vary per element, a comparison another step also reads; and each order of
/// `<` and `>` in the pair (each a loop of its own in `passes::clamp_pair`).
#[test]
fn a_clamp_equals_its_where_of_a_comparison_bit_for_bit() {
    let special = [
        f64::NEG_INFINITY,
        -2.5,
        -2.0,
        -1.0,
        -0.0,
        0.0,
        f64::NAN,
        1.5,
        2.0,
        2.000_000_1,
        f64::INFINITY,
        -1e-300,
        1e-300,
        -f64::NAN,
    ]; // fmt: skip
    let len = 64 * special.len();
    let values: Vec<f64> = (0..len)
        .map(|k| special[k % special.len()] * if k < len / 2 { 1.0 } else { 0.5 })
        .collect();
    let shape = [len as u64];
    let program =
        |fused: bool, bounds: (f64, f64), varying: bool, reuse: bool, ops: [BinaryOp; 2]| {
            let mut p = Program::new();
            let x = p.table(values.clone().into(), vec![1], 0);
            let s = p
                .source(Init::Uniform { a: -3.0, b: 3.0 }, Dtype::F32)
                .unwrap();
            let x = p.binary(BinaryOp::Add, x, s).unwrap();
            let lo = if varying {
                p.binary(BinaryOp::Mul, s, s).unwrap()
            } else {
                p.constant(bounds.0)
            };
            let c = p.binary(ops[0], x, lo).unwrap();
            // The reference takes `(lo + lo) * 0.5`: the same value (exact), another
            // register, so its `where` is not rewritten.
            let lo_taken = if fused {
                lo
            } else {
                let half = p.constant(0.5);
                let twice = p.binary(BinaryOp::Add, lo, lo).unwrap();
                p.binary(BinaryOp::Mul, twice, half).unwrap()
            };
            let low = p.select(c, lo_taken, x).unwrap();
            let hi = p.constant(bounds.1);
            let c2 = p.binary(ops[1], low, hi).unwrap();
            let hi_taken = if fused { hi } else { p.constant(bounds.1) };
            let out = p.select(c2, hi_taken, low).unwrap();
            if reuse {
                p.binary(BinaryOp::Add, out, c).unwrap();
            }
            p
        };
    let fill = |p: &Program| {
        fill_f64(p, &shape, Region::Flat { start: 0 }, len, Threads::Count(2))
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    let steps = |p: &Program| p.compile(5, &shape, Dtype::F64, None).unwrap().steps;
    for bounds in [
        (-2.0, 2.0),
        (0.0, 0.0),
        (-0.0, 1.5),
        (f64::NEG_INFINITY, f64::NAN),
    ] {
        for (varying, reuse, ops) in [
            (false, false, [BinaryOp::Lt, BinaryOp::Gt]),
            (true, false, [BinaryOp::Lt, BinaryOp::Gt]),
            (false, true, [BinaryOp::Lt, BinaryOp::Gt]),
            (false, false, [BinaryOp::Gt, BinaryOp::Lt]),
            (false, false, [BinaryOp::Lt, BinaryOp::Lt]),
            (false, false, [BinaryOp::Gt, BinaryOp::Gt]),
        ] {
            let (fast, reference) = (
                program(true, bounds, varying, reuse, ops),
                program(false, bounds, varying, reuse, ops),
            );
            // The two clamps in one pass: the first one unused too.
            let fast_steps = steps(&fast);
            let pairs = fast_steps
                .iter()
                .filter(|s| matches!(s, Step::ClampPair(pair, ..) if *pair == ops))
                .count();
            let unused = fast_steps
                .iter()
                .filter(|s| matches!(s, Step::Unused))
                .count();
            assert_eq!((pairs, unused), (1, if reuse { 2 } else { 3 }));
            assert!(!steps(&reference)
                .iter()
                .any(|s| matches!(s, Step::Clamp(..) | Step::ClampPair(..))));
            assert!(
                fill(&fast) == fill(&reference),
                "bounds {bounds:?}, varying {varying}, reuse {reuse}, ops {ops:?}"
            );
        }
    }
}

/// A sinusoid table (Whisper's: `exp` of one coordinate, `sin`/`cos` of both, a
/// `where` of the column) with its per-column registers hoisted gives, on the whole
/// parameter and on a box of it, each element's value computed alone by the scalar
/// functions; with rows of 64 (blocks of 256 take both branches) and of 1024 (each
/// block one branch of the `where`).
#[test]
fn hoisted_columns_and_one_branch_blocks_give_each_elements_own_value() {
    for (rows, cols) in [(300u64, 64u64), (20, 1024)] {
        let half = (cols / 2) as f64;
        let increment = -9.21 / (half - 1.0);
        let mut p = Program::new();
        let row = p.coord(0).unwrap();
        let col = p.coord(1).unwrap();
        let h = p.constant(half);
        let second = p.binary(BinaryOp::Ge, col, h).unwrap();
        let shifted = p.binary(BinaryOp::Sub, col, h).unwrap();
        let j = p.select(second, shifted, col).unwrap();
        let increment_register = p.constant(increment);
        let scaled = p.binary(BinaryOp::Mul, j, increment_register).unwrap();
        let inv = p.unary(UnaryOp::Exp, scaled).unwrap();
        let inv = p.round(inv, Dtype::F32).unwrap();
        let angle = p.binary(BinaryOp::Mul, row, inv).unwrap();
        let sin = p.unary(UnaryOp::Sin, angle).unwrap();
        let cos = p.unary(UnaryOp::Cos, angle).unwrap();
        p.select(second, cos, sin).unwrap();
        let shape = [rows, cols];
        let steps = p.compile(5, &shape, Dtype::F64, None).unwrap().steps;
        let hoisted = steps.iter().filter(|s| matches!(s, Step::Column { .. }));
        let unused = steps.iter().filter(|s| matches!(s, Step::Unused));
        // Columns: `second` (the last `where` reads it) and the rounded `inv`; unused:
        // `shifted`, `j`, `scaled` and the `exp`.
        assert_eq!((hoisted.count(), unused.count()), (2, 4));
        let want = |r: u64, c: u64| {
            let j = if c as f64 >= half {
                c as f64 - half
            } else {
                c as f64
            };
            let inv = round_to(Dtype::F32, math::exp(j * increment));
            let angle = r as f64 * inv;
            if c as f64 >= half {
                math::cos(angle)
            } else {
                math::sin(angle)
            }
        };
        let numel = (rows * cols) as usize;
        let full = fill_f64(
            &p,
            &shape,
            Region::Flat { start: 0 },
            numel,
            Threads::Count(2),
        );
        for (k, got) in full.iter().enumerate() {
            let (r, c) = (k as u64 / cols, k as u64 % cols);
            assert_eq!(got.to_bits(), want(r, c).to_bits(), "({r}, {c})");
        }
        let (r0, r1, c0, c1) = (3, rows - 2, cols / 2 - 9, cols / 2 + 2);
        let region = Region::Box {
            ranges: vec![(r0, r1), (c0, c1)],
            offset: None,
        };
        let len = ((r1 - r0) * (c1 - c0)) as usize;
        let part = fill_f64(&p, &shape, region, len, Threads::Count(3));
        for (k, got) in part.iter().enumerate() {
            let (r, c) = (r0 + k as u64 / (c1 - c0), c0 + k as u64 % (c1 - c0));
            assert_eq!(got.to_bits(), want(r, c).to_bits(), "({r}, {c})");
        }
    }
}

#[test]
fn round_half_even_is_torchs_round() {
    let cases = [
        (0.5, 0.0),
        (1.5, 2.0),
        (2.5, 2.0),
        (-2.5, -2.0),
        (-0.3, -0.0),
        (0.49999999999999994, 0.0),
        (4503599627370495.5, 4503599627370496.0),
        (4503599627370497.0, 4503599627370497.0),
        (-1e300, -1e300),
        (f64::INFINITY, f64::INFINITY),
        (-0.0, -0.0),
        (7.0, 7.0),
    ];
    for (x, want) in cases {
        assert_eq!(round_half_even(x).to_bits(), want.to_bits(), "{x}");
    }
    assert!(round_half_even(f64::NAN).is_nan());
}

#[test]
fn min_max_mod_and_floordiv_follow_torch() {
    let nan = f64::NAN;
    assert!(minimum(nan, 1.0).is_nan() && maximum(1.0, nan).is_nan());
    assert_eq!(minimum(-0.0, 0.0).to_bits(), (-0f64).to_bits());
    assert_eq!(minimum(0.0, -0.0).to_bits(), (-0f64).to_bits());
    assert_eq!(maximum(-0.0, 0.0).to_bits(), 0f64.to_bits());
    assert_eq!((minimum(2.0, -3.0), maximum(2.0, -3.0)), (-3.0, 2.0));
    assert_eq!(
        (modulo(5.5, 2.0), modulo(-5.5, 2.0), modulo(5.5, -2.0)),
        (1.5, 0.5, -0.5)
    );
    assert_eq!(modulo(-4.0, 2.0).to_bits(), (-0f64).to_bits()); // fmod's sign, as torch
    assert_eq!(
        (
            floor_divide(7.0, 2.0),
            floor_divide(-7.0, 2.0),
            floor_divide(7.0, -2.0)
        ),
        (3.0, -4.0, -4.0)
    );
    assert_eq!(floor_divide(1.0, 0.0), f64::INFINITY);
    assert_eq!(floor_divide(-0.5, 3.0), -1.0);
    assert_eq!(floor_divide(0.5, -3.0), -1.0);
    assert_eq!(floor_divide(0.0, -3.0).to_bits(), (-0f64).to_bits());
}
