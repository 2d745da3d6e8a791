"""The compiled loops (the fast engine's and the DES core's) keep to one rule that numba's
cache needs: a kernel calls only kernels of its own module and reads only constants
written in it. numba keeps a kernel's machine code until the kernel's own file changes: a
function or constant it took from another file could change there and the cached code
would not notice."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

from numba.core.registry import CPUDispatcher

from nictune.simulator import (
    des,
    des_loop,
    fast,
    fast_base,
    fast_cycles,
    fast_passive,
    fast_phases,
    fast_wakes,
)

MODULES = (fast, fast_base, fast_cycles, fast_passive, fast_phases, fast_wakes, des_loop)


def _literals(module: ModuleType) -> set[str]:
    """Names the module assigns a number at its top level (`A = 1`, `A, B = 1, 2`,
    `A = math.inf`)."""
    out = set()
    for node in ast.parse(inspect.getsource(module)).body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            number = isinstance(node.value, ast.Constant | ast.Attribute)
            if isinstance(target, ast.Name) and number:
                out.add(target.id)
            elif (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                  and all(isinstance(v, ast.Constant) for v in node.value.elts)):
                out |= {t.id for t in target.elts if isinstance(t, ast.Name)}
    return out


def test_compiled_loops_use_only_their_own_module() -> None:
    kernels, problems = 0, []
    for module in MODULES:
        own = _literals(module)
        for name, kernel in vars(module).items():
            if not (isinstance(kernel, CPUDispatcher)
                    and kernel.py_func.__module__ == module.__name__):
                continue
            kernels += 1
            for used in kernel.py_func.__code__.co_names:
                value = kernel.py_func.__globals__.get(used)
                if isinstance(value, CPUDispatcher):
                    if value.py_func.__module__ != module.__name__:
                        problems.append(f"{module.__name__}.{name} calls "
                                        f"{value.py_func.__module__}.{used}")
                elif isinstance(value, int | float) and used not in own:
                    problems.append(f"{module.__name__}.{name} reads {used}, not written "
                                    "in its module")
    assert kernels >= 15
    assert not problems, problems
    # (constants kept apart must stay equal)
    assert fast_phases.TINY == fast._TINY == fast_base.TINY
    assert (des_loop.AW, des_loop.DRAIN) == (des.AW, des.DRAIN)
