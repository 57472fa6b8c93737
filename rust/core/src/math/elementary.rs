//! The elementary functions of init programs (stream-format.md §7): `expm1`, `log1p`,
//! `tanh`, `sin`, `cos`, `pow`, and the compositions `sigmoid`.
//!
//! Like the rest of [`crate::math`], each is a fixed sequence of IEEE-754 binary64
//! operations (`+ - * /`, `sqrt`, comparisons, bit manipulation), with no libm call and
//! no fused multiply-add, so its result is a pure function of its argument bits.
//!
//! # Sources
//!
//! Ports of fdlibm 5.3 as maintained in FreeBSD's msun (`lib/msun/src/s_expm1.c`,
//! `s_log1p.c`, `s_tanh.c`, `k_sin.c`, `k_cos.c`, `s_sin.c`, `s_cos.c`, `e_pow.c`, and
//! the small and medium paths of `e_rem_pio2.c`; Copyright (C) 1993 by Sun
//! Microsystems, Inc. "Developed at SunPro, a Sun Microsystems, Inc. business.
//! Permission to use, copy, modify, and distribute this software is freely granted,
//! provided that this notice is preserved."; `e_rem_pio2.c` optimized by Bruce D.
//! Evans), operation for operation and with the same constants.

// Coefficients as published (see `math`'s note).
#![allow(clippy::excessive_precision, clippy::unreadable_literal)]

use super::{exp, hi_word, lo_word};

// ---------------------------------------------------------------------------------
// expm1: s_expm1.c
// ---------------------------------------------------------------------------------

const O_THRESHOLD: f64 = 7.09782712893383973096e+02; // 0x40862E42 0xFEFA39EF
const LN2_HI: f64 = 6.93147180369123816490e-01; // 0x3fe62e42 0xfee00000
const LN2_LO: f64 = 1.90821492927058770002e-10; // 0x3dea39ef 0x35793c76
#[allow(clippy::approx_constant)]
const INVLN2: f64 = 1.44269504088896338700e+00; // 0x3ff71547 0x652b82fe
                                                // Scaled Q's: Qn_here = 2**n * Qn_above, for R(2*z) where z = hxs = x*x/2.
const Q1: f64 = -3.33333333333331316428e-02; // BFA11111 111110F4
const Q2: f64 = 1.58730158725481460165e-03; // 3F5A01A0 19FE5585
const Q3: f64 = -7.93650757867487942473e-05; // BF14CE19 9EAADBB7
const Q4: f64 = 4.00821782732936239552e-06; // 3ED0CFCA 86E65239
const Q5: f64 = -2.01099218183624371326e-07; // BE8AFDB7 6E09C32D

/// `2^k` for `-1022 <= k <= 1023`, built in the exponent field.
fn two_pow(k: i32) -> f64 {
    f64::from_bits(((0x3ff + i64::from(k)) as u64) << 52)
}

/// `exp(x) - 1`, a port of FreeBSD msun `s_expm1.c` (fdlibm), error below 1 ulp.
///
/// Method (from the source): reduce `x = k*ln2 + r`, `|r| <= 0.5*ln2`, with a
/// correction `c` for the rounding of `r`; `expm1(r)` from a degree-5 Remez
/// polynomial `R1` in `r^2` (error `< 2^-61`); then scale back by `2^k` in the way that
/// loses the least for each range of `k`.
///
/// `expm1(+inf) = +inf`, `expm1(-inf) = -1`, `expm1(NaN) = NaN`; `-1` below
/// `-56*ln2`; `+inf` above `7.09782712893383973096e+02`; `x` itself for `|x| < 2^-54`.
pub fn expm1(x: f64) -> f64 {
    let mut x = x;
    let mut hx = hi_word(x) as u32;
    let negative = hx & 0x8000_0000 != 0;
    hx &= 0x7fff_ffff; // high word of |x|

    // filter out huge and non-finite arguments
    if hx >= 0x4043_687A {
        // |x| >= 56*ln2
        if hx >= 0x4086_2E42 {
            // |x| >= 709.78...
            if hx >= 0x7ff0_0000 {
                if ((hx & 0xfffff) | lo_word(x)) != 0 {
                    return x + x; // NaN
                }
                return if negative { -1.0 } else { x }; // expm1(+-inf) = {inf, -1}
            }
            if x > O_THRESHOLD {
                return f64::INFINITY; // overflow (msun: huge*huge)
            }
        }
        if negative {
            return -1.0; // x < -56*ln2 (msun: tiny - one)
        }
    }

    // argument reduction
    let k: i32;
    let mut c = 0.0;
    if hx > 0x3fd6_2e42 {
        // |x| > 0.5 ln2
        let (hi, lo);
        if hx < 0x3FF0_A2B2 {
            // and |x| < 1.5 ln2
            if negative {
                hi = x + LN2_HI;
                lo = -LN2_LO;
                k = -1;
            } else {
                hi = x - LN2_HI;
                lo = LN2_LO;
                k = 1;
            }
        } else {
            // C's (int) conversion truncates toward zero, as `as i32` does.
            k = (INVLN2 * x + if negative { -0.5 } else { 0.5 }) as i32;
            let t = f64::from(k);
            hi = x - t * LN2_HI; // t*ln2_hi is exact here
            lo = t * LN2_LO;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if hx < 0x3c90_0000 {
        // |x| < 2^-54: expm1(x) = x (msun: x - (t - (huge + x)) with t = huge + x)
        return x;
    } else {
        k = 0;
    }

    // x is now in primary range
    let hfx = 0.5 * x;
    let hxs = x * hfx;
    let r1 = 1.0 + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
    let t = 3.0 - r1 * hfx;
    let mut e = hxs * ((r1 - t) / (6.0 - x * t));
    if k == 0 {
        return x - (x * e - hxs); // c is 0
    }
    e = x * (e - c) - c;
    e -= hxs;
    if k == -1 {
        return 0.5 * (x - e) - 0.5;
    }
    if k == 1 {
        return if x < -0.25 {
            -2.0 * (e - (x + 0.5))
        } else {
            1.0 + 2.0 * (x - e)
        };
    }
    if k <= -2 || k > 56 {
        // suffice to return exp(x) - 1
        let mut y = 1.0 - (e - x);
        if k == 1024 {
            y = y * 2.0 * f64::from_bits(0x7fe0_0000_0000_0000); // 2^1023
        } else {
            y *= two_pow(k);
        }
        return y - 1.0;
    }
    if k < 20 {
        let t = f64::from_bits(u64::from(0x3ff0_0000u32 - (0x0020_0000u32 >> k)) << 32); // 1 - 2^-k
        let y = t - (e - x);
        y * two_pow(k)
    } else {
        let t = two_pow(-k);
        let mut y = x - (e + t);
        y += 1.0;
        y * two_pow(k)
    }
}

// ---------------------------------------------------------------------------------
// log1p: s_log1p.c
// ---------------------------------------------------------------------------------

const LP1: f64 = 6.666666666666735130e-01; // 3FE55555 55555593
const LP2: f64 = 3.999999999940941908e-01; // 3FD99999 9997FA04
const LP3: f64 = 2.857142874366239149e-01; // 3FD24924 94229359
const LP4: f64 = 2.222219843214978396e-01; // 3FCC71C5 1D8E78AF
const LP5: f64 = 1.818357216161805012e-01; // 3FC74664 96CB03DE
const LP6: f64 = 1.531383769920937332e-01; // 3FC39A09 D078C69F
const LP7: f64 = 1.479819860511658591e-01; // 3FC2F112 DF3E5244

/// `x` with its high word replaced by `hi`.
fn with_hi(x: f64, hi: u32) -> f64 {
    f64::from_bits((u64::from(hi) << 32) | (x.to_bits() & 0xffff_ffff))
}

/// `log(1 + x)`, a port of FreeBSD msun `s_log1p.c` (fdlibm), error below 1 ulp.
///
/// Method (from the source): `1 + x = 2^k (1 + f)` with `sqrt(2)/2 < 1 + f < sqrt(2)`
/// and a correction `c/u` for the rounding of `u = 1 + x` when `k != 0`; then
/// `log(1 + f) = f - (hfsq - s*(hfsq + R))` with `s = f / (2 + f)` and the degree-14
/// polynomial of `log` (error `< 2^-58.45`).
///
/// `log1p(-1) = -inf`, `log1p(x < -1) = NaN` (including `-inf`), `log1p(+inf) = +inf`,
/// `log1p(NaN) = NaN`; `x` itself for `|x| < 2^-54`.
pub fn log1p(x: f64) -> f64 {
    let hx = hi_word(x);
    let ax = hx & 0x7fff_ffff;

    let mut k = 1;
    let mut f = 0.0;
    let mut hu = 0;
    let mut c = 0.0;
    if hx < 0x3FDA_827A {
        // 1 + x < sqrt(2)+
        if ax >= 0x3ff0_0000 {
            // x <= -1.0
            if x == -1.0 {
                return f64::NEG_INFINITY; // log1p(-1) = -inf
            }
            return f64::NAN; // log1p(x < -1) = NaN
        }
        if ax < 0x3e20_0000 {
            // |x| < 2^-29
            if ax < 0x3c90_0000 {
                return x; // |x| < 2^-54
            }
            return x - x * x * 0.5;
        }
        if hx > 0 || hx <= 0xbfd2_bec4_u32 as i32 {
            // sqrt(2)/2- <= 1 + x < sqrt(2)+
            k = 0;
            f = x;
            hu = 1;
        }
    }
    if hx >= 0x7ff0_0000 {
        return x + x; // +inf or NaN
    }
    if k != 0 {
        let mut u;
        if hx < 0x4340_0000 {
            u = 1.0 + x;
            hu = hi_word(u);
            k = (hu >> 20) - 1023;
            c = if k > 0 { 1.0 - (u - x) } else { x - (u - 1.0) }; // correction term
            c /= u;
        } else {
            u = x;
            hu = hi_word(u);
            k = (hu >> 20) - 1023;
            c = 0.0;
        }
        hu &= 0x000f_ffff;
        if hu < 0x6a09e {
            // u ~< sqrt(2)
            u = with_hi(u, (hu | 0x3ff0_0000) as u32); // normalize u
        } else {
            k += 1;
            u = with_hi(u, (hu | 0x3fe0_0000) as u32); // normalize u/2
            hu = (0x0010_0000 - hu) >> 2;
        }
        f = u - 1.0;
    }
    let hfsq = 0.5 * f * f;
    let dk = f64::from(k);
    if hu == 0 {
        // |f| < 2^-20
        if f == 0.0 {
            if k == 0 {
                return 0.0;
            }
            c += dk * LN2_LO;
            return dk * LN2_HI + c;
        }
        let r = hfsq * (1.0 - 0.66666666666666666 * f);
        if k == 0 {
            return f - r;
        }
        return dk * LN2_HI - ((r - (dk * LN2_LO + c)) - f);
    }
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * (LP1 + z * (LP2 + z * (LP3 + z * (LP4 + z * (LP5 + z * (LP6 + z * LP7))))));
    if k == 0 {
        f - (hfsq - s * (hfsq + r))
    } else {
        dk * LN2_HI - ((hfsq - (s * (hfsq + r) + (dk * LN2_LO + c))) - f)
    }
}

// ---------------------------------------------------------------------------------
// tanh: s_tanh.c; sigmoid
// ---------------------------------------------------------------------------------

/// Hyperbolic tangent, a port of FreeBSD msun `s_tanh.c` (fdlibm) on this module's
/// [`expm1`]: `x` for `|x| < 2^-28`; `-t / (t + 2)` with `t = expm1(-2|x|)` below 1;
/// `1 - 2 / (t + 2)` with `t = expm1(2|x|)` below 22; `1` from 22 on; odd. Error below
/// 1 ulp (measured, stream-format.md §7).
pub fn tanh(x: f64) -> f64 {
    let jx = hi_word(x);
    let ix = jx & 0x7fff_ffff;
    if ix >= 0x7ff0_0000 {
        // tanh(+-inf) = +-1, tanh(NaN) = NaN
        return if jx >= 0 {
            1.0 / x + 1.0
        } else {
            1.0 / x - 1.0
        };
    }
    let z = if ix < 0x4036_0000 {
        // |x| < 22
        if ix < 0x3e30_0000 {
            return x; // |x| < 2^-28
        }
        if ix >= 0x3ff0_0000 {
            // |x| >= 1
            let t = expm1(2.0 * x.abs());
            1.0 - 2.0 / (t + 2.0)
        } else {
            let t = expm1(-2.0 * x.abs());
            -t / (t + 2.0)
        }
    } else {
        1.0 // |x| >= 22 (msun: one - tiny)
    };
    if jx >= 0 {
        z
    } else {
        -z
    }
}

/// The logistic function `1 / (1 + exp(-x))`, written so that no step overflows or
/// cancels: `1 / (1 + exp(-x))` for `x >= 0`, `e / (1 + e)` with `e = exp(x)` for
/// `x < 0` (both within about 2 ulp; for `x < 0` the result is not rounded to 0 until
/// `exp(x)` underflows). `sigmoid(NaN) = NaN`.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + exp(-x))
    } else {
        let e = exp(x);
        e / (1.0 + e)
    }
}

// ---------------------------------------------------------------------------------
// sin, cos: k_sin.c, k_cos.c, s_sin.c, s_cos.c, e_rem_pio2.c (small and medium paths)
// ---------------------------------------------------------------------------------

const S1: f64 = -1.66666666666666324348e-01; // 0xBFC55555 0x55555549
const S2: f64 = 8.33333333332248946124e-03; // 0x3F811111 0x1110F8A6
const S3: f64 = -1.98412698298579493134e-04; // 0xBF2A01A0 0x19C161D5
const S4: f64 = 2.75573137070700676789e-06; // 0x3EC71DE3 0x57B1FE7D
const S5: f64 = -2.50507602534068634195e-08; // 0xBE5AE5E6 0x8A2B9CEB
const S6: f64 = 1.58969099521155010221e-10; // 0x3DE5D93A 0x5ACFD57C

const C1: f64 = 4.16666666666666019037e-02; // 0x3FA55555 0x5555554C
const C2: f64 = -1.38888888888741095749e-03; // 0xBF56C16C 0x16C15177
const C3: f64 = 2.48015872894767294178e-05; // 0x3EFA01A0 0x19CB1590
const C4: f64 = -2.75573143513906633035e-07; // 0xBE927E4F 0x809C52AD
const C5: f64 = 2.08757232129817482790e-09; // 0x3E21EE9E 0xBDB4B1C4
const C6: f64 = -1.13596475577881948265e-11; // 0xBDA8FAE9 0xBE8838D4

const INVPIO2: f64 = 6.36619772367581382433e-01; // 0x3FE45F30 0x6DC9C883
const PIO2_1: f64 = 1.57079632673412561417e+00; // 0x3FF921FB 0x54400000
const PIO2_1T: f64 = 6.07710050650619224932e-11; // 0x3DD0B461 0x1A626331
const PIO2_2: f64 = 6.07710050630396597660e-11; // 0x3DD0B461 0x1A600000
const PIO2_2T: f64 = 2.02226624879595063154e-21; // 0x3BA3198A 0x2E037073
const PIO2_3: f64 = 2.02226624871116645580e-21; // 0x3BA3198A 0x2E000000
const PIO2_3T: f64 = 8.47842766036889956997e-32; // 0x397B839A 0x252049C1

/// The largest `|x|` whose `sin` and `cos` the library computes: the largest binary64
/// below `0x413921fb_00000000` (about `2^20 * pi/2 = 1647099.33`), the end of fdlibm's
/// medium-size argument reduction (`e_rem_pio2.c`), exact to the last bit. Larger
/// finite arguments are refused (they would need the Payne-Hanek reduction of
/// `k_rem_pio2.c`).
pub const TRIG_MAX: f64 = f64::from_bits(0x4139_21fa_ffff_ffff);

/// `sin` on `[-pi/4, pi/4]` of `x + y` (`y` the tail of `x`; `iy == 0`: `y` is 0):
/// msun `k_sin.c`.
fn kernel_sin(x: f64, y: f64, iy: bool) -> f64 {
    let z = x * x;
    let w = z * z;
    let r = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    let v = z * x;
    if !iy {
        x + v * (S1 + z * r)
    } else {
        x - ((z * (0.5 * y - v * r) - y) - v * S1)
    }
}

/// `cos` on `[-pi/4, pi/4]` of `x + y`: msun `k_cos.c`.
fn kernel_cos(x: f64, y: f64) -> f64 {
    let z = x * x;
    let w = z * z;
    let r = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    w + (((1.0 - w) - hz) + (z * r - x * y))
}

/// `x - n*pi/2 = y0 + y1` for `pi/4 < |x| <= TRIG_MAX`: msun `e_rem_pio2.c`'s paths
/// for `|x| <= 9pi/4` and its medium path (three rounds of a 33+33+33+53-bit pi/2,
/// good to 151 bits), which is exact on this range.
fn rem_pio2(x: f64) -> (i32, f64, f64) {
    let hx = hi_word(x);
    let ix = hx & 0x7fff_ffff;
    // The four multiples near zero: one subtraction of n*pio2_1 and n*pio2_1t (good
    // to 85 bits), except close to a multiple of pi/2 (cancellation: medium path).
    let small = |n: i32| -> (i32, f64, f64) {
        let m = f64::from(n);
        let z = x - m * PIO2_1;
        let y0 = z - m * PIO2_1T;
        let y1 = (z - y0) - m * PIO2_1T;
        (n, y0, y1)
    };
    let sign = if hx > 0 { 1 } else { -1 };
    if ix <= 0x400f_6a7a {
        // |x| ~<= 5pi/4
        if (ix & 0xfffff) != 0x921fb {
            // not |x| ~= pi/2 or 2pi/2
            return small(if ix <= 0x4002_d97c { sign } else { 2 * sign });
        }
    } else if ix <= 0x401c_463b {
        // |x| ~<= 9pi/4
        if ix <= 0x4015_fdbc {
            // |x| ~<= 7pi/4
            if ix != 0x4012_d97c {
                return small(3 * sign);
            }
        } else if ix != 0x4019_21fb {
            return small(4 * sign);
        }
    }
    medium(x, ix)
}

/// msun `e_rem_pio2.c`'s medium path (`|x| ~< 2^20 * pi/2`).
fn medium(x: f64, ix: i32) -> (i32, f64, f64) {
    // Round to nearest integer (ties to even): 0x1.8p52 as in msun.
    const RINT: f64 = 6_755_399_441_055_744.0; // 2^52 + 2^51
    let fn_ = (x * INVPIO2 + RINT) - RINT;
    let n = fn_ as i32;
    let mut r = x - fn_ * PIO2_1;
    let mut w = fn_ * PIO2_1T; // 1st round good to 85 bits
    let j = ix >> 20;
    let mut y0 = r - w;
    let mut i = j - ((hi_word(y0) >> 20) & 0x7ff);
    if i > 16 {
        // 2nd iteration needed, good to 118
        let t = r;
        w = fn_ * PIO2_2;
        r = t - w;
        w = fn_ * PIO2_2T - ((t - r) - w);
        y0 = r - w;
        i = j - ((hi_word(y0) >> 20) & 0x7ff);
        if i > 49 {
            // 3rd iteration needed, 151 bits accuracy
            let t = r;
            w = fn_ * PIO2_3;
            r = t - w;
            w = fn_ * PIO2_3T - ((t - r) - w);
            y0 = r - w;
        }
    }
    let y1 = (r - y0) - w;
    (n, y0, y1)
}

/// Sine, a port of FreeBSD msun `s_sin.c` (fdlibm) for `|x| <= TRIG_MAX`, error below
/// 1 ulp. `sin(+-inf) = sin(NaN) = NaN`.
///
/// # Panics
/// Never; but a finite `|x| > TRIG_MAX` gives NaN here: callers refuse it first (the
/// program evaluator reports [`crate::Error::TrigArgument`]).
pub fn sin(x: f64) -> f64 {
    let ix = hi_word(x) & 0x7fff_ffff;
    if ix <= 0x3fe9_21fb {
        // |x| ~<= pi/4
        if ix < 0x3e40_0000 {
            return x; // |x| < 2^-27
        }
        return kernel_sin(x, 0.0, false);
    }
    if ix >= 0x7ff0_0000 || x.abs() > TRIG_MAX {
        return f64::NAN; // sin(inf or NaN) = NaN; beyond TRIG_MAX: refused upstream
    }
    let (n, y0, y1) = rem_pio2(x);
    match n & 3 {
        0 => kernel_sin(y0, y1, true),
        1 => kernel_cos(y0, y1),
        2 => -kernel_sin(y0, y1, true),
        _ => -kernel_cos(y0, y1),
    }
}

/// Cosine, a port of FreeBSD msun `s_cos.c` (fdlibm) for `|x| <= TRIG_MAX`, error below
/// 1 ulp. `cos(+-inf) = cos(NaN) = NaN`.
///
/// # Panics
/// Never; as [`sin`], a finite `|x| > TRIG_MAX` gives NaN here.
pub fn cos(x: f64) -> f64 {
    let ix = hi_word(x) & 0x7fff_ffff;
    if ix <= 0x3fe9_21fb {
        // |x| ~<= pi/4
        if ix < 0x3e46_a09e {
            return 1.0; // |x| < 2^-27 * sqrt(2)
        }
        return kernel_cos(x, 0.0);
    }
    if ix >= 0x7ff0_0000 || x.abs() > TRIG_MAX {
        return f64::NAN;
    }
    let (n, y0, y1) = rem_pio2(x);
    match n & 3 {
        0 => kernel_cos(y0, y1),
        1 => -kernel_sin(y0, y1, true),
        2 => -kernel_cos(y0, y1),
        _ => kernel_sin(y0, y1, true),
    }
}
