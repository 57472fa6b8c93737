//! Roundings that cannot change a value, found when a program is compiled: a register
//! whose every value is already a value of a narrower dtype (a float32 source, a
//! `Round` to float32, the clamp of such a register between float32 bounds) is left as it
//! is by a `Round` to that dtype, so the `Round` is an alias of its operand: its readers
//! read the operand, and the `Round` is not evaluated.
//!
//! # Why the bits are the same
//!
//! Write "`x` is exact in `d`" for: every value `x` takes at any element is a value of
//! dtype `d` or a NaN. Then [`round_to`]`(d, v) == v` for every such non-NaN `v` (a value
//! of `d` rounds to itself), so the alias has the `Round`'s value at every element where
//! it is not NaN, and is a NaN where the `Round` is one. The two may differ only in a
//! NaN's sign and payload, which no step's non-NaN result depends on (each compares,
//! selects or computes from whether an operand is NaN, never from its payload) and which
//! the final write replaces by the one quiet NaN (`Compiled::eval_run`): the payload and
//! sign of NaNs are not IEEE's, so the evaluator already rests on that.
//!
//! [`rule`] says, per step, which dtypes its register is exact in from its operands'
//! (each case with its proof); [`alias_exact_rounds`] applies it in register order and
//! rewrites the operands. The sets are closed upward: a value of bfloat16 or float16 is
//! a float32 value.

use super::ops::{BinaryOp, UnaryOp};
use super::scalar::round_to;
use super::steps::Step;
use crate::init::Dtype;

/// The dtypes narrower than binary64 a register is exact in (module docs); every
/// register is exact in binary64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Formats(u8);

/// The narrower dtypes, each with its bit in [`Formats`] and its significand's bits
/// (so every integer up to `2^bits` is one of its values).
const NARROW: [(Dtype, u8, u32); 3] = [
    (Dtype::F32, 1, 24),
    (Dtype::BF16, 2, 8),
    (Dtype::F16, 4, 11),
];

impl Formats {
    /// Exact in no dtype narrower than binary64.
    const NONE: Formats = Formats(0);
    /// Exact in every dtype.
    const ALL: Formats = Formats(1 | 2 | 4);

    /// `dtype` and every dtype whose values include its values.
    fn of(dtype: Dtype) -> Formats {
        match dtype {
            Dtype::F64 => Formats::NONE,
            Dtype::F32 => Formats(1),
            Dtype::BF16 => Formats(1 | 2),
            Dtype::F16 => Formats(1 | 4),
        }
    }

    /// Whether a register of these formats is exact in `dtype`.
    pub(super) fn contains(self, dtype: Dtype) -> bool {
        dtype == Dtype::F64 || self.0 & Formats::of(dtype).0 == Formats::of(dtype).0
    }

    /// Exact in both.
    fn meet(self, other: Formats) -> Formats {
        Formats(self.0 & other.0)
    }

    /// The dtypes `value` is a value of (every one for a NaN).
    fn of_value(value: f64) -> Formats {
        if value.is_nan() {
            return Formats::ALL;
        }
        let bits = NARROW
            .iter()
            .filter(|&&(dtype, _, _)| round_to(dtype, value).to_bits() == value.to_bits())
            .fold(0, |bits, &(_, bit, _)| bits | bit);
        Formats(bits)
    }

    /// The dtypes every one of `values` is a value of.
    fn of_values(values: &[f64]) -> Formats {
        values
            .iter()
            .fold(Formats::ALL, |all, &v| all.meet(Formats::of_value(v)))
    }

    /// The dtypes that hold every integer `0..=max` (a coordinate, a flat index).
    fn of_integers(max: u64) -> Formats {
        let bits = NARROW
            .iter()
            .filter(|&&(_, _, significand)| max <= 1u64 << significand)
            .fold(0, |bits, &(_, bit, _)| bits | bit);
        Formats(bits)
    }
}

/// What a program's registers are compared with and count over: the global shape's
/// sizes and element count, and the destination's dtype (the dtype of a
/// [`Step::Destination`]'s values, the fused source's).
pub(super) struct Fill<'a> {
    pub(super) shape: &'a [u64],
    pub(super) numel: u64,
    pub(super) dtype: Dtype,
}

/// The constant value of register `r`, if it is a constant.
fn constant(steps: &[Step], r: usize) -> Option<f64> {
    match steps[r] {
        Step::Constant(value) => Some(value),
        _ => None,
    }
}

/// Whether register `r` is the constant `+0.0` or `-0.0`.
fn is_zero(steps: &[Step], r: usize) -> bool {
    constant(steps, r) == Some(0.0)
}

/// Whether register `r` is the constant `1.0` or `-1.0`.
fn is_unit(steps: &[Step], r: usize) -> bool {
    constant(steps, r).is_some_and(|v| v.abs() == 1.0)
}

/// The dtypes `steps[register]` is exact in, given the earlier registers' (`found`).
/// Each case is the rule's proof; anything not listed is exact in binary64 only.
pub(super) fn rule(steps: &[Step], found: &[Formats], register: usize, fill: &Fill) -> Formats {
    match steps[register] {
        // A source's values are its sampler's rounded to its dtype (`source`); the
        // destination holds the fused source's, of the destination's dtype.
        Step::Source { dtype, .. } => Formats::of(dtype),
        Step::Destination => Formats::of(fill.dtype),
        Step::Constant(value) => Formats::of_value(value),
        // Integers `0..size`: exact in a dtype whose significand holds the largest.
        Step::Coord(dim) => Formats::of_integers(fill.shape[dim].saturating_sub(1)),
        Step::Flat => Formats::of_integers(fill.numel.saturating_sub(1)),
        // Gathered values: exact where every value of the table is.
        Step::Table(ref table) => Formats::of_values(&table.values),
        Step::Column { ref values, .. } => Formats::of_values(values),
        // A rounding's values are of its dtype; one of an exact register is that register.
        Step::Round(x, dtype) if found[x].contains(dtype) => found[x],
        Step::Round(_, dtype) => Formats::of(dtype),
        // `math::erfinv_f32_slice` gives float32 values (`as f32`, read back), or NaN.
        Step::ErfinvToF32(_) => Formats::of(Dtype::F32),
        // `-v` and `|v|` flip or clear the sign bit: a value of `d` stays one.
        Step::Unary(UnaryOp::Neg | UnaryOp::Abs, x) => found[x],
        // A value of a dtype with a `p`-bit significand is an integer from `2^(p-1)` on,
        // left as it is; below, `floor` and `round_half_even` give an integer of at most
        // `2^(p-1)` (or a zero), which the dtype holds.
        Step::Unary(UnaryOp::Floor | UnaryOp::RoundHalfEven, x) => found[x],
        // `1.0` or `0.0`.
        Step::Binary(
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq | BinaryOp::Ne,
            _,
            _,
        ) => Formats::ALL,
        // One of the operands, a zero of either's sign, or the one NaN (`minimum`).
        Step::Binary(BinaryOp::Min | BinaryOp::Max, a, b) => found[a].meet(found[b]),
        // One of the operands.
        Step::Where(_, a, b) | Step::Clamp(_, a, b) => found[a].meet(found[b]),
        // IEEE: `v + 0 = v` but for `-0 + +0 = +0`, and `v - 0` and `0 - v` are `v`, `-v`
        // or a zero: values of `v`'s dtypes (a NaN stays one).
        Step::Binary(BinaryOp::Add | BinaryOp::Sub, a, b) if is_zero(steps, b) => found[a],
        Step::Binary(BinaryOp::Add | BinaryOp::Sub, a, b) if is_zero(steps, a) => found[b],
        // `v * 1 = v / 1 = v` and `v * -1 = v / -1 = -v` (exact, NaN stays NaN).
        Step::Binary(BinaryOp::Mul | BinaryOp::Div, a, b) if is_unit(steps, b) => found[a],
        Step::Binary(BinaryOp::Mul, a, b) if is_unit(steps, a) => found[b],
        _ => Formats::NONE,
    }
}

/// Each `Round` of a register exact in its dtype made an alias of its operand: every
/// later operand naming it names the operand, and it is [`Step::Unused`]. Returns the
/// register that holds the result (the last one, or the register it aliases).
pub(super) fn alias_exact_rounds(steps: &mut [Step], fill: &Fill) -> usize {
    let mut alias: Vec<usize> = (0..steps.len()).collect();
    let mut found: Vec<Formats> = Vec::with_capacity(steps.len());
    for register in 0..steps.len() {
        // Operands are earlier registers: their aliases are final.
        steps[register].map_operands(|r| alias[r]);
        let formats = rule(steps, &found, register, fill);
        if let Step::Round(x, dtype) = steps[register] {
            if found[x].contains(dtype) {
                alias[register] = x;
                steps[register] = Step::Unused;
            }
        }
        found.push(formats);
    }
    alias[steps.len() - 1]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::builder::{Instr, Program};
    use super::*;
    use crate::fill::ParamStream;
    use crate::init::{Element, Init, OutBuf};
    use crate::math;
    use crate::region::Region;
    use crate::Threads;

    #[test]
    fn formats_of_values_and_integers() {
        let f32_only = Formats::of_value(0.1f32 as f64);
        assert!(f32_only.contains(Dtype::F32) && !f32_only.contains(Dtype::BF16));
        assert!(!Formats::of_value(0.1).contains(Dtype::F32));
        assert_eq!(Formats::of_value(-0.0), Formats::ALL);
        assert_eq!(Formats::of_value(f64::NEG_INFINITY), Formats::ALL);
        assert_eq!(Formats::of_value(f64::NAN), Formats::ALL);
        // 2^16: a float32 and bfloat16 value, beyond float16's largest (65504).
        assert_eq!(Formats::of_value(65536.0), Formats::of(Dtype::BF16));
        assert_eq!(Formats::of_value(1e-300), Formats::NONE);
        assert_eq!(Formats::of_integers(1 << 24), Formats::of(Dtype::F32));
        assert_eq!(Formats::of_integers((1 << 24) + 1), Formats::NONE);
        assert_eq!(Formats::of_integers(256), Formats::ALL);
        assert_eq!(Formats::of_integers(257), Formats::of(Dtype::F16));
        assert_eq!(Formats::of_integers(2049), Formats::of(Dtype::F32));
        for dtype in Dtype::ALL {
            assert!(Formats::of(dtype).contains(dtype));
            assert!(Formats::NONE.contains(Dtype::F64));
        }
    }

    /// Float32 values of every kind, each with its negation: zeros, infinities, NaN,
    /// the extremes, subnormals, integers and halves about `2^23`, values that are also
    /// bfloat16 and float16 values and values that are not.
    fn float32_specials() -> Vec<f64> {
        let some = [
            0.0,
            f64::INFINITY,
            f64::NAN,
            f64::from(f32::MAX),
            f64::from(f32::MIN_POSITIVE),
            f64::from(f32::from_bits(1)),
            8_388_607.5,
            8_388_608.0,
            0.5,
            1.5,
            2.5,
            0.3f32 as f64,
            f64::from(1.0f32 / 3.0),
            65504.0,
            65536.0,
            1.0,
        ];
        some.iter().flat_map(|&v| [v, -v]).collect()
    }

    /// The values of `p` (binary64 out, two threads), as bits; NaN is written as the one
    /// quiet NaN.
    fn bits(p: &Program, shape: &[u64]) -> Vec<u64> {
        let mut out = vec![0.0; shape.iter().product::<u64>() as usize];
        let region = Region::Flat { start: 0 };
        p.fill_region(3, shape, &region, OutBuf::F64(&mut out), Threads::Count(2))
            .unwrap();
        out.iter().map(|v| v.to_bits()).collect()
    }

    /// How many roundings `p` evaluates into a binary64 fill (alone, or in one pass with
    /// the operation they round).
    fn rounds(p: &Program, shape: &[u64]) -> usize {
        let compiled = p.compile(3, shape, Dtype::F64, None).unwrap();
        let rounding = |r: &usize| {
            matches!(
                compiled.steps[*r],
                Step::Round(..) | Step::RoundedBinary(..)
            )
        };
        compiled.order.iter().filter(|r| rounding(r)).count()
    }

    /// A rule's case: its name, the dtype the register is rounded to, the `Round`s the
    /// register's own steps evaluate, and the steps from two tables of the same length.
    type Case = (
        &'static str,
        Dtype,
        usize,
        fn(&mut Program, usize, usize) -> usize,
    );

    /// Each rule's case.
    fn cases() -> Vec<Case> {
        use BinaryOp::*;
        vec![
            ("table", Dtype::F32, 0, |_, x, _| x),
            ("round", Dtype::F32, 1, |p, x, _| {
                p.round(x, Dtype::BF16).unwrap()
            }),
            ("round", Dtype::BF16, 1, |p, x, _| {
                p.round(x, Dtype::BF16).unwrap()
            }),
            ("neg", Dtype::F32, 0, |p, x, _| {
                p.unary(UnaryOp::Neg, x).unwrap()
            }),
            ("abs", Dtype::F32, 0, |p, x, _| {
                p.unary(UnaryOp::Abs, x).unwrap()
            }),
            ("floor", Dtype::F32, 0, |p, x, _| {
                p.unary(UnaryOp::Floor, x).unwrap()
            }),
            ("round_half_even", Dtype::F32, 0, |p, x, _| {
                p.unary(UnaryOp::RoundHalfEven, x).unwrap()
            }),
            ("floor of f16", Dtype::F16, 1, |p, x, _| {
                let h = p.round(x, Dtype::F16).unwrap();
                p.unary(UnaryOp::Floor, h).unwrap()
            }),
            ("lt", Dtype::BF16, 0, |p, x, y| p.binary(Lt, x, y).unwrap()),
            ("ne", Dtype::F16, 0, |p, x, y| p.binary(Ne, x, y).unwrap()),
            ("min", Dtype::F32, 0, |p, x, y| p.binary(Min, x, y).unwrap()),
            ("max", Dtype::F32, 0, |p, x, y| p.binary(Max, x, y).unwrap()),
            ("where", Dtype::F32, 0, |p, x, y| {
                let c = p.binary(Gt, x, y).unwrap();
                p.select(c, x, y).unwrap()
            }),
            ("clamp", Dtype::F32, 0, |p, x, _| {
                let lo = p.constant(-1.5);
                let c = p.binary(Lt, x, lo).unwrap();
                p.select(c, lo, x).unwrap()
            }),
            ("x + 0", Dtype::F32, 0, |p, x, _| {
                let z = p.constant(0.0);
                p.binary(Add, x, z).unwrap()
            }),
            ("-0 + x", Dtype::F32, 0, |p, x, _| {
                let z = p.constant(-0.0);
                p.binary(Add, z, x).unwrap()
            }),
            ("x - 0", Dtype::F32, 0, |p, x, _| {
                let z = p.constant(0.0);
                p.binary(Sub, x, z).unwrap()
            }),
            ("-0 - x", Dtype::F32, 0, |p, x, _| {
                let z = p.constant(-0.0);
                p.binary(Sub, z, x).unwrap()
            }),
            ("x * -1", Dtype::F32, 0, |p, x, _| {
                let one = p.constant(-1.0);
                p.binary(Mul, x, one).unwrap()
            }),
            ("1 * x", Dtype::F32, 0, |p, x, _| {
                let one = p.constant(1.0);
                p.binary(Mul, one, x).unwrap()
            }),
            ("x / -1", Dtype::F32, 0, |p, x, _| {
                let one = p.constant(-1.0);
                p.binary(Div, x, one).unwrap()
            }),
        ]
    }

    /// Each rule's `Round` is an alias of its operand, and gives the bits of the same
    /// `Round` of `x - z` (`z` a zero the analysis cannot see: `flat * 0`; `x - +0` is
    /// `x`), which is evaluated: as the result, and read by a later step.
    #[test]
    fn a_round_of_an_exact_register_is_its_operand_bit_for_bit() {
        let x = float32_specials();
        let n = x.len();
        let y: Arc<[f64]> = x.iter().rev().copied().collect();
        // Every pair of the specials: `x` along dim 1, `y` along dim 0.
        let shape = [n as u64, n as u64];
        for (name, dtype, inner, build) in cases() {
            for read_after in [false, true] {
                let program = |hidden_zero: bool| {
                    let mut p = Program::new();
                    let a = p.table(x.clone().into(), vec![0, 1], 0);
                    let b = p.table(y.clone(), vec![1, 0], 0);
                    let mut r = build(&mut p, a, b);
                    if hidden_zero {
                        let (flat, zero) = (p.flat(), p.constant(0.0));
                        let z = p.binary(BinaryOp::Mul, flat, zero).unwrap();
                        r = p.binary(BinaryOp::Sub, r, z).unwrap();
                    }
                    let w = p.round(r, dtype).unwrap();
                    if read_after {
                        let three = p.constant(3.0);
                        p.binary(BinaryOp::Mul, w, three).unwrap();
                    }
                    p
                };
                let (fast, reference) = (program(false), program(true));
                assert_eq!(rounds(&fast, &shape), inner, "{name}");
                assert_eq!(rounds(&reference, &shape), inner + 1, "{name}");
                assert_eq!(bits(&fast, &shape), bits(&reference, &shape), "{name}");
            }
        }
    }

    /// Rounds the analysis cannot prove stay, and round: `x * 0.5` (a subnormal halved),
    /// `x + 1`, a float32 to bfloat16, a coordinate beyond `2^24`.
    #[test]
    fn a_round_that_may_change_a_value_is_evaluated() {
        let x = float32_specials();
        let shape = [x.len() as u64];
        let mut changed = 0;
        for (op, v, dtype) in [
            (BinaryOp::Mul, 0.5, Dtype::F32),
            (BinaryOp::Add, 1.0, Dtype::F32),
            (BinaryOp::Mul, 1.0, Dtype::BF16),
        ] {
            let mut p = Program::new();
            let a = p.table(x.clone().into(), vec![1], 0);
            let c = p.constant(v);
            let r = p.binary(op, a, c).unwrap();
            p.round(r, dtype).unwrap();
            assert_eq!(rounds(&p, &shape), 1, "{op:?} {v} {dtype:?}");
            let want: Vec<u64> = x
                .iter()
                .map(|&a| {
                    let r = if op == BinaryOp::Mul { a * v } else { a + v };
                    let r = round_to(dtype, r);
                    if r.is_nan() { f64::NAN } else { r }.to_bits()
                })
                .collect();
            assert_eq!(bits(&p, &shape), want, "{op:?} {v} {dtype:?}");
            changed += usize::from(want.iter().zip(&x).any(|(w, a)| *w != a.to_bits()));
        }
        assert_eq!(changed, 3);
        // Coordinates 2^24 - 1 ..= 2^24 + 1: the last is no float32 and rounds to 2^24.
        let mut p = Program::new();
        let c = p.coord(0).unwrap();
        p.round(c, Dtype::F32).unwrap();
        let mut out = [0.0; 3];
        let region = Region::Flat {
            start: (1 << 24) - 1,
        };
        let shape = [(1 << 24) + 2];
        assert_eq!(rounds(&p, &shape), 1);
        p.fill_region(0, &shape, &region, OutBuf::F64(&mut out), Threads::Count(1))
            .unwrap();
        let top = f64::from(1u32 << 24);
        assert_eq!(out, [top - 1.0, top, top]);
    }

    /// timm's `trunc_normal_` as capture records it (a float32 uniform, `erfinv`, `* c`,
    /// `+ 0`, the clamp's two `where`s, each step rounded to the float32 tensor): one of
    /// its five `Round`s is evaluated (the product's), and each element is its own value
    /// computed alone by the scalar functions.
    #[test]
    fn trunc_normal_evaluates_one_round_and_gives_each_elements_value() {
        let c = f64::from((0.02 * std::f64::consts::SQRT_2) as f32);
        let uniform = Init::Uniform { a: -1.0, b: 1.0 };
        let mut p = Program::new();
        let s = p.source(uniform, Dtype::F32).unwrap();
        let e = p.unary(UnaryOp::Erfinv, s).unwrap();
        let mut r = p.round(e, Dtype::F32).unwrap();
        let scale = p.constant(c);
        r = p.binary(BinaryOp::Mul, r, scale).unwrap();
        r = p.round(r, Dtype::F32).unwrap();
        let zero = p.constant(0.0);
        r = p.binary(BinaryOp::Add, r, zero).unwrap();
        r = p.round(r, Dtype::F32).unwrap();
        for (op, bound) in [(BinaryOp::Lt, -0.04f32), (BinaryOp::Gt, 0.04)] {
            let b = p.constant(f64::from(bound));
            let cond = p.binary(op, r, b).unwrap();
            let w = p.select(cond, b, r).unwrap();
            r = p.round(w, Dtype::F32).unwrap();
        }
        let shape = [300u64, 700];
        let compiled = p.compile(5, &shape, Dtype::F32, Some(0)).unwrap();
        // The source is read back; `erfinv` to float32, `mul` and its `Round` in one
        // pass, `add`, the two clamps in one pass.
        let evaluated: Vec<_> = compiled.order.iter().map(|&r| &compiled.steps[r]).collect();
        assert!(matches!(
            evaluated[..],
            [
                Step::ErfinvToF32(0),
                Step::RoundedBinary(BinaryOp::Mul, 1, _, Dtype::F32),
                Step::Binary(BinaryOp::Add, ..),
                Step::ClampPair([BinaryOp::Lt, BinaryOp::Gt], ..),
            ]
        ));
        assert_eq!(rounds(&p, &shape), 1);
        assert!(matches!(p.instrs[0], Instr::Source { .. }));
        let n = 300 * 700;
        let mut source = vec![0f32; n];
        let param = ParamStream {
            key64: 5,
            global_shape: shape.to_vec(),
            init: uniform,
        };
        let region = Region::Flat { start: 0 };
        param
            .fill_region(&region, OutBuf::F32(&mut source), Threads::Count(1))
            .unwrap();
        let mut out = vec![0f32; n];
        p.fill_region(5, &shape, &region, OutBuf::F32(&mut out), Threads::Count(3))
            .unwrap();
        let clamped = (0..n).filter(|&k| out[k].abs() == 0.04f32).count();
        assert!(clamped > 0 && clamped < n / 10, "{clamped}");
        for (k, (&u, &got)) in source.iter().zip(&out).enumerate() {
            let e = math::erfinv(u.widen()) as f32;
            let v = (f64::from(e) * c) as f32 + 0.0;
            let want = v.clamp(-0.04, 0.04);
            assert_eq!(got.to_bits(), want.to_bits(), "element {k}");
        }
    }
}
