//! Deterministic elementary functions: `log`, `exp`, `erf`, `erfc`, the standard
//! normal CDF [`phi`] and its inverse [`phi_inv`]; and, for init programs
//! (stream-format.md §7), [`expm1`], [`log1p`], [`sin`], [`cos`] and [`pow`] (module
//! `elementary`, ports of FreeBSD msun's fdlibm) and [`tanh`], [`sigmoid`],
//! [`softplus`] and [`rsqrt`] (module `compensated`: double-double intermediates,
//! rounded once) and [`erfinv`](fn@erfinv) (module `erfinv`: AS 241 refined by a Newton step whose
//! residual is a double-double, the reference, with two fast paths proven to give its
//! bits).
//!
//! # Why this crate owns these functions
//!
//! The stream format (stream-format.md §4) requires every normal and truncated normal
//! value to be the same bits on every platform and every code path (scalar, SIMD,
//! GPU). The platform math library (`f64::ln`, `f64::exp`, the C `erf`, ...) is not
//! specified to the bit: results differ between glibc, musl, macOS, MSVC, CUDA's
//! libdevice and between versions of each. So everything here is written as a fixed
//! sequence of IEEE-754 binary64 operations: `+`, `-`, `*`, `/`, `sqrt` (all
//! correctly rounded in round-to-nearest-even), comparisons and bit manipulation via
//! [`f64::to_bits`] / [`f64::from_bits`]. Nothing calls libm, nothing uses
//! [`f64::mul_add`] or any other fused multiply-add (Rust never contracts `a * b + c`
//! into an fma on its own), so the result of each function is a pure function of
//! its argument bits.
//!
//! # Sources
//!
//! * [`log`], [`exp`], [`erf`], [`erfc`] are ports of fdlibm 5.3 (`e_log.c`,
//!   `e_exp.c`, `s_erf.c`; Copyright (C) 1993 by Sun Microsystems, Inc.
//!   "Developed at SunSoft, a Sun Microsystems, Inc. business. Permission to use,
//!   copy, modify, and distribute this software is freely granted, provided that
//!   this notice is preserved."), operation for operation and with the same
//!   constants, with the high/low word manipulation done on the `u64` bit pattern.
//! * [`phi_inv`] is Wichura's algorithm AS 241, `PPND16`: M. J. Wichura, "Algorithm
//!   AS 241: The Percentage Points of the Normal Distribution", Applied Statistics
//!   37(3), 1988, pp. 477-484, with the published coefficients.
//! * [`phi`] is `0.5 * erfc(-x / sqrt(2))` with the argument carried as a
//!   double-double (Dekker's exact product with Veltkamp splitting, T. J. Dekker,
//!   "A floating-point technique for extending the available precision", Numer.
//!   Math. 18, 1971) and a first-order correction, so that the rounding of
//!   `x / sqrt(2)` does not cost relative accuracy in the tails.

// The fdlibm and AS 241 coefficient tables are written exactly as published (more
// decimal digits than binary64 holds, no digit separators); keep them that way so they
// can be compared with the sources character for character.
#![allow(clippy::excessive_precision, clippy::unreadable_literal)]

mod compensated;
mod elementary;
mod erfinv;
mod lane_primitives;
mod lanes;
pub use compensated::{rsqrt, sigmoid, softplus, tanh};
pub use elementary::{cos, expm1, log1p, pow, sin, TRIG_MAX};
pub use erfinv::{
    erfinv, erfinv_f32_slice, erfinv_f32_slice_with, erfinv_slice, erfinv_slice_with,
};
pub use lanes::{lanes_slice, lanes_slice_with, LaneFunction};

// ---------------------------------------------------------------------------------
// Word access helpers (fdlibm's __HI / __LO).
// ---------------------------------------------------------------------------------

/// High 32 bits of the binary64 representation, as a signed integer (fdlibm `__HI`).
#[inline]
fn hi_word(x: f64) -> i32 {
    (x.to_bits() >> 32) as u32 as i32
}

/// Low 32 bits of the binary64 representation (fdlibm `__LO`).
#[inline]
fn lo_word(x: f64) -> u32 {
    x.to_bits() as u32
}

/// `x` with its high word replaced by `hi` (fdlibm `__HI(x) = hi`).
#[inline]
fn with_hi_word(x: f64, hi: i32) -> f64 {
    f64::from_bits((u64::from(hi as u32) << 32) | (x.to_bits() & 0xffff_ffff))
}

/// `x` with its low word cleared (fdlibm `__LO(x) = 0`).
#[inline]
fn clear_lo_word(x: f64) -> f64 {
    f64::from_bits(x.to_bits() & 0xffff_ffff_0000_0000)
}

/// `2^k` for `-1022 <= k <= 1023`, built in the exponent field.
#[inline]
fn two_pow(k: i32) -> f64 {
    f64::from_bits(((0x3ff + i64::from(k)) as u64) << 52)
}

// ---------------------------------------------------------------------------------
// log: fdlibm e_log.c
// ---------------------------------------------------------------------------------

// fdlibm e_log.c constants (hex bit patterns as in the source; checked by a test).
const LN2_HI: f64 = 6.93147180369123816490e-01; // 3fe62e42 fee00000
const LN2_LO: f64 = 1.90821492927058770002e-10; // 3dea39ef 35793c76
const TWO54: f64 = 1.80143985094819840000e+16; // 43500000 00000000
const LG1: f64 = 6.666666666666735130e-01; // 3FE55555 55555593
const LG2: f64 = 3.999999999940941908e-01; // 3FD99999 9997FA04
const LG3: f64 = 2.857142874366239149e-01; // 3FD24924 94229359
const LG4: f64 = 2.222219843214978396e-01; // 3FCC71C5 1D8E78AF
const LG5: f64 = 1.818357216161805012e-01; // 3FC74664 96CB03DE
const LG6: f64 = 1.531383769920937332e-01; // 3FC39A09 D078C69F
const LG7: f64 = 1.479819860511658591e-01; // 3FC2F112 DF3E5244

/// The constants of [`log`] by their fdlibm `e_log.c` names, for other implementations of
/// the same operations (the Triton kernel builds its constants from this table, so the
/// values have one home).
pub const LOG_CONSTANTS: [(&str, f64); 10] = [
    ("LN2_HI", LN2_HI),
    ("LN2_LO", LN2_LO),
    ("TWO54", TWO54),
    ("LG1", LG1),
    ("LG2", LG2),
    ("LG3", LG3),
    ("LG4", LG4),
    ("LG5", LG5),
    ("LG6", LG6),
    ("LG7", LG7),
];

/// Natural logarithm, a port of fdlibm 5.3 `e_log.c` (`__ieee754_log`, Sun
/// Microsystems 1993), error below 1 ulp.
///
/// Method (from the fdlibm source): reduce `x = 2^k * (1 + f)` with
/// `sqrt(2)/2 < 1 + f < sqrt(2)`, then `log(1 + f) = 2s + s*R(s^2)` with
/// `s = f / (2 + f)` and a degree-14 Remez polynomial `R`, and
/// `log(x) = k*ln2_hi + (f - (hfsq - (s*(hfsq + R) + k*ln2_lo)))`.
///
/// Special cases as in fdlibm: `log(+-0) = -inf`, `log(x < 0) = NaN` (including
/// `-inf`), `log(+inf) = +inf`, `log(NaN) = NaN`; subnormal inputs are scaled by
/// `2^54` first. The NaN returned for negative inputs is [`f64::NAN`] (fdlibm
/// computes `(x - x) / 0`, whose sign bit is platform dependent).
pub fn log(x: f64) -> f64 {
    let mut x = x;
    let mut hx = hi_word(x);
    let lx = lo_word(x);

    let mut k: i32 = 0;
    if hx < 0x0010_0000 {
        // x < 2^-1022
        if ((hx & 0x7fff_ffff) as u32 | lx) == 0 {
            return f64::NEG_INFINITY; // log(+-0) = -inf
        }
        if hx < 0 {
            return f64::NAN; // log(-#) = NaN
        }
        k -= 54;
        x *= TWO54; // subnormal number, scale up x
        hx = hi_word(x);
    }
    if hx >= 0x7ff0_0000 {
        return x + x; // +inf or NaN
    }
    k += (hx >> 20) - 1023;
    hx &= 0x000f_ffff;
    let i = (hx + 0x95f64) & 0x0010_0000;
    x = with_hi_word(x, hx | (i ^ 0x3ff0_0000)); // normalize x or x/2
    k += i >> 20;
    let f = x - 1.0;
    if (0x000f_ffff & (2 + hx)) < 3 {
        // |f| < 2^-20
        if f == 0.0 {
            if k == 0 {
                return 0.0;
            }
            let dk = f64::from(k);
            return dk * LN2_HI + dk * LN2_LO;
        }
        let r = f * f * (0.5 - 0.33333333333333333 * f);
        if k == 0 {
            return f - r;
        }
        let dk = f64::from(k);
        return dk * LN2_HI - ((r - dk * LN2_LO) - f);
    }
    let s = f / (2.0 + f);
    let dk = f64::from(k);
    let z = s * s;
    let mut i = hx - 0x6147a;
    let w = z * z;
    let j = 0x6b851 - hx;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    i |= j;
    let r = t2 + t1;
    if i > 0 {
        let hfsq = 0.5 * f * f;
        if k == 0 {
            f - (hfsq - s * (hfsq + r))
        } else {
            dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f)
        }
    } else if k == 0 {
        f - s * (f - r)
    } else {
        dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f)
    }
}

// ---------------------------------------------------------------------------------
// exp: fdlibm e_exp.c
// ---------------------------------------------------------------------------------

// fdlibm e_exp.c constants.
const HALF_PM: [f64; 2] = [0.5, -0.5];
const O_THRESHOLD: f64 = 7.09782712893383973096e+02; // 0x40862E42 0xFEFA39EF
const U_THRESHOLD: f64 = -7.45133219101941108420e+02; // 0xc0874910 0xD52D3051
const LN2_HI_PM: [f64; 2] = [
    6.93147180369123816490e-01,  // 0x3fe62e42 0xfee00000
    -6.93147180369123816490e-01, // 0xbfe62e42 0xfee00000
];
const LN2_LO_PM: [f64; 2] = [
    1.90821492927058770002e-10,  // 0x3dea39ef 0x35793c76
    -1.90821492927058770002e-10, // 0xbdea39ef 0x35793c76
];
// fdlibm's literal for 1/ln2 (the same bits as `std::f64::consts::LOG2_E`).
#[allow(clippy::approx_constant)]
const INVLN2: f64 = 1.44269504088896338700e+00; // 0x3ff71547 0x652b82fe
const TWOM1000: f64 = 9.33263618503218878990e-302; // 2^-1000 = 0x01700000 0
const P1: f64 = 1.66666666666666019037e-01; // 0x3FC55555 0x5555553E
const P2: f64 = -2.77777777770155933842e-03; // 0xBF66C16C 0x16BEBD93
const P3: f64 = 6.61375632143793436117e-05; // 0x3F11566A 0xAF25DE2C
const P4: f64 = -1.65339022054652515390e-06; // 0xBEBBBD41 0xC5D26BF1
const P5: f64 = 4.13813679705723846039e-08; // 0x3E663769 0x72BEA4D0

/// Exponential function, a port of fdlibm 5.3 `e_exp.c` (`__ieee754_exp`, Sun
/// Microsystems 1993), error below 1 ulp.
///
/// Method (from the fdlibm source): reduce `x = k*ln2 + r` with `|r| <= 0.5*ln2`
/// (`r` carried as `hi - lo`), approximate `exp(r) = 1 + r + r*c/(2 - c)` with
/// `c = r - r^2*(P1 + ... + P5*r^8)` (Remez, error `< 2^-59`), and scale by `2^k`
/// through the exponent field.
///
/// `exp(+inf) = +inf`, `exp(-inf) = 0`, `exp(NaN) = NaN`; overflows to `+inf` above
/// `7.09782712893383973096e+02` and underflows to `0` below
/// `-7.45133219101941108420e+02`; results below `2^-1022` are subnormal.
pub fn exp(x: f64) -> f64 {
    let mut x = x;
    let mut hx = hi_word(x) as u32; // high word of x
    let xsb = (hx >> 31) as usize; // sign bit of x
    hx &= 0x7fff_ffff; // high word of |x|

    // filter out non-finite argument
    if hx >= 0x4086_2E42 {
        // |x| >= 709.78...
        if hx >= 0x7ff0_0000 {
            if ((hx & 0x000f_ffff) | lo_word(x)) != 0 {
                return x + x; // NaN
            }
            return if xsb == 0 { x } else { 0.0 }; // exp(+-inf) = {inf, 0}
        }
        if x > O_THRESHOLD {
            return f64::INFINITY; // overflow (fdlibm: huge*huge)
        }
        if x < U_THRESHOLD {
            return 0.0; // underflow (fdlibm: twom1000*twom1000)
        }
    }

    // argument reduction
    let hi: f64;
    let lo: f64;
    let k: i32;
    if hx > 0x3fd6_2e42 {
        // |x| > 0.5 ln2
        if hx < 0x3FF0_A2B2 {
            // and |x| < 1.5 ln2
            hi = x - LN2_HI_PM[xsb];
            lo = LN2_LO_PM[xsb];
            k = 1 - 2 * xsb as i32;
        } else {
            // C's (int) conversion truncates toward zero, as `as i32` does.
            k = (INVLN2 * x + HALF_PM[xsb]) as i32;
            let t = f64::from(k);
            hi = x - t * LN2_HI_PM[0]; // t*ln2HI is exact here
            lo = t * LN2_LO_PM[0];
        }
        x = hi - lo;
    } else if hx < 0x3e30_0000 {
        // |x| < 2^-28 (fdlibm: if (huge + x > one) return one + x)
        return 1.0 + x;
    } else {
        k = 0;
        hi = 0.0;
        lo = 0.0;
    }

    // x is now in primary range
    let t = x * x;
    let c = x - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
    if k == 0 {
        return 1.0 - ((x * c) / (c - 2.0) - x);
    }
    let y = 1.0 - ((lo - (x * c) / (2.0 - c)) - hi);
    if k >= -1021 {
        // add k to y's exponent
        f64::from_bits((y.to_bits() as i64 + (i64::from(k) << 52)) as u64)
    } else {
        let y = f64::from_bits((y.to_bits() as i64 + (i64::from(k + 1000) << 52)) as u64);
        y * TWOM1000
    }
}

// ---------------------------------------------------------------------------------
// erf, erfc: fdlibm s_erf.c
// ---------------------------------------------------------------------------------

// fdlibm s_erf.c constants.
const TINY: f64 = 1e-300;
const ERX: f64 = 8.45062911510467529297e-01; // 0x3FEB0AC1 0x60000000
                                             // Coefficients for approximation to erf on [0, 0.84375]
const EFX: f64 = 1.28379167095512586316e-01; // 0x3FC06EBA 0x8214DB69
const EFX8: f64 = 1.02703333676410069053e+00; // 0x3FF06EBA 0x8214DB69
const PP0: f64 = 1.28379167095512558561e-01; // 0x3FC06EBA 0x8214DB68
const PP1: f64 = -3.25042107247001499370e-01; // 0xBFD4CD7D 0x691CB913
const PP2: f64 = -2.84817495755985104766e-02; // 0xBF9D2A51 0xDBD7194F
const PP3: f64 = -5.77027029648944159157e-03; // 0xBF77A291 0x236668E4
const PP4: f64 = -2.37630166566501626084e-05; // 0xBEF8EAD6 0x120016AC
const QQ1: f64 = 3.97917223959155352819e-01; // 0x3FD97779 0xCDDADC09
const QQ2: f64 = 6.50222499887672944485e-02; // 0x3FB0A54C 0x5536CEBA
const QQ3: f64 = 5.08130628187576562776e-03; // 0x3F74D022 0xC4D36B0F
const QQ4: f64 = 1.32494738004321644526e-04; // 0x3F215DC9 0x221C1A10
const QQ5: f64 = -3.96022827877536812320e-06; // 0xBED09C43 0x42A26120
                                              // Coefficients for approximation to erf in [0.84375, 1.25]
const PA0: f64 = -2.36211856075265944077e-03; // 0xBF6359B8 0xBEF77538
const PA1: f64 = 4.14856118683748331666e-01; // 0x3FDA8D00 0xAD92B34D
const PA2: f64 = -3.72207876035701323847e-01; // 0xBFD7D240 0xFBB8C3F1
const PA3: f64 = 3.18346619901161753674e-01; // 0x3FD45FCA 0x805120E4
const PA4: f64 = -1.10894694282396677476e-01; // 0xBFBC6398 0x3D3E28EC
const PA5: f64 = 3.54783043256182359371e-02; // 0x3FA22A36 0x599795EB
const PA6: f64 = -2.16637559486879084300e-03; // 0xBF61BF38 0x0A96073F
const QA1: f64 = 1.06420880400844228286e-01; // 0x3FBB3E66 0x18EEE323
const QA2: f64 = 5.40397917702171048937e-01; // 0x3FE14AF0 0x92EB6F33
const QA3: f64 = 7.18286544141962662868e-02; // 0x3FB2635C 0xD99FE9A7
const QA4: f64 = 1.26171219808761642112e-01; // 0x3FC02660 0xE763351F
const QA5: f64 = 1.36370839120290507362e-02; // 0x3F8BEDC2 0x6B51DD1C
const QA6: f64 = 1.19844998467991074170e-02; // 0x3F888B54 0x5735151D
                                             // Coefficients for approximation to erfc in [1.25, 1/0.35]
const RA0: f64 = -9.86494403484714822705e-03; // 0xBF843412 0x600D6435
const RA1: f64 = -6.93858572707181764372e-01; // 0xBFE63416 0xE4BA7360
const RA2: f64 = -1.05586262253232909814e+01; // 0xC0251E04 0x41B0E726
const RA3: f64 = -6.23753324503260060396e+01; // 0xC04F300A 0xE4CBA38D
const RA4: f64 = -1.62396669462573470355e+02; // 0xC0644CB1 0x84282266
const RA5: f64 = -1.84605092906711035994e+02; // 0xC067135C 0xEBCCABB2
const RA6: f64 = -8.12874355063065934246e+01; // 0xC0545265 0x57E4D2F2
const RA7: f64 = -9.81432934416914548592e+00; // 0xC023A0EF 0xC69AC25C
const SA1: f64 = 1.96512716674392571292e+01; // 0x4033A6B9 0xBD707687
const SA2: f64 = 1.37657754143519042600e+02; // 0x4061350C 0x526AE721
const SA3: f64 = 4.34565877475229228821e+02; // 0x407B290D 0xD58A1A71
const SA4: f64 = 6.45387271733267880336e+02; // 0x40842B19 0x21EC2868
const SA5: f64 = 4.29008140027567833386e+02; // 0x407AD021 0x57700314
const SA6: f64 = 1.08635005541779435134e+02; // 0x405B28A3 0xEE48AE2C
const SA7: f64 = 6.57024977031928170135e+00; // 0x401A47EF 0x8E484A93
const SA8: f64 = -6.04244152148580987438e-02; // 0xBFAEEFF2 0xEE749A62
                                              // Coefficients for approximation to erfc in [1/0.35, 28]
const RB0: f64 = -9.86494292470009928597e-03; // 0xBF843412 0x39E86F4A
const RB1: f64 = -7.99283237680523006574e-01; // 0xBFE993BA 0x70C285DE
const RB2: f64 = -1.77579549177547519889e+01; // 0xC031C209 0x555F995A
const RB3: f64 = -1.60636384855821916062e+02; // 0xC064145D 0x43C5ED98
const RB4: f64 = -6.37566443368389627722e+02; // 0xC083EC88 0x1375F228
const RB5: f64 = -1.02509513161107724954e+03; // 0xC0900461 0x6A2E5992
const RB6: f64 = -4.83519191608651397019e+02; // 0xC07E384E 0x9BDC383F
const SB1: f64 = 3.03380607434824582924e+01; // 0x403E568B 0x261D5190
const SB2: f64 = 3.25792512996573918826e+02; // 0x40745CAE 0x221B9F0A
const SB3: f64 = 1.53672958608443695994e+03; // 0x409802EB 0x189D5118
const SB4: f64 = 3.19985821950859553908e+03; // 0x40A8FFB7 0x688C246A
const SB5: f64 = 2.55305040643316442583e+03; // 0x40A3F219 0xCEDF3BE6
const SB6: f64 = 4.74528541206955367215e+02; // 0x407DA874 0xE79FE763
const SB7: f64 = -2.24409524465858183362e+01; // 0xC03670E2 0x42712D62

/// Error function, a port of fdlibm 5.3 `s_erf.c` (`erf`, Sun Microsystems 1993)
/// using this module's [`exp`].
///
/// Rational approximations on `[0, 0.84375]`, `[0.84375, 1.25]`, `[1.25, 1/0.35]`
/// and `[1/0.35, 6]`, with `erf(x) = 1 - exp(-x^2 - 0.5625 + R/S) / x` in the last
/// two (see the fdlibm source for the error bounds); `erf(+-inf) = +-1`,
/// `erf(NaN) = NaN`.
pub fn erf(x: f64) -> f64 {
    let hx = hi_word(x);
    let ix = hx & 0x7fff_ffff;
    if ix >= 0x7ff0_0000 {
        // erf(nan) = nan, erf(+-inf) = +-1
        let i = ((hx as u32) >> 31) << 1;
        return f64::from(1 - i as i32) + 1.0 / x;
    }

    if ix < 0x3feb_0000 {
        // |x| < 0.84375
        if ix < 0x3e30_0000 {
            // |x| < 2^-28
            if ix < 0x0080_0000 {
                return 0.125 * (8.0 * x + EFX8 * x); // avoid underflow
            }
            return x + EFX * x;
        }
        let z = x * x;
        let r = PP0 + z * (PP1 + z * (PP2 + z * (PP3 + z * PP4)));
        let s = 1.0 + z * (QQ1 + z * (QQ2 + z * (QQ3 + z * (QQ4 + z * QQ5))));
        let y = r / s;
        return x + x * y;
    }
    if ix < 0x3ff4_0000 {
        // 0.84375 <= |x| < 1.25
        let s = x.abs() - 1.0;
        let p = PA0 + s * (PA1 + s * (PA2 + s * (PA3 + s * (PA4 + s * (PA5 + s * PA6)))));
        let q = 1.0 + s * (QA1 + s * (QA2 + s * (QA3 + s * (QA4 + s * (QA5 + s * QA6)))));
        return if hx >= 0 { ERX + p / q } else { -ERX - p / q };
    }
    if ix >= 0x4018_0000 {
        // inf > |x| >= 6
        return if hx >= 0 { 1.0 - TINY } else { TINY - 1.0 };
    }
    let x = x.abs();
    let s = 1.0 / (x * x);
    let (r, ss) = if ix < 0x4006_DB6E {
        // |x| < 1/0.35
        (
            RA0 + s * (RA1 + s * (RA2 + s * (RA3 + s * (RA4 + s * (RA5 + s * (RA6 + s * RA7)))))),
            1.0 + s
                * (SA1
                    + s * (SA2
                        + s * (SA3 + s * (SA4 + s * (SA5 + s * (SA6 + s * (SA7 + s * SA8))))))),
        )
    } else {
        // |x| >= 1/0.35
        (
            RB0 + s * (RB1 + s * (RB2 + s * (RB3 + s * (RB4 + s * (RB5 + s * RB6))))),
            1.0 + s * (SB1 + s * (SB2 + s * (SB3 + s * (SB4 + s * (SB5 + s * (SB6 + s * SB7)))))),
        )
    };
    let z = clear_lo_word(x);
    let r = exp(-z * z - 0.5625) * exp((z - x) * (z + x) + r / ss);
    if hx >= 0 {
        1.0 - r / x
    } else {
        r / x - 1.0
    }
}

/// Complementary error function `1 - erf(x)`, a port of fdlibm 5.3 `s_erf.c`
/// (`erfc`, Sun Microsystems 1993) using this module's [`exp`].
///
/// For `x >= 1.25` it computes `exp(-z*z - 0.5625) * exp((z - x)*(z + x) + R/S) / x`
/// where `z` is `x` with its low 32 bits cleared (so `z*z` is exact), which keeps
/// full relative accuracy in the tail until the result underflows (near
/// `x = 26.55` it becomes subnormal and it is `0` from about `x = 27.2`).
/// `erfc(+inf) = 0`, `erfc(-inf) = 2`, `erfc(NaN) = NaN`.
pub fn erfc(x: f64) -> f64 {
    let hx = hi_word(x);
    let ix = hx & 0x7fff_ffff;
    if ix >= 0x7ff0_0000 {
        // erfc(nan) = nan, erfc(+-inf) = 0, 2
        return f64::from((((hx as u32) >> 31) << 1) as i32) + 1.0 / x;
    }

    if ix < 0x3feb_0000 {
        // |x| < 0.84375
        if ix < 0x3c70_0000 {
            // |x| < 2^-56
            return 1.0 - x;
        }
        let z = x * x;
        let r = PP0 + z * (PP1 + z * (PP2 + z * (PP3 + z * PP4)));
        let s = 1.0 + z * (QQ1 + z * (QQ2 + z * (QQ3 + z * (QQ4 + z * QQ5))));
        let y = r / s;
        if hx < 0x3fd0_0000 {
            // x < 1/4
            return 1.0 - (x + x * y);
        }
        let mut r = x * y;
        r += x - 0.5;
        return 0.5 - r;
    }
    if ix < 0x3ff4_0000 {
        // 0.84375 <= |x| < 1.25
        let s = x.abs() - 1.0;
        let p = PA0 + s * (PA1 + s * (PA2 + s * (PA3 + s * (PA4 + s * (PA5 + s * PA6)))));
        let q = 1.0 + s * (QA1 + s * (QA2 + s * (QA3 + s * (QA4 + s * (QA5 + s * QA6)))));
        if hx >= 0 {
            let z = 1.0 - ERX;
            return z - p / q;
        }
        let z = ERX + p / q;
        return 1.0 + z;
    }
    if ix < 0x403c_0000 {
        // |x| < 28
        let x = x.abs();
        let s = 1.0 / (x * x);
        let (r, ss) = if ix < 0x4006_DB6D {
            // |x| < 1/.35 ~ 2.857143
            (
                RA0 + s
                    * (RA1 + s * (RA2 + s * (RA3 + s * (RA4 + s * (RA5 + s * (RA6 + s * RA7)))))),
                1.0 + s
                    * (SA1
                        + s * (SA2
                            + s * (SA3 + s * (SA4 + s * (SA5 + s * (SA6 + s * (SA7 + s * SA8))))))),
            )
        } else {
            // |x| >= 1/.35 ~ 2.857143
            if hx < 0 && ix >= 0x4018_0000 {
                return 2.0 - TINY; // x < -6
            }
            (
                RB0 + s * (RB1 + s * (RB2 + s * (RB3 + s * (RB4 + s * (RB5 + s * RB6))))),
                1.0 + s
                    * (SB1 + s * (SB2 + s * (SB3 + s * (SB4 + s * (SB5 + s * (SB6 + s * SB7)))))),
            )
        };
        let z = clear_lo_word(x);
        let r = exp(-z * z - 0.5625) * exp((z - x) * (z + x) + r / ss);
        if hx > 0 {
            r / x
        } else {
            2.0 - r / x
        }
    } else if hx > 0 {
        TINY * TINY // 0
    } else {
        2.0 - TINY
    }
}

// ---------------------------------------------------------------------------------
// Phi: standard normal CDF
// ---------------------------------------------------------------------------------

/// `1/sqrt(2)` rounded to binary64 (0x3FE6A09E667F3BCD).
const FRAC_1_SQRT_2_HI: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// `1/sqrt(2) - FRAC_1_SQRT_2_HI` rounded to binary64 (-0x1.bdd3413b26456p-55).
const FRAC_1_SQRT_2_LO: f64 = -4.833646656726457e-17;
/// `2/sqrt(pi)` rounded to binary64 (0x3FF20DD750429B6D).
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;
/// Veltkamp splitting constant `2^27 + 1`.
const SPLITTER: f64 = 134217729.0;

/// Exact product `a * b = p + e` by Dekker's algorithm with Veltkamp splitting
/// (no fma). Valid while `|a|`, `|b|` and `|a*b|` stay far from overflow and
/// underflow, which the caller guarantees.
#[inline]
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    let ca = SPLITTER * a;
    let a_hi = ca - (ca - a);
    let a_lo = a - a_hi;
    let cb = SPLITTER * b;
    let b_hi = cb - (cb - b);
    let b_lo = b - b_hi;
    let e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
    (p, e)
}

/// Standard normal cumulative distribution function
/// `Phi(x) = P(N(0,1) <= x) = 0.5 * erfc(-x / sqrt(2))`.
///
/// Accurate to a few ulp *relative* over the whole range, including the lower tail
/// (`phi(-37.0)` is about `5.7e-300`; the result is subnormal below about
/// `x = -37.5` and `0` below about `x = -38.5`) and near `1` for positive `x`.
///
/// Method: `z = -x/sqrt(2)` is formed as a double-double `hi + lo` (Dekker's exact
/// product of `x` with the binary64 `1/sqrt(2)`, plus `x` times the rounding error
/// of that constant), because rounding `z` to binary64 alone would perturb
/// `erfc(z)` by a relative `2*z*|lo|`, about `2*z^2` ulp (over a thousand ulp at
/// `x = -37`). The result is then
/// `0.5 * (erfc(hi) - lo * (2/sqrt(pi)) * exp(-hi*hi))`, the first-order Taylor
/// correction; the second-order term is far below an ulp. [`erfc`] is fdlibm's.
///
/// Measured against mpmath (50 digits) over 125k points on `[-38.5, 8.5]`, denser
/// in the lower tail: at most 2.85 ulp (relative; at `x = -24.047`). The maximum
/// over each unit interval of `[-38, -1]` is between 2 and 2.9 ulp, and it is at
/// most 1 ulp for `x > 0`. Most of it is fdlibm's `erfc` (2.5 ulp max on
/// `[0.84, 27]`).
///
/// `phi(-inf) = 0`, `phi(+inf) = 1`, `phi(NaN) = NaN`.
pub fn phi(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    // For |x| >= 64 the result is 0 or 1 in binary64 (and the exact product below
    // must not overflow).
    if x.abs() >= 64.0 {
        return if x > 0.0 { 1.0 } else { 0.0 };
    }
    // t = x/sqrt(2) as th + tl (exact product by the constant's high part, plus the
    // constant's low part times x), renormalized by Fast2Sum (|p| >= |e|).
    let (p, e) = two_prod(x, FRAC_1_SQRT_2_HI);
    let e = e + x * FRAC_1_SQRT_2_LO;
    let th = p + e;
    let tl = e - (th - p);
    // z = -t = hi + lo
    let hi = -th;
    let lo = -tl;
    // erfc(hi + lo) = erfc(hi) - lo * (2/sqrt(pi)) * exp(-hi^2) + O(lo^2).
    let d = (lo * TWO_OVER_SQRT_PI) * exp(-(hi * hi));
    0.5 * (erfc(hi) - d)
}

/// Complement of the standard normal CDF, `1 - Phi(x) = Phi(-x)`, accurate to a few
/// ulp relative in the upper tail (it is exactly [`phi`]`(-x)`).
pub fn phi_complement(x: f64) -> f64 {
    phi(-x)
}

// ---------------------------------------------------------------------------------
// PhiInv: Wichura, AS 241 PPND16
// ---------------------------------------------------------------------------------

// AS 241 PPND16 coefficients, exactly as published (Wichura 1988).
// Central region |p - 0.5| <= 0.425, polynomials in r = 0.180625 - (p - 0.5)^2.
const A0: f64 = 3.3871328727963666080e0;
const A1: f64 = 1.3314166789178437745e+2;
const A2: f64 = 1.9715909503065514427e+3;
const A3: f64 = 1.3731693765509461125e+4;
const A4: f64 = 4.5921953931549871457e+4;
const A5: f64 = 6.7265770927008700853e+4;
const A6: f64 = 3.3430575583588128105e+4;
const A7: f64 = 2.5090809287301226727e+3;
const B1: f64 = 4.2313330701600911252e+1;
const B2: f64 = 6.8718700749205790830e+2;
const B3: f64 = 5.3941960214247511077e+3;
const B4: f64 = 2.1213794301586595867e+4;
const B5: f64 = 3.9307895800092710610e+4;
const B6: f64 = 2.8729085735721942674e+4;
const B7: f64 = 5.2264952788528545610e+3;

// Intermediate tail, r = sqrt(-log(min(p, q))) <= 5, polynomials in r - 1.6.
const C0: f64 = 1.42343711074968357734e0;
const C1: f64 = 4.63033784615654529590e0;
const C2: f64 = 5.76949722146069140550e0;
const C3: f64 = 3.64784832476320460504e0;
const C4: f64 = 1.27045825245236838258e0;
const C5: f64 = 2.41780725177450611770e-1;
const C6: f64 = 2.27238449892691845833e-2;
const C7: f64 = 7.74545014278341407640e-4;
const D1: f64 = 2.05319162663775882187e0;
const D2: f64 = 1.67638483018380384940e0;
const D3: f64 = 6.89767334985100004550e-1;
const D4: f64 = 1.48103976427480074590e-1;
const D5: f64 = 1.51986665636164571966e-2;
const D6: f64 = 5.47593808499534494600e-4;
const D7: f64 = 1.05075007164441684324e-9;

// Far tail, r > 5, polynomials in r - 5.
const E0: f64 = 6.65790464350110377720e0;
const E1: f64 = 5.46378491116411436990e0;
const E2: f64 = 1.78482653991729133580e0;
const E3: f64 = 2.96560571828504891230e-1;
const E4: f64 = 2.65321895265761230930e-2;
const E5: f64 = 1.24266094738807843860e-3;
const E6: f64 = 2.71155556874348757815e-5;
const E7: f64 = 2.01033439929228813265e-7;
const F1: f64 = 5.99832206555887937690e-1;
const F2: f64 = 1.36929880922735805310e-1;
const F3: f64 = 1.48753612908506148525e-2;
const F4: f64 = 7.86869131145613259100e-4;
const F5: f64 = 1.84631831751005468180e-5;
const F6: f64 = 1.42151175831644588870e-7;
const F7: f64 = 2.04426310338993978564e-15;

/// AS 241 `SPLIT1`: the central approximation is used for `|p - 0.5| <= SPLIT1`.
pub const PHI_INV_SPLIT1: f64 = 0.425;

/// The constants of [`phi_inv`] by their AS 241 names (`A0`..`F7`, as published;
/// `B0`, `D0` and `F0` are 1) and [`PHI_INV_SPLIT1`], for other implementations of the
/// same operations (the Triton kernel builds its constants from this table, so the
/// values have one home).
pub const PHI_INV_CONSTANTS: [(&str, f64); 46] = [
    ("A0", A0),
    ("A1", A1),
    ("A2", A2),
    ("A3", A3),
    ("A4", A4),
    ("A5", A5),
    ("A6", A6),
    ("A7", A7),
    ("B1", B1),
    ("B2", B2),
    ("B3", B3),
    ("B4", B4),
    ("B5", B5),
    ("B6", B6),
    ("B7", B7),
    ("C0", C0),
    ("C1", C1),
    ("C2", C2),
    ("C3", C3),
    ("C4", C4),
    ("C5", C5),
    ("C6", C6),
    ("C7", C7),
    ("D1", D1),
    ("D2", D2),
    ("D3", D3),
    ("D4", D4),
    ("D5", D5),
    ("D6", D6),
    ("D7", D7),
    ("E0", E0),
    ("E1", E1),
    ("E2", E2),
    ("E3", E3),
    ("E4", E4),
    ("E5", E5),
    ("E6", E6),
    ("E7", E7),
    ("F1", F1),
    ("F2", F2),
    ("F3", F3),
    ("F4", F4),
    ("F5", F5),
    ("F6", F6),
    ("F7", F7),
    ("PHI_INV_SPLIT1", PHI_INV_SPLIT1),
];

/// Inverse standard normal CDF in the central region `|p - 0.5| <= 0.425`
/// (`0.075 <= p <= 0.925`), AS 241 `PPND16`'s first rational approximation:
///
/// ```text
/// d = p - 0.5;  r = 0.180625 - d*d
/// PhiInv(p) = d * A(r) / B(r)      (degree-7 polynomials, Horner, highest first)
/// ```
///
/// It has no branches, so a SIMD implementation can evaluate it for all lanes. The
/// operations and their order are normative (stream-format.md §4): every code path
/// (scalar, SIMD, GPU) must perform exactly this sequence of `-`, `*`, `+`, `/`,
/// without fma contraction, to give the same bits. Outside the central region the
/// result is meaningless; [`phi_inv`] only calls it inside.
///
/// `p - 0.5` is exact for every `p` with `1 - p` representable (in particular for
/// all U32 and U52 values); the measured error is stated on [`phi_inv`].
#[inline(always)]
pub fn phi_inv_central(p: f64) -> f64 {
    central_of_offset(p - 0.5)
}

/// [`phi_inv_central`] of `p = 0.5 + d`, from `d` itself (so that [`erfinv`](fn@erfinv) keeps the
/// bits of a small `d` that `0.5 + d` would round away).
#[inline(always)]
fn central_of_offset(d: f64) -> f64 {
    let r = 0.180625 - d * d;
    // Horner, highest coefficient first, in exactly this order (see above).
    let num = ((((((A7 * r + A6) * r + A5) * r + A4) * r + A3) * r + A2) * r + A1) * r + A0;
    let den = ((((((B7 * r + B6) * r + B5) * r + B4) * r + B3) * r + B2) * r + B1) * r + 1.0;
    d * num / den
}

/// Inverse standard normal CDF in the tails `|p - 0.5| > 0.425`, AS 241 `PPND16`'s
/// second and third rational approximations. `q` must be `1 - p` (computed exactly
/// by the caller, so the upper tail keeps full precision):
///
/// ```text
/// s = if p < 0.5 { p } else { q };   r = sqrt(-log(s))        (this module's log)
/// r <= 5:  v = C(r - 1.6) / D(r - 1.6)
/// r >  5:  v = E(r - 5) / F(r - 5)      (degree-7 polynomials, Horner, highest first)
/// PhiInv(p) = if p < 0.5 { -v } else { v }
/// ```
///
/// Returns `-inf` for `p == 0` and `+inf` for `q == 0` (the smaller of the two is
/// the one that is zero). The operations and their order are normative (stream-format.md
/// section 4): SIMD and GPU paths must perform exactly this sequence of operations,
/// using this module's [`log`], without fma contraction.
pub fn phi_inv_tail(p: f64, q: f64) -> f64 {
    let lower = p < 0.5;
    let s = if lower { p } else { q };
    if s == 0.0 {
        return if lower {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
    }
    let r = (-log(s)).sqrt();
    let v = if r <= 5.0 {
        let r = r - 1.6;
        // Horner, highest coefficient first, in exactly this order.
        let num = ((((((C7 * r + C6) * r + C5) * r + C4) * r + C3) * r + C2) * r + C1) * r + C0;
        let den = ((((((D7 * r + D6) * r + D5) * r + D4) * r + D3) * r + D2) * r + D1) * r + 1.0;
        num / den
    } else {
        let r = r - 5.0;
        // Horner, highest coefficient first, in exactly this order.
        let num = ((((((E7 * r + E6) * r + E5) * r + E4) * r + E3) * r + E2) * r + E1) * r + E0;
        let den = ((((((F7 * r + F6) * r + F5) * r + F4) * r + F3) * r + F2) * r + F1) * r + 1.0;
        num / den
    };
    if lower {
        -v
    } else {
        v
    }
}

/// Inverse standard normal CDF (the quantile function), `Phi(PhiInv(p)) = p`.
///
/// The caller supplies `p` in `(0, 1)` and `q = 1 - p`, computed exactly (both U32
/// and U52 give exact complements), so that the upper tail keeps full precision.
/// Algorithm: Wichura's AS 241 `PPND16` (Applied Statistics 37(3), 1988,
/// pp. 477-484) with the published coefficients: [`phi_inv_central`] when
/// `|p - 0.5| <= 0.425`, otherwise [`phi_inv_tail`]; the result is always exactly
/// one of the two. `phi_inv(p, q) == -phi_inv(q, p)` holds exactly.
///
/// Returns `-inf` for `p == 0`, `+inf` for `q == 0`, NaN if `p` or `q` is NaN (or,
/// with `q = 1 - p`, if `p` is outside `[0, 1]`).
///
/// # Accuracy
///
/// Measured against the exact `PhiInv` of the binary64 input (mpmath, 50 digits),
/// over about 700k U32 inputs `(w + 0.5) * 2^-32` (uniform, log-spaced towards both
/// ends, all `w` within 3000 of both ends and 2000 of the 0.075/0.925 split) and
/// about 150k U52 inputs `(2m + 1) * 2^-53` (log-spaced towards 0 and 1, the 3000
/// extreme values at each end, and around both splits):
///
/// | region | U32 max | U52 max |
/// |---|---|---|
/// | central, `0.075 <= p <= 0.925` | 5.67 ulp | 5.31 ulp |
/// | tail, `r <= 5` (`min(p, q) >= 1.4e-11`) | 4.94 ulp | 5.14 ulp |
/// | tail, `r > 5` (`min(p, q) < 1.4e-11`) | not reached | 3.19 ulp |
///
/// so at most 6 ulp from the correctly rounded value (about 2 in 10,000 inputs are
/// 5 or 6 ulp away; over 80% are within 1; the smallest U32 value, `2^-33`, is in
/// the `r <= 5` tail). AS 241's approximation error itself (the rational functions
/// evaluated exactly) measured below 0.8 ulp everywhere; the rest is rounding in evaluating the two degree-7
/// polynomials and their quotient in plain binary64 (and, in the tails, the < 1
/// ulp error of [`log`]).
pub fn phi_inv(p: f64, q: f64) -> f64 {
    if p.is_nan() || q.is_nan() {
        return f64::NAN;
    }
    if (p - 0.5).abs() <= PHI_INV_SPLIT1 {
        phi_inv_central(p)
    } else {
        phi_inv_tail(p, q)
    }
}

// ---------------------------------------------------------------------------------
// Lane versions for the SIMD kernels: the same operations, in the same order.
// ---------------------------------------------------------------------------------

/// Lanes per block of [`phi_inv_tail_slice`].
const TAIL_BLOCK: usize = 64;
/// Lanes per vector step inside a block (one AVX2 register of f64; the stage loops
/// below run over whole quads, so no lane is left to scalar remainder code).
const QUAD: usize = 4;

/// `f64::from(k)` for `|k| < 2^51`, without a 64-bit integer conversion (which AVX2
/// lacks): the bit pattern of `2^52 + 2^51 + k` minus `2^52 + 2^51`, both exact.
#[inline(always)]
fn small_i64_to_f64(k: i64) -> f64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 2^52 + 2^51
    f64::from_bits(MAGIC.to_bits().wrapping_add(k as u64)) - MAGIC
}

/// `out[i] = phi_inv_tail(p[i], 1 - p[i])` for every `i < p.len()` (`out` at least as
/// long): the same bits as [`phi_inv_tail`], computed in vector lanes.
///
/// The lanes run the path that all but a few arguments take: [`log`] of a positive
/// normal `s = 2^k (1 + f)` with `k != 0` and `|f| >= 2^-20` (both of fdlibm's final
/// formulas computed, one selected), then the `r <= 5` rational function. Lanes off
/// that path (`min(p, q)` zero, subnormal or NaN, `|f| < 2^-20`, or `r > 5`, which U32
/// never reaches) are recomputed with the scalar [`phi_inv_tail`]. The integer steps
/// of `log` are fdlibm's, done in 64-bit lanes (every intermediate fits, so the values
/// are those of the 32-bit original).
///
/// The work is split into stages, each a loop over all lanes of a block, so that the
/// long dependency chains (two divisions, a square root, two degree-7 polynomials) of
/// several lanes overlap.
#[inline(always)]
pub fn phi_inv_tail_slice(p: &[f64], out: &mut [f64]) {
    for (p, out) in p.chunks(TAIL_BLOCK).zip(out.chunks_mut(TAIL_BLOCK)) {
        tail_block(p, out);
    }
}

/// One block of [`phi_inv_tail_slice`]: `p.len() <= TAIL_BLOCK`.
#[inline(always)]
fn tail_block(p_in: &[f64], out: &mut [f64]) {
    const M: usize = TAIL_BLOCK;
    let n = p_in.len();
    let quads = n.div_ceil(QUAD);
    // Pad with a harmless argument on the common path.
    let mut p = [0.01f64; M];
    p[..n].copy_from_slice(p_in);
    let mut lower = [false; M];
    let mut off_path = [false; M];
    let mut f = [0f64; M];
    let mut dk = [0f64; M];
    let mut hx_low = [0i64; M];
    // Stage 1: s = min(p, q) and log's argument reduction.
    for quad in 0..quads {
        for lane in QUAD * quad..QUAD * quad + QUAD {
            let q = 1.0 - p[lane];
            lower[lane] = p[lane] < 0.5;
            let s = if lower[lane] { p[lane] } else { q };
            let bits = s.to_bits();
            let hx = (bits >> 32) as i64; // s >= 0: the sign bit is clear
            let off_range = !(0x0010_0000..0x7ff0_0000).contains(&hx);
            let mut k = ((hx as u64) >> 20) as i64 - 1023;
            let hx = hx & 0x000f_ffff;
            let i = (hx + 0x95f64) & 0x0010_0000;
            let x =
                f64::from_bits((((hx | (i ^ 0x3ff0_0000)) as u64) << 32) | (bits & 0xffff_ffff));
            k += i >> 20;
            f[lane] = x - 1.0;
            let tiny_f = (0x000f_ffff & (2 + hx)) < 3;
            off_path[lane] = off_range || tiny_f || k == 0;
            dk[lane] = small_i64_to_f64(k);
            hx_low[lane] = hx;
        }
    }
    // Stage 2: s = f / (2 + f).
    let mut ratio = [0f64; M];
    for quad in 0..quads {
        for lane in QUAD * quad..QUAD * quad + QUAD {
            ratio[lane] = f[lane] / (2.0 + f[lane]);
        }
    }
    // Stage 3: the rest of log, then r = sqrt(-log(s)) - 1.6.
    let mut r = [0f64; M];
    for quad in 0..quads {
        for lane in QUAD * quad..QUAD * quad + QUAD {
            let (f, s, dk, hx) = (f[lane], ratio[lane], dk[lane], hx_low[lane]);
            let z = s * s;
            let mut i = hx - 0x6147a;
            let w = z * z;
            let j = 0x6b851 - hx;
            let t1 = w * (LG2 + w * (LG4 + w * LG6));
            let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
            i |= j;
            let rr = t2 + t1;
            let hfsq = 0.5 * f * f;
            let with_hfsq = dk * LN2_HI - ((hfsq - (s * (hfsq + rr) + dk * LN2_LO)) - f);
            let without = dk * LN2_HI - ((s * (f - rr) - dk * LN2_LO) - f);
            let log_s = if i > 0 { with_hfsq } else { without };
            let root = (-log_s).sqrt();
            // `phi_inv_tail` takes the `r <= 5` branch exactly when this holds.
            let intermediate = root <= 5.0;
            off_path[lane] |= !intermediate;
            r[lane] = root - 1.6;
        }
    }
    // Stage 4: the r <= 5 rational function, Horner, exactly as in `phi_inv_tail`.
    let mut x = [0f64; M];
    for quad in 0..quads {
        for lane in QUAD * quad..QUAD * quad + QUAD {
            let r = r[lane];
            let num = ((((((C7 * r + C6) * r + C5) * r + C4) * r + C3) * r + C2) * r + C1) * r + C0;
            let den =
                ((((((D7 * r + D6) * r + D5) * r + D4) * r + D3) * r + D2) * r + D1) * r + 1.0;
            let v = num / den;
            x[lane] = if lower[lane] { -v } else { v };
        }
    }
    for lane in 0..n {
        out[lane] = if off_path[lane] {
            phi_inv_tail(p[lane], 1.0 - p[lane])
        } else {
            x[lane]
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite binary64 values: the
    /// number of representable values between them (0 if equal, +0 and -0 equal).
    fn ulp_diff(a: f64, b: f64) -> u64 {
        fn ordered(x: f64) -> i128 {
            let b = x.to_bits() as i64;
            i128::from(if b < 0 { i64::MIN - b } else { b })
        }
        assert!(!a.is_nan() && !b.is_nan(), "ulp_diff of NaN: {a} {b}");
        u64::try_from((ordered(a) - ordered(b)).unsigned_abs()).unwrap_or(u64::MAX)
    }

    fn f(bits: u64) -> f64 {
        f64::from_bits(bits)
    }

    /// Checks `func(x)` against correctly rounded references `(x bits, ref bits)`.
    fn check1(name: &str, func: fn(f64) -> f64, table: &[(u64, u64)], max_ulp: u64) {
        for &(xb, rb) in table {
            let (x, want) = (f(xb), f(rb));
            let got = func(x);
            let d = ulp_diff(got, want);
            assert!(
                d <= max_ulp,
                "{name}({x:e}) = {got:e} ({:#018x}), want {want:e} ({rb:#018x}): {d} ulp",
                got.to_bits()
            );
        }
    }

    #[test]
    fn tail_lanes_equal_the_scalar_tail() {
        let mut ps = vec![
            0.0,
            1.0,
            0.5,
            0.074_999,
            0.925_001,
            f64::MIN_POSITIVE,
            5e-324,
        ];
        // Powers of two and their neighbours (log's |f| < 2^-20 branch), both tails.
        for e in 4..1070 {
            let base = f64::powi(2.0, -e);
            for bits_off in [-3i64, -1, 0, 1, 2, 1 << 30, -(1 << 30)] {
                let p = f64::from_bits((base.to_bits() as i64 + bits_off) as u64);
                ps.push(p);
                ps.push(1.0 - p);
            }
        }
        // Every U32 value in the lower tail with a stride, and their complements.
        for w in (0u32..322_122_547).step_by(977) {
            let p = (f64::from(w) + 0.5) * f64::powi(2.0, -32);
            ps.push(p);
            ps.push(1.0 - p);
        }
        // U52 values log-spaced towards 0 (r > 5 below about 1.4e-11).
        let mut p = 0.075;
        while p > 1e-300 {
            ps.push(p);
            ps.push(1.0 - p);
            p *= 0.937;
        }
        let mut lanes = vec![0f64; ps.len()];
        phi_inv_tail_slice(&ps, &mut lanes);
        for (&p, &got) in ps.iter().zip(&lanes) {
            let want = phi_inv_tail(p, 1.0 - p);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "p = {p:e}: {got:e} vs {want:e}"
            );
        }
        // Short slices (padding of the last group).
        for len in 0..20 {
            let mut out = vec![0f64; len];
            phi_inv_tail_slice(&ps[..len], &mut out);
            for (&p, &got) in ps[..len].iter().zip(&out) {
                assert_eq!(got.to_bits(), phi_inv_tail(p, 1.0 - p).to_bits());
            }
        }
    }

    #[test]
    fn small_integer_conversion_is_exact() {
        for k in -1200i64..1200 {
            assert_eq!(small_i64_to_f64(k), k as f64);
        }
    }

    #[test]
    fn ulp_diff_basics() {
        assert_eq!(ulp_diff(1.0, 1.0), 0);
        assert_eq!(ulp_diff(0.0, -0.0), 0);
        assert_eq!(ulp_diff(1.0, f(0x3ff0_0000_0000_0001)), 1);
        assert_eq!(ulp_diff(f(1), -f(1)), 2);
        assert_eq!(ulp_diff(1.0, f(0x3fef_ffff_ffff_ffff)), 1);
    }

    /// The decimal constants convert to the bit patterns given in the sources.
    #[test]
    fn constants_match_published_bit_patterns() {
        let table: &[(f64, u64)] = &[
            (LN2_HI, 0x3fe62e42_fee00000),
            (LN2_LO, 0x3dea39ef_35793c76),
            (TWO54, 0x43500000_00000000),
            (LG1, 0x3fe55555_55555593),
            (LG2, 0x3fd99999_9997fa04),
            (LG3, 0x3fd24924_94229359),
            (LG4, 0x3fcc71c5_1d8e78af),
            (LG5, 0x3fc74664_96cb03de),
            (LG6, 0x3fc39a09_d078c69f),
            (LG7, 0x3fc2f112_df3e5244),
            (O_THRESHOLD, 0x40862e42_fefa39ef),
            (U_THRESHOLD, 0xc0874910_d52d3051),
            (LN2_HI_PM[0], 0x3fe62e42_fee00000),
            (LN2_HI_PM[1], 0xbfe62e42_fee00000),
            (LN2_LO_PM[0], 0x3dea39ef_35793c76),
            (LN2_LO_PM[1], 0xbdea39ef_35793c76),
            (INVLN2, 0x3ff71547_652b82fe),
            (TWOM1000, 0x01700000_00000000),
            (P1, 0x3fc55555_5555553e),
            (P2, 0xbf66c16c_16bebd93),
            (P3, 0x3f11566a_af25de2c),
            (P4, 0xbebbbd41_c5d26bf1),
            (P5, 0x3e663769_72bea4d0),
            (ERX, 0x3feb0ac1_60000000),
            (EFX, 0x3fc06eba_8214db69),
            (EFX8, 0x3ff06eba_8214db69),
            (PP0, 0x3fc06eba_8214db68),
            (PP1, 0xbfd4cd7d_691cb913),
            (PP2, 0xbf9d2a51_dbd7194f),
            (PP3, 0xbf77a291_236668e4),
            (PP4, 0xbef8ead6_120016ac),
            (QQ1, 0x3fd97779_cddadc09),
            (QQ2, 0x3fb0a54c_5536ceba),
            (QQ3, 0x3f74d022_c4d36b0f),
            (QQ4, 0x3f215dc9_221c1a10),
            (QQ5, 0xbed09c43_42a26120),
            (PA0, 0xbf6359b8_bef77538),
            (PA1, 0x3fda8d00_ad92b34d),
            (PA2, 0xbfd7d240_fbb8c3f1),
            (PA3, 0x3fd45fca_805120e4),
            (PA4, 0xbfbc6398_3d3e28ec),
            (PA5, 0x3fa22a36_599795eb),
            (PA6, 0xbf61bf38_0a96073f),
            (QA1, 0x3fbb3e66_18eee323),
            (QA2, 0x3fe14af0_92eb6f33),
            (QA3, 0x3fb2635c_d99fe9a7),
            (QA4, 0x3fc02660_e763351f),
            (QA5, 0x3f8bedc2_6b51dd1c),
            (QA6, 0x3f888b54_5735151d),
            (RA0, 0xbf843412_600d6435),
            (RA1, 0xbfe63416_e4ba7360),
            (RA2, 0xc0251e04_41b0e726),
            (RA3, 0xc04f300a_e4cba38d),
            (RA4, 0xc0644cb1_84282266),
            (RA5, 0xc067135c_ebccabb2),
            (RA6, 0xc0545265_57e4d2f2),
            (RA7, 0xc023a0ef_c69ac25c),
            (SA1, 0x4033a6b9_bd707687),
            (SA2, 0x4061350c_526ae721),
            (SA3, 0x407b290d_d58a1a71),
            (SA4, 0x40842b19_21ec2868),
            (SA5, 0x407ad021_57700314),
            (SA6, 0x405b28a3_ee48ae2c),
            (SA7, 0x401a47ef_8e484a93),
            (SA8, 0xbfaeeff2_ee749a62),
            (RB0, 0xbf843412_39e86f4a),
            (RB1, 0xbfe993ba_70c285de),
            (RB2, 0xc031c209_555f995a),
            (RB3, 0xc064145d_43c5ed98),
            (RB4, 0xc083ec88_1375f228),
            (RB5, 0xc0900461_6a2e5992),
            (RB6, 0xc07e384e_9bdc383f),
            (SB1, 0x403e568b_261d5190),
            (SB2, 0x40745cae_221b9f0a),
            (SB3, 0x409802eb_189d5118),
            (SB4, 0x40a8ffb7_688c246a),
            (SB5, 0x40a3f219_cedf3be6),
            (SB6, 0x407da874_e79fe763),
            (SB7, 0xc03670e2_42712d62),
            // 1/sqrt(2) and 2/sqrt(pi) from mpmath at 50 digits, rounded to binary64.
            (FRAC_1_SQRT_2_HI, 0x3fe6a09e_667f3bcd),
            (FRAC_1_SQRT_2_LO, 0xbc8bdd34_13b26456),
            (TWO_OVER_SQRT_PI, 0x3ff20dd7_50429b6d),
        ];
        for (i, &(v, bits)) in table.iter().enumerate() {
            assert_eq!(v.to_bits(), bits, "constant #{i} is {v:e}");
        }
    }

    // Reference values in the tables below are the exact function values computed
    // with mpmath at 50 significant digits and rounded to nearest binary64: (argument
    // bits, correctly rounded result bits).

    #[test]
    fn log_known_values() {
        let table: &[(u64, u64)] = &[
            (0x0000000000000001, 0xc0874385446d71c3), // log(5e-324)
            (0x00000000000026be, 0xc086f9e75a613381), // log(4.9e-320)
            (0x000012688b70e62b, 0xc0864e69394d9508), // log(1e-310)
            (0x0010000000000000, 0xc086232bdd7abcd2), // log(2.2250738585072014e-308)
            (0x01a56e1fc2f8f359, 0xc085963447f87fb5), // log(1e-300)
            (0x16687e92154ef7ac, 0xc07cc845b54b54f2), // log(1e-200)
            (0x2b2bff2ee48e0530, 0xc06cc845b54b54f2), // log(1e-100)
            (0x3ee4f8b588e368f1, 0xc027069e2aa2aa5b), // log(1e-05)
            (0x3f50624dd2f1a9fc, 0xc01ba18a998fffa0), // log(0.001)
            (0x3fb999999999999a, 0xc0026bb1bbb55515), // log(0.1)
            (0x3fd3333333333333, 0xbff34378fcbda721), // log(0.3)
            (0x3fe0000000000000, 0xbfe62e42fefa39ef), // log(0.5)
            (0x3fe6a09e667f3bcd, 0xbfd62e42fefa39ee), // log(0.7071067811865476)
            (0x3fe8000000000000, 0xbfd269621134db92), // log(0.75)
            (0x3fefffffffffffff, 0xbca0000000000000), // log(0.9999999999999999)
            (0x3fefffffca501acb, 0xbe7ad7f2b1049b9f), // log(0.9999999)
            (0x3ff000001ad7f29b, 0x3e7ad7f2847b6492), // log(1.0000001)
            (0x3ff0000000000001, 0x3cafffffffffffff), // log(1.0000000000000002)
            (0x3ff45ca6cc6694ad, 0x3fcedba2f2b5aadd), // log(1.272620008888491)
            (0x3ff6a09e65dc27df, 0x3fd62e42fd2cf8f6), // log(1.41421356)
            (0x3ff8000000000000, 0x3fd9f323ecbf984c), // log(1.5)
            (0x4000000000000000, 0x3fe62e42fefa39ef), // log(2.0)
            (0x4005bf0a8b145769, 0x3ff0000000000000), // log(2.718281828459045)
            (0x4008000000000000, 0x3ff193ea7aad030b), // log(3.0)
            (0x401c000000000000, 0x3fff2272ae325a57), // log(7.0)
            (0x4024000000000000, 0x40026bb1bbb55516), // log(10.0)
            (0x40f0000000000000, 0x40262e42fefa39ef), // log(65536.0)
            (0x40fe240c9fbe76c9, 0x40277281cad8a844), // log(123456.789)
            (0x4202a05f20000000, 0x4037069e2aa2aa5b), // log(10000000000.0)
            (0x7e37e43c8800759c, 0x4085963447f87fb5), // log(1e+300)
            (0x7fefffffffffffff, 0x40862e42fefa39ef), // log(1.7976931348623157e+308)
        ];
        // fdlibm e_log.c: error < 1 ulp, so at most 1 ulp from the rounded value.
        check1("log", log, table, 1);
    }

    #[test]
    fn log_special_values() {
        assert_eq!(log(0.0), f64::NEG_INFINITY);
        assert_eq!(log(-0.0), f64::NEG_INFINITY);
        assert!(log(-1.0).is_nan());
        assert!(log(-f64::MIN_POSITIVE / 4.0).is_nan());
        assert!(log(f64::NEG_INFINITY).is_nan());
        assert!(log(f64::NAN).is_nan());
        assert_eq!(log(f64::INFINITY), f64::INFINITY);
        assert_eq!(log(1.0).to_bits(), 0);
        assert_eq!(log(2.0), LN2_HI + LN2_LO);
    }

    #[test]
    fn exp_known_values() {
        let table: &[(u64, u64)] = &[
            (0x3bc79ca10c924223, 0x3ff0000000000000), // exp(1e-20)
            (0xbbc79ca10c924223, 0x3ff0000000000000), // exp(-1e-20)
            (0x3e29c511dc3a41df, 0x3ff0000000ce288f), // exp(3e-09)
            (0x3fb999999999999a, 0x3ff1aec7b35a00d4), // exp(0.1)
            (0xbfb999999999999a, 0x3fecf46d99d52b3a), // exp(-0.1)
            (0x3fd62e33eff19503, 0x3ff6a099138a089d), // exp(0.34657)
            (0x3fe0000000000000, 0x3ffa61298e1e069c), // exp(0.5)
            (0xbfe0000000000000, 0x3fe368b2fc6f960a), // exp(-0.5)
            (0x3fe62e42fefa39ef, 0x4000000000000000), // exp(0.6931471805599453)
            (0x3ff0000000000000, 0x4005bf0a8b145769), // exp(1.0)
            (0xbff0000000000000, 0x3fd78b56362cef38), // exp(-1.0)
            (0x3ff0a29c779a6b51, 0x4006a07f99728ef9), // exp(1.0397)
            (0x3ff8000000000000, 0x4011ed3fe64fc541), // exp(1.5)
            (0x4000000000000000, 0x401d8e64b8d4ddae), // exp(2.0)
            (0xc000000000000000, 0x3fc152aaa3bf81cc), // exp(-2.0)
            (0x4024000000000000, 0x40d5829dcf950560), // exp(10.0)
            (0xc024000000000000, 0x3f07cd79b5647c9b), // exp(-10.0)
            (0x4034800000000000, 0x41c7d6c4f0bcdd5c), // exp(20.5)
            (0xc042c00000000000, 0x3c8dd5c566301ec8), // exp(-37.5)
            (0xc04499d59d70fb9d, 0x3c378f9658d0d3a7), // exp(-41.20183151261083)
            (0x4049000000000000, 0x44719103e4080b45), // exp(50.0)
            (0xc049000000000000, 0x3b6d257d547e083f), // exp(-50.0)
            (0x4059000000000000, 0x48f3494a9b171bf5), // exp(100.0)
            (0xc059000000000000, 0x36ea8c1f14e2af5d), // exp(-100.0)
            (0x4085e00000000000, 0x7f0d945df4f8ec8e), // exp(700.0)
            (0x40862d999999999a, 0x7fed75ae7a50ee14), // exp(709.7)
            (0xc085e00000000000, 0x00d14f2b0fb9307f), // exp(-700.0)
            (0xc086240000000000, 0x000e6cf6d08897ac), // exp(-708.5)
            (0xc086800000000000, 0x0000000993b4dc95), // exp(-720.0)
            (0xc087480000000000, 0x0000000000000001), // exp(-745.0)
        ];
        // fdlibm e_exp.c: error < 1 ulp.
        check1("exp", exp, table, 1);
    }

    #[test]
    fn exp_special_values() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp(f64::NEG_INFINITY).to_bits(), 0);
        assert!(exp(f64::NAN).is_nan());
        assert_eq!(exp(709.79), f64::INFINITY);
        assert_eq!(exp(-745.2).to_bits(), 0);
        assert_eq!(exp(-1000.0).to_bits(), 0);
    }

    #[test]
    fn erfc_known_values() {
        let table: &[(u64, u64)] = &[
            (0xc014000000000000, 0x3fffffffffffe4f4), // erfc(-5.0)
            (0xbff0000000000000, 0x3ffd7bb3d3a08445), // erfc(-1.0)
            (0xbfe0000000000000, 0x3ff853f7ae0c76e9), // erfc(-0.5)
            (0x3ddb7cdfd9d7bdbb, 0x3feffffffff07dde), // erfc(1e-10)
            (0x3fc999999999999a, 0x3fe8df9ed1d36839), // erfc(0.2)
            (0x3fe0000000000000, 0x3fdeb02147ce245c), // erfc(0.5)
            (0x3ff0000000000000, 0x3fc4226162fbddd5), // erfc(1.0)
            (0x4000000000000000, 0x3f7328f5ec350e67), // erfc(2.0)
            (0x4008000000000000, 0x3ef729df6503422a), // erfc(3.0)
            (0x4014000000000000, 0x3d7b0c1a759f7739), // erfc(5.0)
            (0x4024000000000000, 0x36a7d8a7f2a8a2d0), // erfc(10.0)
            (0x4034000000000000, 0x1b8b54f244df93df), // erfc(20.0)
            (0x403a000000000000, 0x02a284bfe1cdea24), // erfc(26.0)
            (0x403ab33333333333, 0x000000f78e200288), // erfc(26.7)
        ];
        // fdlibm's erfc is a few ulp in the tail (measured max 2.5 ulp on [-6, 27.5]).
        check1("erfc", erfc, table, 3);
        assert_eq!(erfc(0.0), 1.0);
        assert_eq!(erfc(f64::INFINITY).to_bits(), 0);
        assert_eq!(erfc(f64::NEG_INFINITY), 2.0);
        assert_eq!(erfc(30.0).to_bits(), 0);
        assert!(erfc(f64::NAN).is_nan());
    }

    #[test]
    fn erf_known_values() {
        let table: &[(u64, u64)] = &[
            (0xc008000000000000, 0xbfefffd1ac4135f9), // erf(-3.0)
            (0xbff0000000000000, 0xbfeaf767a741088b), // erf(-1.0)
            (0xbfe0000000000000, 0xbfe0a7ef5c18edd2), // erf(-0.5)
            (0x01a56e1fc2f8f359, 0x01a82e6d98711d3a), // erf(1e-300)
            (0x3ddb7cdfd9d7bdbb, 0x3ddf044332d68161), // erf(1e-10)
            (0x3fc999999999999a, 0x3fcc8184b8b25f1c), // erf(0.2)
            (0x3fe0000000000000, 0x3fe0a7ef5c18edd2), // erf(0.5)
            (0x3feccccccccccccd, 0x3fe98045a6c8a2e6), // erf(0.9)
            (0x3ff0000000000000, 0x3feaf767a741088b), // erf(1.0)
            (0x4000000000000000, 0x3fefd9ae142795e3), // erf(2.0)
            (0x4008000000000000, 0x3fefffd1ac4135f9), // erf(3.0)
            (0x4014000000000000, 0x3fefffffffffc9e8), // erf(5.0)
        ];
        check1("erf", erf, table, 1);
        assert_eq!(erf(0.0).to_bits(), 0);
        assert_eq!(erf(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert_eq!(erf(10.0), 1.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn phi_known_values() {
        let table: &[(u64, u64)] = &[
            (0xc043000000000000, 0x00000000037b23b8), // phi(-38.0) = 2.8854283600687843e-316
            (0xc042800000000000, 0x01ceaccc6bfeb0af), // phi(-37.0) = 5.7255712225245768e-300
            (0xc03e000000000000, 0x16f7795ad05ea397), // phi(-30.0) = 4.9067139271481871e-198
            (0xc0380c132c6c37c8, 0x257ef99c2a3e5e48), // phi(-24.047167564793) = 4.468623032118068e-128
            (0xc034000000000000, 0x2d8c0bd0f1880783), // phi(-20.0) = 2.7536241186062337e-89
            (0xc024000000000000, 0x3b226c75e84fb10d), // phi(-10.0) = 7.6198530241605261e-24
            (0xc014000000000000, 0x3e933ca2f2133831), // phi(-5.0) = 2.8665157187919391e-7
            (0xc000000000000000, 0x3f974bcf82c9d860), // phi(-2.0) = 0.022750131948179207
            (0xbff0000000000000, 0x3fc44ed0bb7cb20b), // phi(-1.0) = 0.15865525393145705
            (0xbfe0000000000000, 0x3fd3bf143b9aa712), // phi(-0.5) = 0.3085375387259869
            (0xbddb7cdfd9d7bdbb, 0x3fdffffffff508b1), // phi(-1e-10) = 0.49999999996010577
            (0x0000000000000000, 0x3fe0000000000000), // phi(0.0) = 0.5
            (0x3fe0000000000000, 0x3fe62075e232ac77), // phi(0.5) = 0.6914624612740131
            (0x3ff0000000000000, 0x3feaec4bd120d37d), // phi(1.0) = 0.84134474606854295
            (0x4000000000000000, 0x3fef45a183e9b13d), // phi(2.0) = 0.97724986805182079
            (0x4014000000000000, 0x3fefffff661ae86f), // phi(5.0) = 0.99999971334842812
            (0x4020000000000000, 0x3feffffffffffffa), // phi(8.0) = 0.99999999999999938
        ];
        // Measured max 2.9 ulp (relative, including the lower tail).
        check1("phi", phi, table, 3);
    }

    #[test]
    fn phi_special_values() {
        assert_eq!(phi(0.0), 0.5);
        assert_eq!(phi(f64::NEG_INFINITY).to_bits(), 0);
        assert_eq!(phi(f64::INFINITY), 1.0);
        assert!(phi(f64::NAN).is_nan());
        assert_eq!(phi(-40.0).to_bits(), 0);
        assert_eq!(phi(-1e300).to_bits(), 0);
        assert_eq!(phi(9.0), 1.0);
        assert_eq!(phi(1e300), 1.0);
        // Monotone across the branch points of erfc (in z = -x/sqrt(2)).
        let mut prev = 0.0;
        let mut x = -39.0;
        while x < 9.0 {
            let v = phi(x);
            assert!(v >= prev, "phi not monotone at {x}");
            prev = v;
            x += 1.0 / 1024.0;
        }
    }

    #[test]
    fn phi_complement_is_phi_of_minus_x() {
        for i in -4000..=4000 {
            let x = f64::from(i) * 0.01;
            assert_eq!(phi_complement(x).to_bits(), phi(-x).to_bits());
        }
        // Upper tail keeps relative precision: 1 - Phi(37) = Phi(-37).
        let want = f(0x01ceaccc6bfeb0af); // mpmath, 50 digits
        assert!(ulp_diff(phi_complement(37.0), want) <= 3);
    }

    #[test]
    fn phi_inv_known_values() {
        // (p bits, q bits, PhiInv bits). PhiInv is of p when p < 0.5 and -PhiInv(q)
        // otherwise, so the pairs where 1 - p (or 1 - q) is not representable are
        // still exact references for the argument phi_inv actually uses.
        let table: &[(u64, u64, u64)] = &[
            (0x3ca0000000000000, 0x3fefffffffffffff, 0xc0206b48528cea52), // p=1.1102230246251565e-16 q=0.9999999999999999 -> -8.2095361516013868556
            (0x3de0000000000000, 0x3feffffffff00000, 0xc0195a1198fcf3d6), // p=1.1641532182693481e-10 q=0.9999999998835847 -> -6.3379577545537892525
            (0x01a56e1fc2f8f359, 0x3ff0000000000000, 0xc04286074064c26e), // p=1e-300 q=1.0 -> -37.047096299361199237 (1 - p not representable; q unused)
            (0x0000000000000001, 0x3ff0000000000000, 0xc0433bd3f27fcd03), // p=5e-324 q=1.0 -> -38.467405617144346251 (1 - p not representable; q unused)
            (0x3ddb7cdfd9d7bdbb, 0x3ff0000000000000, 0xc0197203597a2155), // p=1e-10 q=1.0 -> -6.3613409024040561991 (1 - p not representable; q unused)
            (0x3f50624dd2f1a9fc, 0x3feff7ced916872b, 0xc008b8cbb7204471), // p=0.001 q=0.999 -> -3.0902323061678135354 (1 - p not representable; q unused)
            (0x3f947ae147ae147b, 0x3fef5c28f5c28f5c, 0xc0006e13e8aadfdc), // p=0.02 q=0.98 -> -2.0537489106318230443 (1 - p not representable; q unused)
            (0x3fb3333332800000, 0x3fed999999b00000, 0xbff708522723041b), // p=0.07499999983701855 q=0.9250000001629815 -> -1.4395314720898173254
            (0x3fed999999b00000, 0x3fb3333332800000, 0x3ff708522723041b), // p=0.9250000001629815 q=0.07499999983701855 -> 1.4395314720898173254
            (0x3fb3333333800000, 0x3fed999999900000, 0xbff7085226b1fc71), // p=0.0750000000698492 q=0.9249999999301508 -> -1.4395314704450153116
            (0x3fed999999900000, 0x3fb3333333800000, 0x3ff7085226b1fc71), // p=0.9249999999301508 q=0.0750000000698492 -> 1.4395314704450153116
            (0x3fb3333334800000, 0x3fed999999700000, 0xbff708522640f4c7), // p=0.07500000030267984 q=0.9249999996973202 -> -1.4395314688002133017
            (0x3fed999999700000, 0x3fb3333334800000, 0x3ff708522640f4c7), // p=0.9249999996973202 q=0.07500000030267984 -> 1.4395314688002133017
            (0x3fb3333335800000, 0x3fed999999500000, 0xbff7085225cfed1e), // p=0.07500000053551048 q=0.9249999994644895 -> -1.4395314671554112957
            (0x3fed999999500000, 0x3fb3333335800000, 0x3ff7085225cfed1e), // p=0.9249999994644895 q=0.07500000053551048 -> 1.4395314671554112957
            (0x3fd3bf238a600000, 0x3fe6206e3ad00000, 0xbfdfffd4853905a0), // p=0.3085411883657798 q=0.6914588116342202 -> -0.49998963365586670761
            (0x3fe59e8e0ff00000, 0x3fd4c2e3e0200000, 0x3fdd25fbf263a9f5), // p=0.6756048499373719 q=0.3243951500626281 -> 0.45544336958724266743 (worst found: 5.67 ulp, U32)
            (0x3f20e1f900000000, 0x3feffef1e0700000, 0xc00d3c91247c6d3a), // p=0.00012880482245236635 q=0.9998711951775476 -> -3.6545737123939521032
            (0x3fe6139007d5f4b7, 0x3fd3d8dff0541692, 0x3fdfb6cfd46f0bb5), // p=0.6898880150835315 q=0.3101119849164685 -> 0.49553294892774187369 (5.31 ulp, U52)
            (0x3de9cfc700000000, 0x3fefffffffe63039, 0xc0190e2c50a592c6), // p=1.8780432764486932e-10 q=0.9999999998121957 -> -6.2638409234102195994 (5.14 ulp, U52 tail)
            (0x3fdf9e4048ca6b12, 0x3fe030dfdb9aca77, 0xbf8ea0efb9f0f35f), // p=0.49403388126818115 q=0.5059661187318188 -> -0.014955399381614218233
            (0x3f16e5ae00000000, 0x3fefff48d2900000, 0xc00e064254d5a8c8), // p=8.734583389014006e-05 q=0.9999126541661099 -> -3.753056204576839765
            (0x3df30d0c80000000, 0x3fefffffffd9e5e7, 0xc018cfbaee1065d1), // p=2.7722812934172225e-10 q=0.9999999997227719 -> -6.2028615186222429566
            (0x3ce3000000000000, 0x3fefffffffffffed, 0xc01f649b7adde661), // p=2.1094237467877974e-15 q=0.9999999999999979 -> -7.8482493589341128522
            (0x3fd3333333333333, 0x3fe6666666666666, 0xbfe0c7e39582c5fb), // p=0.3 q=0.7 -> -0.52440051270804081597 (1 - p not representable; q unused)
            (0x3fe0000000000000, 0x3fe0000000000000, 0x0000000000000000), // p=0.5 q=0.5 -> 0.0
            (0x3fe6666666666666, 0x3fd3333333333334, 0x3fe0c7e39582c5fa), // p=0.7 q=0.30000000000000004 -> 0.52440051270804065631
            (0x3fef5c28f5c28f5c, 0x3f947ae147ae1480, 0x40006e13e8aadfdb), // p=0.98 q=0.020000000000000018 -> 2.0537489106318226861
            (0x3fefffffffffffff, 0x3ca0000000000000, 0x40206b48528cea52), // p=0.9999999999999999 q=1.1102230246251565e-16 -> 8.2095361516013868556
            (0x3feffffffff00000, 0x3de0000000000000, 0x40195a1198fcf3d6), // p=0.9999999998835847 q=1.1641532182693481e-10 -> 6.3379577545537892525
            (0x3ff0000000000000, 0x01a56e1fc2f8f359, 0x404286074064c26e), // p=1.0 q=1e-300 -> 37.047096299361199237 (1 - q not representable; p unused)
            (0x3ff0000000000000, 0x3ddb7cdfd9d7bdbb, 0x40197203597a2155), // p=1.0 q=1e-10 -> 6.3613409024040561991 (1 - q not representable; p unused)
            (0x3feff7ced916872b, 0x3f50624dd2f1aa00, 0x4008b8cbb7204470), // p=0.999 q=0.0010000000000000009 -> 3.0902323061678132778
            (0x3dae8a1000000000, 0x3feffffffffe175f, 0xc01aa1b284a91079), // p=1.388766879273362e-11 q=0.9999999999861123 -> -6.6579075554073989141
            (0x3dae8a3000000000, 0x3feffffffffe175d, 0xc01aa1b1e6eab81f), // p=1.3887890837338546e-11 q=0.9999999999861121 -> -6.6579052048455474566
            (0x3dae8a5000000000, 0x3feffffffffe175b, 0xc01aa1b1492d018e), // p=1.388811288194347e-11 q=0.9999999999861119 -> -6.6579028543204812886
        ];
        // Measured max over dense U32/U52 sweeps: 5.67 ulp (see phi_inv's doc), i.e.
        // at most 6 ulp from the correctly rounded value; the worst cases found are
        // among the points above.
        for &(pb, qb, rb) in table {
            let (p, q, want) = (f(pb), f(qb), f(rb));
            let got = phi_inv(p, q);
            let d = ulp_diff(got, want);
            assert!(
                d <= 6,
                "phi_inv({p:e}, {q:e}) = {got:e}, want {want:e}: {d} ulp"
            );
        }
    }

    #[test]
    fn phi_inv_special_values() {
        assert_eq!(phi_inv(0.0, 1.0), f64::NEG_INFINITY);
        assert_eq!(phi_inv(1.0, 0.0), f64::INFINITY);
        assert!(phi_inv(f64::NAN, 0.5).is_nan());
        assert!(phi_inv(0.5, f64::NAN).is_nan());
        assert!(phi_inv(-0.25, 1.25).is_nan());
        assert!(phi_inv(1.25, -0.25).is_nan());
        assert_eq!(phi_inv(0.5, 0.5), 0.0);
    }

    /// U32 and U52 style inputs (p, 1 - p), both exact.
    fn grid() -> Vec<(f64, f64)> {
        let mut v = Vec::new();
        let t32 = 1.0 / 4294967296.0;
        let mut w: u64 = 0;
        while w < 1 << 32 {
            let p = (w as f64 + 0.5) * t32;
            v.push((p, ((1u64 << 32) - w) as f64 * t32 - 0.5 * t32));
            w += 1 + w / 64 + 7919;
        }
        let t53 = 1.0 / 9007199254740992.0;
        let mut m: u64 = 0;
        while m < 1 << 52 {
            let p = (2 * m + 1) as f64 * t53;
            v.push((p, ((1u64 << 53) - 2 * m - 1) as f64 * t53));
            m += 1 + m / 16;
        }
        for &(p, q) in &v {
            assert_eq!(p + q, 1.0);
        }
        let mirrored: Vec<(f64, f64)> = v.iter().map(|&(p, q)| (q, p)).collect();
        v.extend(mirrored);
        v
    }

    #[test]
    fn phi_inv_symmetry_is_exact() {
        for (p, q) in grid() {
            let a = phi_inv(p, q);
            let b = phi_inv(q, p);
            assert_eq!(a, -b, "p={p:e}");
            if a != 0.0 {
                assert_eq!(a.to_bits(), (-b).to_bits(), "p={p:e}");
            }
        }
    }

    #[test]
    fn phi_inv_is_central_or_tail() {
        for (p, q) in grid() {
            let x = phi_inv(p, q);
            let want = if (p - 0.5).abs() <= 0.425 {
                phi_inv_central(p)
            } else {
                phi_inv_tail(p, q)
            };
            assert_eq!(x.to_bits(), want.to_bits(), "p={p:e}");
        }
        // The branch point itself: |p - 0.5| == 0.425 exactly is central.
        let p = 0.5 - PHI_INV_SPLIT1; // 0.075000000000000011..., p - 0.5 exact
        assert_eq!(phi_inv(p, 1.0 - p).to_bits(), phi_inv_central(p).to_bits());
    }

    #[test]
    fn phi_inv_monotone() {
        let mut g: Vec<(f64, f64)> = grid();
        g.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        let mut prev = f64::NEG_INFINITY;
        for (p, q) in g {
            let x = phi_inv(p, q);
            assert!(x >= prev, "not monotone at p={p:e}");
            prev = x;
        }
    }

    #[test]
    fn phi_inv_round_trips_phi() {
        // x -> (p, q) = (Phi(x), 1 - Phi(x)) -> PhiInv. The smaller of p and q is
        // the one phi_inv uses in the tails; its error (a few ulp relative) moves x
        // by about that relative error divided by x^2, so in the tails the round trip
        // is as tight as phi_inv itself. Near x = 0 the absolute error of p (a few
        // ulp of 0.5) divided by the density bounds it.
        let mut x = -37.5;
        while x <= 37.5 {
            let (p, q) = if x < 0.0 {
                let p = phi(x);
                (p, 1.0 - p)
            } else {
                let q = phi_complement(x);
                (1.0 - q, q)
            };
            let y = phi_inv(p, q);
            let tol = if x.abs() < 1.0 {
                2e-15
            } else {
                8.0 * f64::EPSILON * x.abs()
            };
            assert!((y - x).abs() <= tol, "x={x}: phi_inv(phi(x)) = {y}");
            x += 0.0078125 * 3.0;
        }
    }
}
