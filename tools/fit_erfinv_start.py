"""Fits the central start of `rust/core/src/math/erfinv/fast_f32.rs`.

`erfinv(a) / a` as a rational function `N(u) / D(u)` of `u = a^2 - S^2 / 2` on
`0 <= a <= S` (`D`'s constant term 1), near minimax in relative error: Lawson's
iteratively reweighted least squares on the linearized problem `N - g D` (Chebyshev
basis, `mpmath` at 40 digits).
Prints the coefficients (highest first, for Horner) as binary64 literals, then the
error of `a * N(u) / D(u)` evaluated as the Rust code does (binary64, no fma) against
`mpmath.erfinv` on a dense sample. The sample is a check, not the proof: the exhaustive
sweep in that module tests the bound on every float32 argument.

Usage: .venv/bin/python tools/fit_erfinv_start.py S N M [ITERATIONS]
"""

import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 40


def reference(t: mp.mpf) -> mp.mpf:
    """`erfinv(a) / a` at `a = sqrt(t)` (its limit `sqrt(pi)/2` at 0)."""
    if t == 0:
        return mp.sqrt(mp.pi) / 2
    a = mp.sqrt(t)
    return mp.erfinv(a) / a


def cheb_row(x: mp.mpf, degree: int) -> list[mp.mpf]:
    row = [mp.mpf(1), x]
    while len(row) <= degree:
        row.append(2 * x * row[-1] - row[-2])
    return row[: degree + 1]


def fit(top: float, n: int, m: int, iterations: int) -> tuple[list[mp.mpf], list[mp.mpf]]:
    """Chebyshev coefficients (in `x = 2 t / T - 1`) of `N` and `D`, `D`'s first 1."""
    points = 400
    xs = [mp.cos(mp.pi * (k + mp.mpf(0.5)) / points) for k in range(points)] + [-1, 1]
    g = [reference((x + 1) / 2 * mp.mpf(top) ** 2) for x in xs]
    rows_n = [cheb_row(x, n) for x in xs]
    rows_d = [cheb_row(x, m) for x in xs]
    weight = [mp.mpf(1)] * len(xs)
    denominator = [mp.mpf(1)] * len(xs)
    best: tuple[mp.mpf, list[mp.mpf], list[mp.mpf]] | None = None
    for step in range(iterations):
        matrix, rhs = [], []
        for i in range(len(xs)):
            scale = mp.sqrt(weight[i]) / (g[i] * denominator[i])
            matrix.append(
                [c * scale for c in rows_n[i]] + [-g[i] * c * scale for c in rows_d[i][1:]]
            )
            rhs.append(g[i] * scale)
        solution, _ = mp.qr_solve(mp.matrix(matrix), mp.matrix(rhs))
        num = [solution[k] for k in range(n + 1)]
        den = [mp.mpf(1)] + [solution[n + 1 + k] for k in range(m)]
        values_n = [mp.fsum(c * r for c, r in zip(num, row, strict=True)) for row in rows_n]
        values_d = [mp.fsum(c * r for c, r in zip(den, row, strict=True)) for row in rows_d]
        error = [(values_n[i] / values_d[i] - g[i]) / g[i] for i in range(len(xs))]
        worst = max(abs(e) for e in error)
        if min(values_d) > 0 and (best is None or worst < best[0]):
            best = (worst, num, den)
        print(
            f"step {step}: log2 max relative error {float(mp.log(worst, 2)):.2f}", file=sys.stderr
        )
        weight = [w * abs(e) for w, e in zip(weight, error, strict=True)]
        total = mp.fsum(weight)
        weight = [w / total for w in weight]
        denominator = values_d
    assert best is not None
    return best[1], best[2]


def to_monomial(cheb: list[mp.mpf], top: float, center: float) -> list[mp.mpf]:
    """Coefficients in `u = t - center` (lowest first) of `sum c_k T_k(2 t / T - 1)`."""
    scale = 2 / mp.mpf(top) ** 2
    linear = [scale * mp.mpf(center) - 1, scale]  # x = 2 t / T - 1 in powers of u
    basis = [[mp.mpf(1)], linear]
    while len(basis) < len(cheb):
        a, b = basis[-1], basis[-2]
        nxt = [mp.mpf(0)] * (len(a) + 1)
        for k, c in enumerate(a):
            nxt[k] += 2 * linear[0] * c
            nxt[k + 1] += 2 * linear[1] * c
        for k, c in enumerate(b):
            nxt[k] -= c
        basis.append(nxt)
    result = [mp.mpf(0)] * len(cheb)
    for c, poly in zip(cheb, basis, strict=True):
        for k, p in enumerate(poly):
            result[k] += c * p
    return result


def horner(coefficients: list[float], t: np.ndarray) -> np.ndarray:
    """Highest first, as the Rust code: `((c_n t + c_{n-1}) t + ...) t + c_0`."""
    acc = np.full_like(t, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = acc * t + c
    return acc


def main() -> None:
    top, n, m = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    iterations = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    num, den = fit(top, n, m, iterations)
    # The variable `u = t - center`, centered on the interval: the monomial
    # coefficients in `t` itself alternate and cancel (about 5 bits lost).
    center = float(np.float64(top * top / 2))
    center_bits = int(np.float64(center).view(np.uint64))
    print(f"const CENTER: f64 = f64::from_bits({center_bits:#018x}); // {center!r}")
    num_t, den_t = to_monomial(num, top, center), to_monomial(den, top, center)
    # Scaled so that D's constant term is 1 (the Horner sum's last addition is of 1).
    p = [float(c / den_t[0]) for c in num_t]
    q = [float(c / den_t[0]) for c in den_t]
    for name, coefficients in (("P", p), ("Q", q)):
        for k in reversed(range(len(coefficients))):
            bits = np.float64(coefficients[k]).view(np.uint64)
            print(
                f"const {name}{k}: f64 = f64::from_bits({int(bits):#018x}); // {coefficients[k]!r}"
            )
    # The binary64 evaluation against mpmath on float32 arguments spread over [0, S].
    a = np.unique(np.linspace(0, top, 20001).astype(np.float32).astype(np.float64))
    a = a[(a > 0) & (a <= top)]
    u = a * a - center
    y0 = a * horner(p, u) / horner(q, u)
    mp.mp.dps = 30
    worst = max(abs(mp.mpf(y) / mp.erfinv(mp.mpf(x)) - 1) for x, y in zip(a, y0, strict=True))
    log2_worst = float(mp.log(worst, 2))
    print(
        f"// binary64 evaluation on {len(a)} float32 arguments: "
        f"log2 max relative error {log2_worst:.2f}"
    )


if __name__ == "__main__":
    main()
