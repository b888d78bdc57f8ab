"""Fits the coefficients of vexp's polynomial in kernels.inc: e^r on [-ln2/2, ln2/2], degree 6,
minimax in relative error (the Remez exchange), rounded to float32 and printed as the hex floats
kernels.inc holds. Run: python csrc/exp_minimax.py (numpy only)."""

import numpy as np

DEGREE = 6
HALF = float(np.log(2.0) / 2)


def remez(degree: int, lo: float, hi: float, iters: int = 30) -> tuple[np.ndarray, float]:
    """Coefficients (lowest first) of the degree-`degree` polynomial p minimising max |p/exp - 1|
    on [lo, hi], and that maximum."""
    k = np.arange(degree + 2)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * k[::-1] / (degree + 1))
    grid = np.linspace(lo, hi, 200_001)
    coef = np.zeros(degree + 1)
    for _ in range(iters):
        # p(x_i) - e^x_i = (-1)^i E e^x_i at the reference points: linear in (coef, E)
        a = np.vander(x, degree + 1, increasing=True)
        a = np.column_stack([a, (-1.0) ** k * np.exp(x)])
        coef = np.linalg.solve(a, np.exp(x))[:-1]
        err = np.polynomial.polynomial.polyval(grid, coef) / np.exp(grid) - 1
        # the new reference: the extremum of each run of equal sign
        runs = np.split(np.arange(grid.size), np.flatnonzero(np.diff(np.sign(err))) + 1)
        if len(runs) != degree + 2:
            break
        x = grid[[r[np.argmax(np.abs(err[r]))] for r in runs]]
    err = np.polynomial.polynomial.polyval(grid, coef) / np.exp(grid) - 1
    return coef, float(np.abs(err).max())


def main() -> None:
    coef, err = remez(DEGREE, -HALF, HALF)
    c32 = coef.astype(np.float32).astype(np.float64)
    grid = np.linspace(-HALF, HALF, 200_001)
    err32 = np.abs(np.polynomial.polynomial.polyval(grid, c32) / np.exp(grid) - 1).max()
    print(f"degree {DEGREE}: relative error {err:.3g}, {err32:.3g} with float32 coefficients")
    for i, c in enumerate(c32):
        print(f"  r^{i}: {float(c).hex()}  ({c:.9e})")


if __name__ == "__main__":
    main()
