"""torch's OpInfo database as the capture's oracle (issue 52).

For each op that supports float32 on the CPU and some of its sample inputs, init code is
built in three shapes and run through ``materialize`` at W=1:

* ``random``: the op applied to a random temporary (``torch.randn`` of the sample's
  input shape; the other arguments are the sample's own CPU tensors, tables), its result
  copied into a parameter of the result's shape;
* ``before``: the op applied to the parameter's values before ``init_fn`` (its
  constructor's ``uniform_(-2, 2)``, recorded by ``record_constructors``), written back
  into it (only where the result has the input's shape and dtype);
* ``inplace``: the op's in-place variant on the parameter's values before ``init_fn``,
  or, where it has none, its ``out=`` variant on a random temporary into the parameter.

Each case ends in one of (:class:`Outcome`):

* ``exact``: bit-equal to eager torch applied to the values shardinit drew (the
  "captured draw": the parameter's stream at its own indices, which is what a random
  temporary copied into a parameter holds, or the constructor's fill materialized
  without ``init_fn``);
* ``close``: equal to it up to the last bits of float32 (the engine computes a program in
  binary64 and rounds once, torch's kernels round each step in float32);
* ``distribution``: not the op of the draw at the same positions, but exactly the op's
  values on a permutation of the draw (an op that moves iid random values, where
  shardinit draws each at its destination: the same distribution);
* ``refused``: shardinit's :class:`~shardinit.UnsupportedInitOpError`;
* ``skipped``: the case does not apply (eager torch refuses the same code, the op has no
  such variant, the sample is not a float32 tensor op);
* ``silent`` (a defect): anything else accepted, and ``crash`` (a defect): any other
  exception than shardinit's.

The check is sound: an accepted value is compared to eager torch's op on the very values
shardinit drew, element by element (or as a multiset, for ``distribution``).
"""

from __future__ import annotations

import collections
import contextlib
import math
import random
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import shardinit

SEED = 11
#: Samples whose input or result is larger than this are skipped (time, not soundness).
MAX_NUMEL = 4096
SHAPES = ("random", "before", "inplace")
OUTCOMES = ("exact", "close", "distribution", "refused", "skipped", "silent", "crash")
DEFECTS = ("silent", "crash")


@dataclass(frozen=True)
class Outcome:
    op: str
    sample: int
    shape: str
    kind: str
    detail: str = ""
    family: str = ""

    @property
    def defect(self) -> bool:
        return self.kind in DEFECTS


def float32_ops() -> list[Any]:
    """The OpInfos that support float32 on the CPU, by name (stable order)."""
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]
    return sorted(ops, key=lambda op: (op.name, op.variant_test_name))


_PREFIXES = ("linalg", "fft", "special", "nn.functional", "masked", "signal", "sparse")
_CLASSES = {
    "UnaryUfuncInfo": "elementwise, unary",
    "BinaryUfuncInfo": "elementwise, binary",
    "ReductionOpInfo": "reductions",
    "ShapeFuncInfo": "shapes and views",
    "SpectralFuncInfo": "fft",
}


def family(op: Any) -> str:
    """The family an op is counted in: its namespace (``linalg``, ``fft``, ...), else
    its OpInfo class (unary, binary, reduction), else ``other torch functions``."""
    for prefix in _PREFIXES:
        if op.name.startswith(prefix + "."):
            return prefix
    for cls in type(op).__mro__:
        if cls.__name__ in _CLASSES:
            return _CLASSES[cls.__name__]
    return "other torch functions"


def family_table(outcomes: list[Outcome]) -> str:
    """The results per op family, as a Markdown table (docs/capturing-init.md)."""
    kinds = ("exact", "close", "distribution", "refused", "skipped", "silent", "crash")
    rows: dict[str, collections.Counter[str]] = {}
    ops: dict[str, set[str]] = {}
    for outcome in outcomes:
        rows.setdefault(outcome.family, collections.Counter())[outcome.kind] += 1
        ops.setdefault(outcome.family, set()).add(outcome.op)
    head = "| family | ops | cases | " + " | ".join(kinds) + " |"
    lines = [head, "|" + "---|" * (len(kinds) + 3)]
    total: collections.Counter[str] = collections.Counter()
    for name in sorted(rows):
        count = rows[name]
        total += count
        cells = " | ".join(str(count[k]) for k in kinds)
        lines.append(f"| {name} | {len(ops[name])} | {sum(count.values())} | {cells} |")
    cells = " | ".join(str(total[k]) for k in kinds)
    every = sum(len(v) for v in ops.values())
    lines.append(f"| **all** | {every} | {sum(total.values())} | {cells} |")
    return "\n".join(lines) + "\n"


def op_label(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _sample_inputs(op: Any) -> Iterator[Any]:
    """``op.sample_inputs("cpu", torch.float32)``'s samples, the same ones: its generator,
    seeded before each sample as its wrapper (torch's ``TrackedInputIter``) seeds it. Not
    that wrapper itself: it walks the stack with ``inspect.stack()`` for each op (0.1 s on
    2 cores) and its ``torch.manual_seed`` queues a seed for each accelerator with a
    traceback (6 ms), two thirds of the sample's time; seeding the CPU generator, Python's
    and numpy's is what reaches CPU samples."""
    from torch.testing._internal import common_utils

    generator = iter(op.sample_inputs_func(op, "cpu", torch.float32, False))
    while True:
        torch.default_generator.manual_seed(common_utils.SEED)
        random.seed(common_utils.SEED)
        np.random.seed(common_utils.SEED)
        try:
            sample = next(generator)
        except StopIteration:
            return
        yield sample


def samples(op: Any, limit: int) -> list[Any]:
    """Up to ``limit`` samples of ``op`` whose input is one float32 CPU tensor (sample
    generation is seeded: the same samples every run)."""
    torch.manual_seed(0)
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for sample in _sample_inputs(op):
                value = sample.input
                if not isinstance(value, torch.Tensor) or value.dtype != torch.float32:
                    continue
                if value.numel() == 0 or value.numel() > MAX_NUMEL:
                    continue
                found.append(sample)
                if len(found) >= limit:
                    break
        except Exception:  # a sample generator that fails on this torch: no samples
            pass
    return found


class _Holder(nn.Module):
    def __init__(self, shape: tuple[int, ...], default: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(shape))
        if default:
            nn.init.uniform_(self.w, -2.0, 2.0)


def _meta_holder(shape: tuple[int, ...], default: bool) -> _Holder:
    with torch.device("meta"), shardinit.record_constructors():
        return _Holder(shape, default)


def _stream_normal(shape: tuple[int, ...]) -> torch.Tensor:
    """The draw a random temporary copied into the parameter ``w`` holds: ``w``'s own
    N(0, 1) stream at its own indices."""
    spec = shardinit.ParamSpec("w", shape, torch.float32, shardinit.init.Normal(0.0, 1.0), SEED)
    return shardinit.full(spec)


def _single_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.numel():
        return value if value.numel() <= MAX_NUMEL else None
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _eager(func: Callable[[], Any]) -> Any:
    """``func()`` in eager torch, or None where eager torch refuses it."""
    try:
        with _quiet(), torch.no_grad():
            return func()
    except Exception:
        return None


def _compare(got: torch.Tensor, want: torch.Tensor) -> tuple[str, str]:
    if got.shape != want.shape or got.dtype != want.dtype:
        return "silent", f"shape/dtype {tuple(got.shape)} {got.dtype} != {tuple(want.shape)}"
    if not got.is_contiguous():
        return "silent", f"strides {got.stride()}"
    if torch.equal(got, want) or bool(
        torch.isnan(got).eq(torch.isnan(want)).all()
        and (got[~torch.isnan(got)] == want[~torch.isnan(want)]).all()
    ):
        return "exact", ""
    if torch.allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True):
        return "close", ""
    flat_got = got.flatten().sort().values
    flat_want = want.flatten().sort().values
    if torch.allclose(flat_got, flat_want, rtol=2e-6, atol=1e-6, equal_nan=True):
        return "distribution", ""
    diff = (got - want).abs().nan_to_num(nan=math.inf)
    return "silent", f"max |diff| {float(diff.max()):.3g} at {int(diff.argmax())}"


def _materialized(
    shape: tuple[int, ...], default: bool, code: Callable[[_Holder], Any]
) -> torch.Tensor | Exception:
    holder = _meta_holder(shape, default)
    try:
        with _quiet():
            shardinit.materialize(holder, seed=SEED, init_fn=lambda: code(holder))
    except Exception as error:  # classified by the caller
        return error
    return holder.w.detach()


class _SeededOps(TorchDispatchMode):
    """Notes whether an aten op that draws from torch's generator ran."""

    def __init__(self) -> None:
        super().__init__()
        self.drew = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.drew = True
        return func(*args, **(kwargs or {}))


def _draws(call: Callable[[], Any]) -> bool:
    """Whether eager ``call()`` draws from torch's generator (OpInfo's random ops seed
    it and put its state back: ``wrapper_set_seed``)."""
    seen = _SeededOps()
    with seen:
        _eager(call)
    return seen.drew


def _same_distribution(
    call: Callable[[], Any], shape: tuple[int, ...], default: bool, code: Callable[[_Holder], Any]
) -> tuple[str, str]:
    """An op that draws itself: shardinit's values (three seeds) against eager torch's
    (eight seeds) by a two-sample Kolmogorov-Smirnov test, refused at p < 1e-4 (a
    wrong law, scale or location shows with a few hundred values: the cases that
    reach here draw at least 16 each)."""
    from scipy.stats import ks_2samp

    ours = []
    for seed in (SEED, SEED + 1, SEED + 2):
        holder = _meta_holder(shape, default)
        with _quiet():
            shardinit.materialize(holder, seed=seed, init_fn=lambda h=holder: code(h))
        ours.append(holder.w.detach().flatten())
    theirs: list[torch.Tensor] = []
    for seed in range(8):
        torch.manual_seed(seed)
        draw = _eager(call).flatten()
        if not any(torch.equal(draw, seen) for seen in theirs):  # OpInfo may seed it
            theirs.append(draw)
    a, b = torch.cat(ours).double().numpy(), torch.cat(theirs).double().numpy()
    if a.size < 48:
        return "skipped", "too few values for a distribution test"
    p_value = float(ks_2samp(a, b).pvalue)
    if p_value < 1e-4:
        return "silent", f"not eager's distribution (KS p={p_value:.2g})"
    return "distribution", f"KS p={p_value:.2g}"


def _classify(got: torch.Tensor | Exception, want: torch.Tensor) -> tuple[str, str]:
    if isinstance(got, shardinit.UnsupportedInitOpError):
        return "refused", str(got).split(": ", 3)[-1][:160]
    if isinstance(got, Exception):
        return "crash", f"{type(got).__name__}: {str(got)[:300]}"
    return _compare(got, want)


def _selection(call: Callable[[torch.Tensor], Any], shape: tuple[int, ...]) -> bool:
    """Whether ``call`` only selects elements of its input, each at most once, at
    positions that do not depend on the values (a view, a flip, a slice, an index by
    constant indices): run on distinct integer tags, and on the tags permuted, the
    result is the same positions' tags."""
    count = math.prod(shape)
    tags = torch.arange(count, dtype=torch.float32).view(shape)
    first = _single_tensor(_eager(lambda: call(tags)))
    if first is None or not bool((first == first.round()).all()):
        return False
    picked = first.long().flatten()
    if picked.numel() and (picked.min() < 0 or picked.max() >= count):
        return False
    if picked.unique().numel() != picked.numel():
        return False  # an element repeated: not one draw per destination element
    perm = torch.randperm(count, generator=torch.Generator().manual_seed(1))
    second = _single_tensor(_eager(lambda: call(perm.to(torch.float32).view(shape))))
    return second is not None and torch.equal(second.flatten(), perm[picked].to(torch.float32))


def run_random(op: Any, sample: Any) -> tuple[str, str]:
    """The op on a random temporary, copied into the parameter. Accepted, the values
    must be the op on the draw shardinit made for the temporary: the parameter's own
    N(0, 1) stream at the positions the values land (``exact``/``close``), or, for an
    op that selects elements without repeats and whatever the values, that stream
    itself (``distribution``: a selection of iid draws is iid)."""
    shape = tuple(sample.input.shape)
    if not shape:
        return "skipped", "0-d input"
    args, kwargs = sample.args, sample.kwargs

    def call(value: torch.Tensor) -> Any:
        return op.op(value, *args, **kwargs)

    result = _single_tensor(_eager(lambda: call(torch.randn(shape))))
    if result is None:
        return "skipped", "eager gives no float32 tensor"
    out_shape = tuple(result.shape)
    want = torch.full(out_shape, math.nan)  # no draw to compare with: refusal only
    probes = torch.randn((2, *shape), generator=torch.Generator().manual_seed(3))
    on_tags, on_zeros = _eager(lambda: call(probes[0])), _eager(lambda: call(probes[1]))
    strided = [
        v for v in (on_tags, on_zeros) if isinstance(v, torch.Tensor) and v.layout == torch.strided
    ]
    if len(strided) == 2 and torch.equal(on_tags, on_zeros) and not _draws(lambda: call(probes[0])):
        want = on_tags  # the values do not matter (new_ones, zeros_like, shape ops)
    if math.prod(out_shape) == math.prod(shape) and bool(want.isnan().all()):
        draw = _stream_normal(out_shape).view(shape)
        computed = _single_tensor(_eager(lambda: call(draw)))
        want = want if computed is None else computed

    def code(holder: _Holder) -> None:
        holder.w.data.copy_(call(torch.randn(shape)))

    kind, detail = _classify(_materialized(out_shape, False, code), want)
    if kind == "silent" and _draws(lambda: call(torch.zeros(shape))):
        return _same_distribution(lambda: call(torch.randn(shape)), out_shape, False, code)
    if kind == "silent" and _selection(call, shape):
        got = _materialized(out_shape, False, code)
        if isinstance(got, torch.Tensor) and torch.equal(got, _stream_normal(out_shape)):
            return "distribution", "a selection of distinct draws"
    return kind, detail


def _default_values(shape: tuple[int, ...]) -> torch.Tensor:
    holder = _meta_holder(shape, True)
    with _quiet():
        shardinit.materialize(holder, seed=SEED)
    return holder.w.detach().clone()


def run_before(op: Any, sample: Any) -> tuple[str, str]:
    shape = tuple(sample.input.shape)
    default = _default_values(shape)
    args, kwargs = sample.args, sample.kwargs
    want = _single_tensor(_eager(lambda: op.op(default.clone(), *args, **kwargs)))
    if want is None or tuple(want.shape) != shape:
        return "skipped", "no float32 result of the input's shape"

    def code(holder: _Holder) -> None:
        holder.w.data.copy_(op.op(holder.w.data, *args, **kwargs))

    kind, detail = _classify(_materialized(shape, True, code), want)
    if kind == "silent" and _draws(lambda: op.op(default.clone(), *args, **kwargs)):
        return _same_distribution(
            lambda: op.op(default.clone(), *args, **kwargs), shape, True, code
        )
    return kind, detail


def run_inplace(op: Any, sample: Any) -> tuple[str, str]:
    shape = tuple(sample.input.shape)
    args, kwargs = sample.args, sample.kwargs
    inplace = op.get_inplace()
    if inplace is not None:
        default = _default_values(shape)
        want = _eager(lambda: inplace(default.clone(), *args, **kwargs))
        if _single_tensor(want) is None or tuple(want.shape) != shape:
            return "skipped", "eager refuses the in-place variant here"

        def in_place(holder: _Holder) -> None:
            inplace(holder.w.data, *args, **kwargs)

        kind, detail = _classify(_materialized(shape, True, in_place), want)
        if kind == "silent" and _draws(lambda: inplace(default.clone(), *args, **kwargs)):
            call = lambda: inplace(default.clone(), *args, **kwargs)  # noqa: E731
            return _same_distribution(call, shape, True, in_place)
        return kind, detail
    if not op.supports_out:
        return "skipped", "no in-place or out= variant"
    draw = _stream_normal(shape)
    want = _single_tensor(_eager(lambda: op.op(draw.clone(), *args, **kwargs)))
    if want is None or tuple(want.shape) != shape:
        return "skipped", "no float32 result of the input's shape"

    def into_out(holder: _Holder) -> None:
        op.op(torch.randn(shape), *args, **kwargs, out=holder.w.data)

    return _classify(_materialized(shape, False, into_out), want)


RUNNERS = {"random": run_random, "before": run_before, "inplace": run_inplace}


def run_op(op: Any, limit: int) -> list[Outcome]:
    """Every shape on up to ``limit`` samples of ``op``."""
    outcomes = []
    for index, sample in enumerate(samples(op, limit)):
        for shape, runner in RUNNERS.items():
            try:
                kind, detail = runner(op, sample)
            except Exception as error:  # the harness's own step failed: say so
                kind, detail = "crash", f"harness: {type(error).__name__}: {error}"
            outcomes.append(Outcome(op_label(op), index, shape, kind, detail, family(op)))
    return outcomes
