"""How the engines' sequential loops are compiled (numba)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba


def compiled(fn: Callable[..., Any]) -> Any:
    """`fn` compiled by numba, its machine code cached for the next process beside the
    source or in the user's cache directory; where neither can be written (a read-only
    install run by a user without a home), compiled anew in each process instead.

    Division by zero gives inf or NaN as in NumPy (`evaluate` runs under `np.errstate`
    ignoring them), not ZeroDivisionError. The machine code holds the values of the
    globals it reads and the code of the kernels it calls, and numba notices edits to the
    function's own file only: a kernel calls kernels and reads constants of its own module
    (tests/simulator/test_compiled.py). It runs without the GIL, so threads can run
    kernels side by side (`fast_wakes` does)."""
    try:
        return numba.njit(cache=True, error_model="numpy", nogil=True)(fn)
    except RuntimeError:  # ("cannot cache function …: no locator available")
        return numba.njit(error_model="numpy", nogil=True)(fn)
