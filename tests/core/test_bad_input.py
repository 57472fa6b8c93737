"""Bad-input battery over every public function: each bad argument gets a specific
exception (TypeError for a wrong type, ``shardinit.ShardInitError``, a ValueError, for a
bad value) whose message names the argument.

The table below is also the source of ``docs/errors.md``:

    .venv/bin/python tests/core/test_bad_input.py > docs/errors.md

and ``test_docs_errors_table_is_current`` fails when the two drift apart.
"""

# ruff: noqa: E501  (the case table keeps one case per line)
from __future__ import annotations

import math
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from unittest import mock

import numpy as np
import pytest
import torch
from torch import nn

import shardinit
from shardinit import init, presets

NAN = math.nan
INF = math.inf
SPEC = shardinit.ParamSpec("w", (4, 3), torch.float32, init.normal(), seed=0)
SCALAR = shardinit.ParamSpec("s", (), torch.float32, init.normal(), seed=0)
SIZE_ERROR = shardinit.ShapeTooLargeError
E = shardinit.ShardInitError


@dataclass(frozen=True)
class Case:
    """One bad input: ``call()`` must raise ``error`` with a message matching ``match``."""

    function: str
    argument: str
    bad: str
    call: Callable[[], object]
    error: type[BaseException]
    match: str


def _with_environment(variable: str, value: str, call: Callable[[], object]) -> object:
    """``call()`` with the environment variable ``variable`` set to ``value`` (restored)."""
    with mock.patch.dict(os.environ, {variable: value}):
        return call()


def _quiet(make: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """Builds a tensor whose constructor warns (prototype layouts), without the warning
    (pytest turns warnings into errors)."""

    def build() -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make()

    return build


def _out(make: Callable[[], torch.Tensor]) -> Callable[[], object]:
    return lambda: shardinit.init_shard(SPEC, 0, 1, out=make())


def _meta_linear() -> nn.Linear:
    """A fresh meta-device model for each case (a refused call must not depend on an
    earlier one)."""
    with torch.device("meta"):
        return nn.Linear(3, 2)


def _with_sparse_buffer() -> nn.Module:
    model = nn.Linear(3, 2)
    model.register_buffer("table", torch.eye(3).to_sparse())
    return model


def _meta_lazy_linear() -> nn.Module:
    """An nn.LazyLinear on meta before its first forward: its parameters have no shape."""
    with torch.device("meta"):
        return nn.LazyLinear(2)


def _prepared_meta_linear() -> nn.Linear:
    """A meta model as accelerate's Accelerator.prepare leaves it (the attribute it sets on
    what it returns), still on meta: its optimizer is already wrong (docs/trainers.md)."""
    model = _meta_linear()
    model._is_accelerate_prepared = True  # type: ignore[assignment]
    return model


def _materialize_part() -> Callable[[], object]:
    """materialize of a module its model still holds (the model is kept by the closure)."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(3, 2), nn.Linear(3, 2))
    return lambda: shardinit.materialize(model[1], seed=0)


def _materialize_copy_of_loaded() -> object:
    """only= a deep copy (record_constructors) whose source a checkpoint loaded."""
    import copy

    with torch.device("meta"), shardinit.record_constructors():
        source = nn.Linear(3, 2)
        model = nn.ModuleDict({"source": source, "copy": copy.deepcopy(source)})
    loaded = {"source.weight": torch.ones(2, 3), "source.bias": torch.ones(2)}
    missing = model.load_state_dict(loaded, strict=False, assign=True).missing_keys
    return shardinit.materialize(model, seed=0, only=missing)


def _materialize_only_flat() -> object:
    """only= with a region source's target (an FSDP1 flat shard or a ZeRO-3 partition),
    stood in for by a source that reports one."""
    from shardinit._integration import plan

    def source(root: nn.Module, walk: object) -> tuple[list[object], set[tuple[int, str]]]:
        return [object()], set()

    with mock.patch.object(plan, "REGION_SOURCES", (plan.RegionSource(source),)):
        return shardinit.materialize(_meta_linear(), seed=0, only=["weight"])


def _materialize(**kwargs: object) -> Callable[[], object]:
    args: dict[str, object] = {"seed": 0}
    args.update(kwargs)
    return lambda: shardinit.materialize(_meta_linear(), **args)  # type: ignore[arg-type]


def _seed_checkpoint(**kwargs: object) -> Callable[[], object]:
    """save_seed_checkpoint of a meta Linear into a new temporary directory, with
    ``kwargs`` replacing the defaults."""

    def call() -> object:
        args: dict[str, object] = {"model": _meta_linear(), "path": tempfile.mkdtemp(), "seed": 0}
        args.update(kwargs)
        return shardinit.save_seed_checkpoint(args.pop("model"), args.pop("path"), **args)  # type: ignore[arg-type]

    return call


def _seed_checkpoint_under_file() -> object:
    # os.devnull is not a directory: the path cannot be created (the message is the
    # same on every machine, as docs/errors.md quotes it).
    return shardinit.save_seed_checkpoint(_meta_linear(), Path(os.devnull) / "ckpt", seed=0)


@dataclass(frozen=True)
class _MegatronConfig:
    """What shardinit.megatron.materialize reads of a TransformerConfig (the cases fail
    before megatron-core would be imported)."""

    fp8_param: bool = False
    init_method: object = None
    output_layer_init_method: object = None
    embedding_init_method: object = None


def _megatron(**kwargs: object) -> Callable[[], object]:
    args: dict[str, object] = {"seed": 0, "config": _MegatronConfig(), **kwargs}
    return lambda: shardinit.megatron.materialize(nn.Linear(3, 2), **args)  # type: ignore[arg-type]


def _two_argument_init(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """An init method of the wrong arity for Megatron's ``fn(tensor)``."""
    return nn.init.normal_(tensor, std=std)


def _spec(**overrides: object) -> Callable[[], object]:
    args: dict[str, object] = {"name": "w", "shape": (4, 3), "seed": 0}
    args.update(overrides)
    return lambda: shardinit.ParamSpec(**args)  # type: ignore[arg-type]


# One case per line, so the table reads as a table (formatter off for it).
# fmt: off
CASES: list[Case] = [
    # ---- key(seed, name) --------------------------------------------------------------
    Case("key", "seed", "1.5", lambda: shardinit.key(1.5, "w"), TypeError, r"^seed must be an int, got float"),
    Case("key", "seed", "nan", lambda: shardinit.key(NAN, "w"), TypeError, r"^seed must be an int"),
    Case("key", "seed", "'0'", lambda: shardinit.key("0", "w"), TypeError, r"^seed must be an int, got str"),
    Case("key", "seed", "None", lambda: shardinit.key(None, "w"), TypeError, r"^seed must be an int"),
    Case("key", "seed", "True", lambda: shardinit.key(True, "w"), TypeError, r"^seed must be an int, got bool"),
    Case("key", "seed", "np.float64(3.0)", lambda: shardinit.key(np.float64(3.0), "w"), TypeError, r"^seed must be an int"),
    Case("key", "seed", "torch.tensor(1.5)", lambda: shardinit.key(torch.tensor(1.5), "w"), TypeError, r"^seed must be an int"),
    Case("key", "seed", "-1", lambda: shardinit.key(-1, "w"), E, r"^seed must be in \[0, 18446744073709551615\], got -1"),
    Case("key", "seed", "2**64", lambda: shardinit.key(2**64, "w"), E, r"^seed must be in \[0, 18446744073709551615\]"),
    Case("key", "name", "b'w'", lambda: shardinit.key(0, b"w"), TypeError, r"^name must be a str, got bytes"),
    Case("key", "name", "None", lambda: shardinit.key(0, None), TypeError, r"^name must be a str"),
    Case("key", "name", "''", lambda: shardinit.key(0, ""), E, r"^name must be a non-empty string"),
    Case("key", "name", "'\\ud800' (lone surrogate)", lambda: shardinit.key(0, "\ud800"), E, r"^name must be encodable as UTF-8"),
    # ---- stream_words(seed, name, start, count) ---------------------------------------
    Case("stream_words", "seed", "-1", lambda: shardinit.stream_words(-1, "w", 0, 1), E, r"^seed must be in"),
    Case("stream_words", "name", "''", lambda: shardinit.stream_words(0, "", 0, 1), E, r"^name must be a non-empty"),
    Case("stream_words", "start", "-1", lambda: shardinit.stream_words(0, "w", -1, 1), E, r"^start must be in \[0, 18446744073709551615\], got -1"),
    Case("stream_words", "start", "2**64", lambda: shardinit.stream_words(0, "w", 2**64, 0), E, r"^start must be in"),
    Case("stream_words", "start", "1.0", lambda: shardinit.stream_words(0, "w", 1.0, 1), TypeError, r"^start must be an int, got float"),
    Case("stream_words", "count", "-1", lambda: shardinit.stream_words(0, "w", 0, -1), E, r"^count must be in \[0, 1099511627776\], got -1"),
    Case("stream_words", "count", "2**40 + 1", lambda: shardinit.stream_words(0, "w", 0, 2**40 + 1), E, r"^count must be in \[0, 1099511627776\]"),
    Case("stream_words", "count", "'8'", lambda: shardinit.stream_words(0, "w", 0, "8"), TypeError, r"^count must be an int, got str"),
    Case("stream_words", "start + count", "2**64 - 1 and 2", lambda: shardinit.stream_words(0, "w", 2**64 - 1, 2), E, r"^start \+ count must be <= 2\^64"),
    # ---- ParamSpec(name, shape, dtype, init, seed) ------------------------------------
    Case("ParamSpec", "name", "3", _spec(name=3), TypeError, r"^name must be a str, got int"),
    Case("ParamSpec", "name", "''", _spec(name=""), E, r"^name must be a non-empty string"),
    Case("ParamSpec", "name", "'\\udc80'", _spec(name="\udc80"), E, r"^name must be encodable as UTF-8"),
    Case("ParamSpec", "shape", "4", _spec(shape=4), TypeError, r"^shape must be a sequence of ints, got int"),
    Case("ParamSpec", "shape", "'4'", _spec(shape="4"), TypeError, r"^shape must be a sequence of ints, got str"),
    Case("ParamSpec", "shape", "None", _spec(shape=None), TypeError, r"^shape must be a sequence of ints"),
    Case("ParamSpec", "shape", "{2, 3} (a set)", _spec(shape={2, 3}), TypeError, r"^shape must be a sequence of ints, got set"),
    Case("ParamSpec", "shape", "(4.0, 3)", _spec(shape=(4.0, 3)), TypeError, r"^shape\[0\] must be an int, got float"),
    Case("ParamSpec", "shape", "(4, nan)", _spec(shape=(4, NAN)), TypeError, r"^shape\[1\] must be an int, got float"),
    Case("ParamSpec", "shape", "(4, -1)", _spec(shape=(4, -1)), E, r"^shape\[1\] must be in \[0, inf\], got -1"),
    Case("ParamSpec", "shape", "(2**32, 2**32)", _spec(shape=(2**32, 2**32)), SIZE_ERROR, r"^shape \(4294967296, 4294967296\) has 18446744073709551616 elements; stream format v1 addresses at most 18446744073709551615"),
    Case("ParamSpec", "shape", "(2**63 + 1,), float64", _spec(shape=(2**63 + 1,), dtype=torch.float64), SIZE_ERROR, r"at most 9223372036854775808 elements of torch.float64"),
    Case("ParamSpec", "shape", "(2**70, 0)", _spec(shape=(2**70, 0)), SIZE_ERROR, r"^shape\[0\] = 1180591620717411303424 does not fit in 64 bits"),
    Case("ParamSpec", "shape", "(0, 2**64)", _spec(shape=(0, 2**64)), SIZE_ERROR, r"^shape\[1\] = 18446744073709551616 does not fit in 64 bits"),
    Case("ParamSpec", "shape", "(2**64,), bfloat16", _spec(shape=(2**64,), dtype=torch.bfloat16), SIZE_ERROR, r"^shape\[0\] = 18446744073709551616 does not fit in 64 bits"),
    Case("ParamSpec", "shape", "(2**62, 3), float64", _spec(shape=(2**62, 3), dtype=torch.float64), SIZE_ERROR, r"at most 9223372036854775808 elements of torch.float64"),
    Case("ParamSpec", "shape", "(2**16,) * 5, float16", _spec(shape=(2**16,) * 5, dtype=torch.float16), SIZE_ERROR, r"^shape \(65536, 65536, 65536, 65536, 65536\) has 1208925819614629174706176 elements"),
    Case("ParamSpec", "shape", "(1,) * 65", _spec(shape=(1,) * 65), E, r"^shape must have at most 64 dims \(numpy's and Python buffers' limit, through which shards are filled\), got 65 dims$"),
    Case("ParamSpec", "shape", "[1] * 200", _spec(shape=[1] * 200), E, r"^shape must have at most 64 dims .*got 200 dims$"),
    Case("ParamSpec", "dtype", "'float32'", _spec(dtype="float32"), TypeError, r"^dtype must be a torch.dtype, got str"),
    Case("ParamSpec", "dtype", "np.float32", _spec(dtype=np.float32), TypeError, r"^dtype must be a torch.dtype"),
    Case("ParamSpec", "dtype", "torch.int32", _spec(dtype=torch.int32), E, r"^dtype must be one of torch.float32, torch.float64, torch.bfloat16, torch.float16, got torch.int32"),
    Case("ParamSpec", "dtype", "torch.complex64", _spec(dtype=torch.complex64), E, r"^dtype must be one of .*got torch.complex64"),
    Case("ParamSpec", "init", "'normal'", _spec(init="normal"), TypeError, r"^init must be a shardinit.init initializer, got str"),
    Case("ParamSpec", "init", "init.Normal (the class)", _spec(init=init.Normal), TypeError, r"^init must be a shardinit.init initializer"),
    Case("ParamSpec", "init", "kaiming_uniform() on shape (5,)", _spec(shape=(5,), init=init.kaiming_uniform()), E, r"^Fan in and fan out can not be computed for tensor with fewer than 2 dimensions \(torch's own error\): init kaiming_uniform needs a shape with at least 2 dims, got shape \(5,\)$"),
    Case("ParamSpec", "init", "xavier_normal() on shape ()", _spec(shape=(), init=init.xavier_normal()), E, r"^Fan in and fan out can not be computed for tensor with fewer than 2 dimensions \(torch's own error\): init xavier_normal needs a shape with at least 2 dims, got shape \(\)$"),
    Case("ParamSpec", "init", "constant(1e300), float32", _spec(init=init.constant(1e300)), E, r"^init value=1e\+300 overflows torch.float32"),
    Case("ParamSpec", "init", "uniform(-1e5, 1e5), float16", _spec(init=init.uniform(-1e5, 1e5), dtype=torch.float16), E, r"^init a=-100000.0 overflows torch.float16"),
    Case("ParamSpec", "init", "xavier_uniform(gain=1e308)", _spec(init=init.xavier_uniform(1e308)), E, r"^gain=1e\+308 gives a bound .* too large for U\(-bound, bound\)"),
    Case("ParamSpec", "seed", "missing", lambda: shardinit.ParamSpec("w", (4, 3)), TypeError, r"^ParamSpec needs seed=<int in \[0, 2\^64\)>"),
    Case("ParamSpec", "seed", "-1", _spec(seed=-1), E, r"^seed must be in \[0, 18446744073709551615\]"),
    Case("ParamSpec", "seed", "1.0", _spec(seed=1.0), TypeError, r"^seed must be an int, got float"),
    # ---- init_shard(spec, rank, world, *, dim, device, out) ---------------------------
    Case("init_shard", "spec", "'w'", lambda: shardinit.init_shard("w", 0, 1), TypeError, r"^spec must be a ParamSpec, got str"),
    Case("init_shard", "rank", "-1", lambda: shardinit.init_shard(SPEC, -1, 2), E, r"^rank must be in \[0, 1\], got -1"),
    Case("init_shard", "rank", "world (2)", lambda: shardinit.init_shard(SPEC, 2, 2), E, r"^rank must be in \[0, 1\], got 2"),
    Case("init_shard", "rank", "0.0", lambda: shardinit.init_shard(SPEC, 0.0, 2), TypeError, r"^rank must be an int, got float"),
    Case("init_shard", "rank", "True", lambda: shardinit.init_shard(SPEC, True, 2), TypeError, r"^rank must be an int, got bool"),
    Case("init_shard", "world", "0", lambda: shardinit.init_shard(SPEC, 0, 0), E, r"^world must be in \[1, 18446744073709551615\], got 0"),
    Case("init_shard", "world", "2**64", lambda: shardinit.init_shard(SPEC, 0, 2**64), E, r"^world must be in \[1, 18446744073709551615\]"),
    Case("init_shard", "world", "nan", lambda: shardinit.init_shard(SPEC, 0, NAN), TypeError, r"^world must be an int, got float"),
    Case("init_shard", "dim", "2 (2-d spec)", lambda: shardinit.init_shard(SPEC, 0, 2, dim=2), E, r"^dim must be in \[-2, 1\], got 2"),
    Case("init_shard", "dim", "-3 (2-d spec)", lambda: shardinit.init_shard(SPEC, 0, 2, dim=-3), E, r"^dim must be in \[-2, 1\], got -3"),
    Case("init_shard", "dim", "'0'", lambda: shardinit.init_shard(SPEC, 0, 2, dim="0"), TypeError, r"^dim must be an int, got str"),
    Case("init_shard", "dim", "0 (0-d spec)", lambda: shardinit.init_shard(SCALAR, 0, 1), E, r"^dim: a 0-d parameter cannot be sharded"),
    Case("init_shard", "device", "'meta'", lambda: shardinit.init_shard(SPEC, 0, 1, device="meta"), E, r"^device must be 'cpu' or a CUDA device, got meta"),
    Case("init_shard", "device", "'nonsense'", lambda: shardinit.init_shard(SPEC, 0, 1, device="nonsense"), E, r"^device must be a torch device, got 'nonsense'"),
    Case("init_shard", "device", "1.5", lambda: shardinit.init_shard(SPEC, 0, 1, device=1.5), TypeError, r"^device must be None, a str, an int or a torch.device, got float"),
    Case("init_shard", "device", "torch.float32", lambda: shardinit.init_shard(SPEC, 0, 1, device=torch.float32), TypeError, r"^device must be None, a str, an int or a torch.device"),
    Case("init_shard", "out", "a numpy array", _out(lambda: np.empty((4, 3), np.float32)), TypeError, r"^out must be a torch.Tensor, got ndarray"),
    Case("init_shard", "out", "a list", _out(lambda: [0.0] * 12), TypeError, r"^out must be a torch.Tensor, got list"),
    Case("init_shard", "out", "shape (3, 4)", _out(lambda: torch.empty(3, 4)), E, r"^out has shape \(3, 4\) but the region has shape \(4, 3\)"),
    Case("init_shard", "out", "dtype float64", _out(lambda: torch.empty(4, 3, dtype=torch.float64)), E, r"^out has dtype torch.float64 but the spec has dtype torch.float32"),
    Case("init_shard", "out", "dtype int32", _out(lambda: torch.empty(4, 3, dtype=torch.int32)), E, r"^out has dtype torch.int32"),
    Case("init_shard", "out", "transposed (non-contiguous)", _out(lambda: torch.empty(3, 4).t()), E, r"^out must be contiguous \(C order\)"),
    Case("init_shard", "out", "expanded (stride 0)", _out(lambda: torch.empty(1, 3).expand(4, 3)), E, r"^out must be contiguous"),
    Case("init_shard", "out", "every other row (strided view)", _out(lambda: torch.empty(8, 3)[::2]), E, r"^out must be contiguous"),
    Case("init_shard", "out", "meta tensor", _out(lambda: torch.empty(4, 3, device="meta")), E, r"^out is a meta tensor; it has no memory to fill"),
    Case("init_shard", "out", "sparse COO", _out(lambda: torch.zeros(4, 3).to_sparse()), E, r"^out must have layout torch.strided, got torch.sparse_coo"),
    Case("init_shard", "out", "nested tensor", _out(_quiet(lambda: torch.nested.nested_tensor([torch.empty(3)] * 4))), E, r"^out must be a plain strided tensor, got a nested tensor"),
    Case("init_shard", "out", "negative-bit view", _out(lambda: torch.empty(4, 3)._neg_view()), E, r"^out has its negative or conjugate bit set"),
    Case("init_shard", "device", "'meta' with a cpu out", lambda: shardinit.init_shard(SPEC, 0, 1, device="meta", out=torch.empty(4, 3)), E, r"^device must be 'cpu' or a CUDA device, got meta"),
    # ---- init_box(spec, box, *, device, out) ------------------------------------------
    Case("init_box", "spec", "None", lambda: shardinit.init_box(None, [(0, 1), (0, 1)]), TypeError, r"^spec must be a ParamSpec, got NoneType"),
    Case("init_box", "box", "None", lambda: shardinit.init_box(SPEC, None), TypeError, r"^box must be a sequence of \(start, stop\) pairs, got None"),
    Case("init_box", "box", "'ab'", lambda: shardinit.init_box(SPEC, "ab"), TypeError, r"^box must be a sequence of \(start, stop\) pairs"),
    Case("init_box", "box", "a numpy array", lambda: shardinit.init_box(SPEC, np.array([[0, 1], [0, 3]])), TypeError, r"^box must be a sequence of \(start, stop\) pairs"),
    Case("init_box", "box", "1 pair for 2 dims", lambda: shardinit.init_box(SPEC, [(0, 1)]), E, r"^box has 1 \(start, stop\) pairs but shape \(4, 3\) has 2 dims"),
    Case("init_box", "box", "[(0, 1, 2), (0, 3)]", lambda: shardinit.init_box(SPEC, [(0, 1, 2), (0, 3)]), TypeError, r"^box\[0\] must be a \(start, stop\) pair"),
    Case("init_box", "box", "[slice(0, 1), slice(0, 3)]", lambda: shardinit.init_box(SPEC, [slice(0, 1), slice(0, 3)]), TypeError, r"^box\[0\] must be a \(start, stop\) pair"),
    Case("init_box", "box", "[(-1, 1), (0, 3)]", lambda: shardinit.init_box(SPEC, [(-1, 1), (0, 3)]), E, r"^box\[0\] start must be in \[0, 4\], got -1"),
    Case("init_box", "box", "[(0, 5), (0, 3)]", lambda: shardinit.init_box(SPEC, [(0, 5), (0, 3)]), E, r"^box\[0\] stop must be in \[0, 4\], got 5"),
    Case("init_box", "box", "[(2, 1), (0, 3)] (reversed)", lambda: shardinit.init_box(SPEC, [(2, 1), (0, 3)]), E, r"^box\[0\] stop must be in \[2, 4\], got 1"),
    Case("init_box", "box", "[(0.0, 1), (0, 3)]", lambda: shardinit.init_box(SPEC, [(0.0, 1), (0, 3)]), TypeError, r"^box\[0\] start must be an int, got float"),
    Case("init_box", "box", "[(0, 1), (0, inf)]", lambda: shardinit.init_box(SPEC, [(0, 1), (0, INF)]), TypeError, r"^box\[1\] stop must be an int, got float"),
    Case("init_box", "out", "shape (1, 1) for a 2 x 3 box", lambda: shardinit.init_box(SPEC, [(0, 2), (0, 3)], out=torch.empty(1, 1)), E, r"^out has shape \(1, 1\) but the region has shape \(2, 3\)"),
    Case("init_box", "device", "'meta'", lambda: shardinit.init_box(SPEC, [(0, 2), (0, 3)], device="meta"), E, r"^device must be 'cpu' or a CUDA device"),
    # ---- init_flat(spec, start, stop, *, device, out) ---------------------------------
    Case("init_flat", "spec", "3", lambda: shardinit.init_flat(3, 0, 1), TypeError, r"^spec must be a ParamSpec, got int"),
    Case("init_flat", "start", "-1", lambda: shardinit.init_flat(SPEC, -1, 2), E, r"^start must be in \[0, 12\], got -1"),
    Case("init_flat", "start", "0.0", lambda: shardinit.init_flat(SPEC, 0.0, 2), TypeError, r"^start must be an int, got float"),
    Case("init_flat", "stop", "13 (numel 12)", lambda: shardinit.init_flat(SPEC, 0, 13), E, r"^stop must be in \[0, 12\], got 13"),
    Case("init_flat", "stop", "2 < start 3", lambda: shardinit.init_flat(SPEC, 3, 2), E, r"^stop must be in \[3, 12\], got 2"),
    Case("init_flat", "stop", "'2'", lambda: shardinit.init_flat(SPEC, 0, "2"), TypeError, r"^stop must be an int, got str"),
    Case("init_flat", "out", "shape (1, 2)", lambda: shardinit.init_flat(SPEC, 0, 2, out=torch.empty(1, 2)), E, r"^out has shape \(1, 2\) but the region has shape \(2,\)"),
    Case("init_flat", "out", "meta tensor", lambda: shardinit.init_flat(SPEC, 0, 2, out=torch.empty(2, device="meta")), E, r"^out is a meta tensor"),
    Case("init_flat", "device", "'meta' with a cpu out", lambda: shardinit.init_flat(SPEC, 0, 2, device="meta", out=torch.empty(2)), E, r"^device must be 'cpu' or a CUDA device, got meta"),
    # ---- full(spec, *, device) --------------------------------------------------------
    Case("full", "spec", "None", lambda: shardinit.full(None), TypeError, r"^spec must be a ParamSpec, got NoneType"),
    Case("full", "device", "'meta'", lambda: shardinit.full(SPEC, device="meta"), E, r"^device must be 'cpu' or a CUDA device, got meta"),
    Case("full", "device", "-1", lambda: shardinit.full(SPEC, device=-1), E, r"^device must be a torch device, got -1"),
    # ---- box_of_shard(spec, rank, world, dim) ------------------------------------------
    Case("box_of_shard", "world", "0", lambda: shardinit.box_of_shard(SPEC, 0, 0), E, r"^world must be in \[1, "),
    Case("box_of_shard", "dim", "5", lambda: shardinit.box_of_shard(SPEC, 0, 1, 5), E, r"^dim must be in \[-2, 1\], got 5"),
    # ---- shardinit.init constructors ----------------------------------------------------
    Case("init.zeros", "(none)", "an argument", lambda: init.zeros(1), TypeError, r"zeros\(\) takes 0 positional arguments"),
    Case("init.ones", "(none)", "an argument", lambda: init.ones(1), TypeError, r"ones\(\) takes 0 positional arguments"),
    Case("init.constant", "value", "'1'", lambda: init.constant("1"), TypeError, r"^value must be a real number, got str"),
    Case("init.constant", "value", "None", lambda: init.constant(None), TypeError, r"^value must be a real number, got NoneType"),
    Case("init.constant", "value", "nan", lambda: init.constant(NAN), E, r"^value must be a finite number, got nan"),
    Case("init.constant", "value", "-inf", lambda: init.constant(-INF), E, r"^value must be a finite number, got -inf"),
    Case("init.constant", "value", "10**400", lambda: init.constant(10**400), E, r"^value must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    Case("init.constant", "value", "Fraction(-10**400)", lambda: init.constant(Fraction(-10**400)), E, r"^value must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got Fraction Fraction\(-10\.\.\. \(415 characters\)$"),
    Case("init.uniform", "a", "'0'", lambda: init.uniform("0", 1), TypeError, r"^a must be a real number, got str"),
    Case("init.uniform", "a", "torch.tensor(0.0)", lambda: init.uniform(torch.tensor(0.0), 1), TypeError, r"^a must be a real number, got Tensor"),
    Case("init.uniform", "a", "nan", lambda: init.uniform(NAN, 1), E, r"^a must be a finite number, got nan"),
    Case("init.uniform", "b", "inf", lambda: init.uniform(0, INF), E, r"^b must be a finite number, got inf"),
    Case("init.uniform", "a", "-10**400", lambda: init.uniform(a=-10**400), E, r"^a must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int -10000000000\.\.\. \(401 digits\)$"),
    Case("init.uniform", "b", "2**1024", lambda: init.uniform(b=2**1024), E, r"^b must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 179769313486\.\.\. \(309 digits\)$"),
    Case("init.uniform", "a, b", "a == b", lambda: init.uniform(1, 1), E, r"^uniform needs a < b, got a=1.0, b=1.0"),
    Case("init.uniform", "a, b", "a > b", lambda: init.uniform(1, 0), E, r"^uniform needs a < b, got a=1.0, b=0.0"),
    Case("init.uniform", "a, b", "-1e308, 1e308", lambda: init.uniform(-1e308, 1e308), E, r"^uniform needs b - a to be finite"),
    Case("init.normal", "mean", "nan", lambda: init.normal(NAN, 1), E, r"^mean must be a finite number, got nan"),
    Case("init.normal", "std", "-1", lambda: init.normal(0, -1), E, r"^std must be >= 0, got -1.0"),
    Case("init.normal", "std", "inf", lambda: init.normal(0, INF), E, r"^std must be a finite number, got inf"),
    Case("init.normal", "std", "'1'", lambda: init.normal(0, "1"), TypeError, r"^std must be a real number, got str"),
    Case("init.normal", "std", "1e308", lambda: init.normal(0, 1e308), E, r"^std=1e\+308 with mean=0.0 overflows binary64"),
    Case("init.normal", "mean", "-10**400", lambda: init.normal(mean=-10**400), E, r"^mean must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int -10000000000\.\.\. \(401 digits\)$"),
    Case("init.normal", "std", "10**400", lambda: init.normal(std=10**400), E, r"^std must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    Case("init.trunc_normal", "mean", "'0'", lambda: init.trunc_normal("0"), TypeError, r"^mean must be a real number, got str"),
    Case("init.trunc_normal", "std", "0", lambda: init.trunc_normal(0, 0), E, r"^trunc_normal needs std > 0, got 0.0"),
    Case("init.trunc_normal", "std", "-1", lambda: init.trunc_normal(0, -1), E, r"^trunc_normal needs std > 0, got -1.0"),
    Case("init.trunc_normal", "a", "nan", lambda: init.trunc_normal(0, 1, NAN, 2), E, r"^a must be a finite number, got nan"),
    Case("init.trunc_normal", "b", "inf", lambda: init.trunc_normal(0, 1, -2, INF), E, r"^b must be a finite number, got inf"),
    Case("init.trunc_normal", "std", "10**400", lambda: init.trunc_normal(std=10**400), E, r"^std must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    Case("init.trunc_normal", "a", "-10**400", lambda: init.trunc_normal(a=-10**400), E, r"^a must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int -10000000000\.\.\. \(401 digits\)$"),
    Case("init.trunc_normal", "a, b", "a == b", lambda: init.trunc_normal(0, 1, 1, 1), E, r"^trunc_normal needs a < b, got a=1.0, b=1.0"),
    Case("init.trunc_normal", "a, b", "[100, 101] with std 1", lambda: init.trunc_normal(0, 1, 100, 101), E, r"^trunc_normal interval \[a, b\] = \[100.0, 101.0\] lies 100 std from the mean"),
    Case("init.trunc_normal", "std, a, b", "[-1, 1] with std 1e30", lambda: init.trunc_normal(0, 1e30, -1, 1), E, r"^trunc_normal interval \[a, b\] = \[-1.0, 1.0\] is too narrow for std=1e\+30"),
    Case("init.kaiming_uniform", "a", "nan", lambda: init.kaiming_uniform(a=NAN), E, r"^a must be a finite number, got nan"),
    Case("init.kaiming_uniform", "a", "'x'", lambda: init.kaiming_uniform(a="x"), TypeError, r"^a must be a real number, got str"),
    Case("init.kaiming_uniform", "a", "10**400", lambda: init.kaiming_uniform(a=10**400), E, r"^a must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    Case("init.kaiming_uniform", "mode", "'fan'", lambda: init.kaiming_uniform(mode="fan"), E, r"^mode must be 'fan_in' or 'fan_out', got 'fan'"),
    Case("init.kaiming_uniform", "mode", "1", lambda: init.kaiming_uniform(mode=1), TypeError, r"^mode must be a str, got int"),
    Case("init.kaiming_uniform", "nonlinearity", "'foo'", lambda: init.kaiming_uniform(nonlinearity="foo"), E, r"^nonlinearity must be one torch.nn.init.calculate_gain accepts, got 'foo'"),
    Case("init.kaiming_uniform", "nonlinearity", "None", lambda: init.kaiming_uniform(nonlinearity=None), TypeError, r"^nonlinearity must be a str, got NoneType"),
    Case("init.kaiming_normal", "a", "inf", lambda: init.kaiming_normal(a=INF), E, r"^a must be a finite number, got inf"),
    Case("init.kaiming_normal", "a", "-10**400", lambda: init.kaiming_normal(a=-10**400), E, r"^a must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int -10000000000\.\.\. \(401 digits\)$"),
    Case("init.kaiming_normal", "mode", "'in'", lambda: init.kaiming_normal(mode="in"), E, r"^mode must be 'fan_in' or 'fan_out'"),
    Case("init.kaiming_normal", "nonlinearity", "'gelu'", lambda: init.kaiming_normal(nonlinearity="gelu"), E, r"^nonlinearity must be one torch.nn.init.calculate_gain accepts, got 'gelu'"),
    Case("init.xavier_uniform", "gain", "-1", lambda: init.xavier_uniform(-1), E, r"^gain must be >= 0, got -1.0"),
    Case("init.xavier_uniform", "gain", "nan", lambda: init.xavier_uniform(NAN), E, r"^gain must be a finite number, got nan"),
    Case("init.xavier_uniform", "gain", "'1'", lambda: init.xavier_uniform("1"), TypeError, r"^gain must be a real number, got str"),
    Case("init.xavier_uniform", "gain", "10**400", lambda: init.xavier_uniform(10**400), E, r"^gain must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    Case("init.xavier_normal", "gain", "-0.5", lambda: init.xavier_normal(-0.5), E, r"^gain must be >= 0, got -0.5"),
    Case("init.xavier_normal", "gain", "inf", lambda: init.xavier_normal(INF), E, r"^gain must be a finite number, got inf"),
    Case("init.xavier_normal", "gain", "10**400", lambda: init.xavier_normal(10**400), E, r"^gain must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    # ---- set_num_threads(threads) -------------------------------------------------------
    Case("set_num_threads", "threads", "0", lambda: shardinit.set_num_threads(0), E, r"^threads must be in \[1, 4096\], got 0"),
    Case("set_num_threads", "threads", "-1", lambda: shardinit.set_num_threads(-1), E, r"^threads must be in \[1, 4096\], got -1"),
    Case("set_num_threads", "threads", "10**6", lambda: shardinit.set_num_threads(10**6), E, r"^threads must be in \[1, 4096\], got 1000000"),
    Case("set_num_threads", "threads", "2.0", lambda: shardinit.set_num_threads(2.0), TypeError, r"^threads must be an int, got float"),
    Case("set_num_threads", "threads", "'2'", lambda: shardinit.set_num_threads("2"), TypeError, r"^threads must be an int, got str"),
    Case("set_num_threads", "threads", "True", lambda: shardinit.set_num_threads(True), TypeError, r"^threads must be an int, got bool"),
    # ---- set_cuda_backend(backend), SHARDINIT_CUDA_BACKEND (docs/gpu.md) ----------------
    Case("set_cuda_backend", "backend", "3", lambda: shardinit.set_cuda_backend(3), TypeError, r"^backend must be a str or None, got int 3$"),
    Case("set_cuda_backend", "backend", "'gpu'", lambda: shardinit.set_cuda_backend("gpu"), E, r"^backend must be one of 'auto', 'triton', 'host', got 'gpu'$"),
    Case("get_cuda_backend", "SHARDINIT_CUDA_BACKEND", "'gpu'", lambda: _with_environment("SHARDINIT_CUDA_BACKEND", "gpu", shardinit.get_cuda_backend), E, r"^the environment variable SHARDINIT_CUDA_BACKEND must be one of 'auto', 'triton', 'host', got 'gpu'$"),
    # ---- get_num_threads() ----------------------------------------------------------------
    Case("get_num_threads", "(none)", "an argument", lambda: shardinit.get_num_threads(1), TypeError, r"get_num_threads\(\) takes 0 positional arguments but 1 was given$"),
    # ---- canonical_name(path) ---------------------------------------------------------------
    Case("canonical_name", "path", "3", lambda: shardinit.canonical_name(3), TypeError, r"^path must be a str, got int 3$"),
    Case("canonical_name", "path", "None", lambda: shardinit.canonical_name(None), TypeError, r"^path must be a str, got NoneType None$"),
    # ---- materialize(module, *, seed, device, rules, buffer_init, overwrite, init_fn, only) ----
    Case("materialize", "module", "None", lambda: shardinit.materialize(None, seed=0), TypeError, r"^module must be a torch.nn.Module, got NoneType$"),
    Case("materialize", "module", "a state dict", lambda: shardinit.materialize({"w": torch.empty(2)}, seed=0), TypeError, r"^module must be a torch.nn.Module, got dict$"),
    Case("materialize", "module", "already materialized (cpu)", lambda: shardinit.materialize(nn.Linear(3, 2), seed=0), E, r"^materialize: 2 parameter\(s\) are already materialized: weight, bias\. materialize fills meta-device models \(and FSDP1 units allocated by shardinit.fsdp1_param_init_fn\); pass overwrite=True to replace existing values$"),
    Case("materialize", "module", "prepared by accelerate on meta", lambda: shardinit.materialize(_prepared_meta_linear(), seed=0), E, r"^materialize: the model went through accelerate's Accelerator\.prepare while 2 parameter\(s\) were still on the meta device: weight, bias\. prepare maps the optimizer's parameters by data_ptr\(\), which is 0 for every meta tensor, so its optimizer now holds one parameter in every slot\. Shard the model \(fsdp2_prepare_model or fully_shard\), materialize it, then create the optimizer and call prepare \(docs/trainers\.md\)$"),
    Case("materialize", "seed", "missing", lambda: shardinit.materialize(_meta_linear()), TypeError, r"materialize\(\) missing 1 required keyword-only argument: 'seed'$"),
    Case("materialize", "seed", "-1", _materialize(seed=-1), E, r"^seed must be in \[0, 18446744073709551615\], got -1$"),
    Case("materialize", "seed", "1.5", _materialize(seed=1.5), TypeError, r"^seed must be an int, got float 1.5$"),
    Case("materialize", "device", "'meta'", _materialize(device="meta"), E, r"^device must be 'cpu' or a CUDA device, got meta$"),
    Case("materialize", "device", "1.5", _materialize(device=1.5), TypeError, r"^device must be None, a str, an int or a torch.device, got float 1.5$"),
    Case("materialize", "rules", "3", _materialize(rules=3), TypeError, r"^rules must be a mapping or a sequence of pairs, got 3$"),
    Case("materialize", "rules", "[('*weight',)]", _materialize(rules=[("*weight",)]), TypeError, r"^rules\[0\] must be a \(key, initializer\) pair, got \('\*weight',\)$"),
    Case("materialize", "rules", "{1: zeros()}", _materialize(rules={1: init.zeros()}), TypeError, r"^rules key 1 must be a name glob \(str\), an nn.Module subclass, or \(nn.Module subclass, attribute glob\)$"),
    Case("materialize", "rules", "{'*weight': 'normal'}", _materialize(rules={"*weight": "normal"}), TypeError, r"^rules\['\*weight'\] must be a shardinit.init initializer, got str 'normal'$"),
    Case("materialize", "buffer_init", "3", _materialize(buffer_init=3), TypeError, r"^buffer_init must be callable, got int$"),
    Case("materialize", "overwrite", "'yes'", _materialize(overwrite="yes"), TypeError, r"^overwrite must be a bool, got str$"),
    Case("materialize", "init_fn", "3", _materialize(init_fn=3), TypeError, r"^init_fn must be callable or a CapturedInit, got int$"),
    Case("materialize", "init_fn", "calls materialize(..., init_fn=...) (nested)", _materialize(init_fn=lambda: shardinit.materialize(_meta_linear(), seed=0, init_fn=lambda: None)), E, r"^capture_init called while capture_init is already running in this thread \(nested\): init code may not capture again"),
    Case("materialize", "module", "nn.LazyLinear on meta (no shape yet)", lambda: shardinit.materialize(_meta_lazy_linear(), seed=0), E, r"^materialize: 2 parameter\(s\) are uninitialized lazy parameters \(nn.LazyLinear and the other nn.Lazy\* modules\), whose shape is unknown until their first forward: weight, bias\. Run one forward pass first"),
    Case("materialize", "module", "a submodule of a larger model", _materialize_part(), E, r"^materialize: module \(Linear\) is part of a larger model: a Sequential holds it as '1'\. Canonical names are paths from the module passed \('weight', not '1\.weight'\), so parts of one shape would get equal values\. Materialize the whole model; to fill part of it, pass only: materialize\(model, seed=\.\.\., only=lambda name: name\.startswith\('1\.'\)\)$"),
    Case("materialize", "only", "3", _materialize(only=3), TypeError, r"^only must be an iterable of parameter names \(e\.g\. load_state_dict's missing_keys\) or a callable name -> bool, got int 3$"),
    Case("materialize", "only", "'weight'", _materialize(only="weight"), TypeError, r"^only must be an iterable of parameter names \(e\.g\. load_state_dict's missing_keys\) or a callable name -> bool, got str 'weight'$"),
    Case("materialize", "only", "[1]", _materialize(only=[1]), TypeError, r"^only must hold str names, got int 1$"),
    Case("materialize", "only", "['wieght']", _materialize(only=["wieght"]), E, r"^materialize: only names 1 parameter\(s\) the model does not have: wieght\. Pass the names of this model's parameters \(canonical or as named_parameters\(\) and load_state_dict's missing_keys give them\)$"),
    Case("materialize", "only", "with FSDP1 or ZeRO-3", _materialize_only_flat, E, r"^materialize: only fills plain and DTensor parameters \(meta-device, FSDP2, TP\); not FSDP1 flat shards \(zeroed whole before they are filled\) or DeepSpeed ZeRO-3 partitions\. There, materialize the whole model, then load the checkpoint$"),
    Case("materialize", "only", "a copy of a loaded source", _materialize_copy_of_loaded, E, r"^materialize: only fills 2 parameter\(s\) that were deep-copied from a parameter only leaves as it is: copy\.bias \(a copy of source\.bias\), copy\.weight \(a copy of source\.weight\)\. In eager torch a copy starts equal to its source: load the checkpoint's value of the source into the copy too \(map its key onto both names\), or fill both$"),
    # ---- save_seed_checkpoint(model, path, *, seed, format, buffer_bytes, max_shard_size, progress) ----
    Case("save_seed_checkpoint", "model", "None", _seed_checkpoint(model=None), TypeError, r"^model must be a torch.nn.Module, got NoneType$"),
    Case("save_seed_checkpoint", "model", "allocated (cpu)", _seed_checkpoint(model=nn.Linear(3, 2)), E, r"^save_seed_checkpoint: model must be built on the meta device and not sharded or wrapped \(its checkpoint is written from the plan, never from memory\); these parameters are not plain meta parameters: weight, bias$"),
    Case("save_seed_checkpoint", "path", "3", _seed_checkpoint(path=3), TypeError, r"^path must be a str or os.PathLike, got int$"),
    Case("save_seed_checkpoint", "path", "under a regular file", _seed_checkpoint_under_file, E, r"^save_seed_checkpoint: path /dev/null/ckpt cannot be created: Not a directory \(ENOTDIR\)$"),
    Case("save_seed_checkpoint", "seed", "-1", _seed_checkpoint(seed=-1), E, r"^seed must be in \[0, 18446744073709551615\], got -1$"),
    Case("save_seed_checkpoint", "format", "'npz'", _seed_checkpoint(format="npz"), E, r"^format must be 'safetensors' or 'dcp', got 'npz'$"),
    Case("save_seed_checkpoint", "buffer_bytes", "4096", _seed_checkpoint(buffer_bytes=4096), E, r"^buffer_bytes must be an int >= 1 MiB \(1048576\), got 4096$"),
    Case("save_seed_checkpoint", "max_shard_size", "'5 bananas'", _seed_checkpoint(max_shard_size="5 bananas"), E, r"^max_shard_size must be a positive number of bytes \(1000000\) or a size such as '5GB' \(units KB, MB, GB, TB\), got '5 bananas'$"),
    Case("save_seed_checkpoint", "progress", "'yes'", _seed_checkpoint(progress="yes"), TypeError, r"^progress must be a bool, callable or None, got str$"),
    # ---- capture_init(module, init_fn) ------------------------------------------------------
    Case("capture_init", "module", "None", lambda: shardinit.capture_init(None, lambda: None), TypeError, r"^module must be a torch.nn.Module, got NoneType$"),
    Case("capture_init", "init_fn", "3", lambda: shardinit.capture_init(_meta_linear(), 3), TypeError, r"^init_fn must be callable, got int$"),
    Case("capture_init", "device", "'bogus'", lambda: shardinit.capture_init(_meta_linear(), lambda: None, device="bogus"), E, r"^device must be a torch device, got 'bogus': Expected one of cpu, cuda"),
    Case("capture_init", "device", "1.5", lambda: shardinit.capture_init(_meta_linear(), lambda: None, device=1.5), TypeError, r"^device must be None, a str, an int or a torch.device, got float 1.5$"),
    Case("capture_init", "device", "'meta' (guarded init code would be skipped)", lambda: shardinit.capture_init(_meta_linear(), lambda: None, device="meta"), E, r"^device must be 'cpu' or a CUDA device, got meta$"),
    Case("capture_init", "init_fn", "calls capture_init (nested)", lambda: shardinit.capture_init(_meta_linear(), lambda: shardinit.capture_init(_meta_linear(), lambda: None)), E, r"^capture_init called while capture_init is already running in this thread \(nested\)"),
    # ---- fsdp1_param_init_fn(module, device) ------------------------------------------------
    Case("fsdp1_param_init_fn", "module", "None", lambda: shardinit.fsdp1_param_init_fn(None), TypeError, r"^module must be a torch.nn.Module, got NoneType$"),
    Case("fsdp1_param_init_fn", "device", "'meta'", lambda: shardinit.fsdp1_param_init_fn(_meta_linear(), device="meta"), E, r"^device must be 'cpu' or a CUDA device, got meta$"),
    Case("fsdp1_param_init_fn", "device", "1.5", lambda: shardinit.fsdp1_param_init_fn(_meta_linear(), device=1.5), TypeError, r"^device must be None, a str, an int or a torch.device, got float 1.5$"),
    # ---- megatron.materialize(model_or_chunks, *, seed, config, rules) -----------------------
    Case("megatron.materialize", "model_or_chunks", "None", lambda: shardinit.megatron.materialize(None, seed=0, config=_MegatronConfig()), TypeError, r"^model_or_chunks must be an nn.Module or a non-empty list of them \(virtual pipeline chunks\), got None$"),
    Case("megatron.materialize", "model_or_chunks", "[]", lambda: shardinit.megatron.materialize([], seed=0, config=_MegatronConfig()), TypeError, r"^model_or_chunks must be an nn.Module or a non-empty list of them \(virtual pipeline chunks\), got \[\]$"),
    Case("megatron.materialize", "seed", "-1", _megatron(seed=-1), E, r"^seed must be in \[0, 18446744073709551615\], got -1$"),
    Case("megatron.materialize", "config", "None", _megatron(config=None), TypeError, r"^config must be the model's TransformerConfig \(with init_method, output_layer_init_method, embedding_init_method\), got NoneType$"),
    Case("megatron.materialize", "config", "fp8_param=True", _megatron(config=_MegatronConfig(fp8_param=True)), E, r"^config.fp8_param is set: fp8 primary weights are quantized; shardinit fills fp32/bf16/fp16 weights only$"),
    Case("megatron.materialize", "rules", "3", _megatron(rules=3), TypeError, r"^rules must be a mapping or a sequence of pairs, got 3$"),
    Case("megatron.materialize", "rules", "{1: zeros()}", _megatron(rules={1: init.zeros()}), TypeError, r"^rules key 1 must be a name glob \(str\), an nn.Module subclass, or \(nn.Module subclass, attribute glob\)$"),
    Case("megatron.materialize", "rules", "{'*weight': 'normal'}", _megatron(rules={"*weight": "normal"}), TypeError, r"^rules\['\*weight'\] must be a shardinit.init initializer or an init callable fn\(tensor\), got str 'normal'$"),
    Case("megatron.materialize", "rules", "{'*': init.Normal} (the class)", _megatron(rules={"*": init.Normal}), TypeError, r"^rules\['\*'\] must be a shardinit.init initializer or an init callable fn\(tensor\), got the class Normal \(an instance, e.g. shardinit.init.normal\(0.0, 0.02\), not the class\)$"),
    Case("megatron.materialize", "rules", "{'*': fn(tensor, std)} (two arguments)", _megatron(rules={"*": _two_argument_init}), TypeError, r"^rules\['\*'\] must be a shardinit.init initializer or an init callable fn\(tensor\): it is called with one tensor, but _two_argument_init takes \(tensor, std\) \(missing a required argument: 'std'\)$"),
    # ---- megatron.partition_names(model_or_chunks) --------------------------------------------
    Case("megatron.partition_names", "model_or_chunks", "'model'", lambda: shardinit.megatron.partition_names("model"), TypeError, r"^model_or_chunks must be an nn.Module or a non-empty list of them \(virtual pipeline chunks\), got 'model'$"),
    # ---- deepspeed.Init(*args, **kwargs): deepspeed.zero.Init's arguments ---------------------
    Case("deepspeed.Init", "config_dict_or_path", "3", lambda: shardinit.deepspeed.Init(config_dict_or_path=3), TypeError, r"^config_dict_or_path must be a dict, a path \(str or os.PathLike\) or None, got int$"),
    Case("deepspeed.Init", "config_dict_or_path", "3 (positional)", lambda: shardinit.deepspeed.Init(None, None, True, None, False, 3), TypeError, r"^config_dict_or_path must be a dict, a path \(str or os.PathLike\) or None, got int$"),
    Case("deepspeed.Init", "config", "3 (deprecated alias)", lambda: shardinit.deepspeed.Init(config=3), TypeError, r"^config must be a dict, a path \(str or os.PathLike\) or None, got int$"),
    Case("deepspeed.Init", "config_dict_or_path", "'missing-ds.json'", lambda: shardinit.deepspeed.Init(config_dict_or_path="missing-ds.json"), E, r"^config_dict_or_path: no file at 'missing-ds.json' \(DeepSpeed takes a dict, the path of an existing JSON config file, or a base64-encoded config\)$"),
    Case("deepspeed.Init", "config_dict_or_path", "Path('missing-ds.json')", lambda: shardinit.deepspeed.Init(config_dict_or_path=Path("missing-ds.json")), E, r"^config_dict_or_path: no file at 'missing-ds.json'"),
    # ---- fingerprint(tensor, *, group) --------------------------------------------------------
    Case("fingerprint", "tensor", "a list", lambda: shardinit.fingerprint([1.0, 2.0]), TypeError, r"^fingerprint needs a torch.Tensor or DTensor, got list$"),
    Case("fingerprint", "tensor", "a numpy array", lambda: shardinit.fingerprint(np.zeros(3)), TypeError, r"^fingerprint needs a torch.Tensor or DTensor, got ndarray$"),
    Case("fingerprint", "tensor", "meta tensor", lambda: shardinit.fingerprint(torch.empty(3, device="meta")), E, r"^fingerprint: the tensor is on the meta device \(no values\)$"),
    Case("fingerprint", "tensor", "quantized (qint8)", lambda: shardinit.fingerprint(_quiet(lambda: torch.quantize_per_tensor(torch.ones(2, 2), 0.1, 0, torch.qint8))()), E, r"^fingerprint: tensor is quantized \(torch.qint8\): its elements are integers with a scale, not values; fingerprint tensor.dequantize\(\) or tensor.int_repr\(\)$"),
    Case("fingerprint", "tensor", "sparse COO", lambda: shardinit.fingerprint(torch.eye(3).to_sparse()), E, r"^fingerprint: tensor has layout torch.sparse_coo; only dense \(torch.strided\) tensors are fingerprinted: pass tensor.to_dense\(\)$"),
    Case("fingerprint", "tensor", "sparse CSR", lambda: shardinit.fingerprint(_quiet(lambda: torch.eye(3).to_sparse_csr())()), E, r"^fingerprint: tensor has layout torch.sparse_csr; only dense"),
    Case("fingerprint", "tensor", "nested", lambda: shardinit.fingerprint(_quiet(lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]))()), E, r"^fingerprint: tensor is a nested tensor \(torch.strided\); fingerprint each of its tensors \(tensor.unbind\(\)\)$"),
    Case("fingerprint", "tensor", "nested (jagged)", lambda: shardinit.fingerprint(_quiet(lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged))()), E, r"^fingerprint: tensor is a nested tensor \(torch.jagged\)"),
    Case("fingerprint", "tensor", "complex64", lambda: shardinit.fingerprint(torch.zeros(2, dtype=torch.complex64)), E, r"^fingerprint does not support complex dtype torch.complex64$"),
    # ---- fingerprint_model(module, *, group, buffers) -------------------------------------------
    Case("fingerprint_model", "module", "'model'", lambda: shardinit.fingerprint_model("model"), TypeError, r"^module must be a torch.nn.Module, got str$"),
    Case("fingerprint_model", "module", "meta model", lambda: shardinit.fingerprint_model(_meta_linear()), E, r"^fingerprint: the tensor is on the meta device \(no values\)$"),
    Case("fingerprint_model", "module", "a sparse buffer", lambda: shardinit.fingerprint_model(_with_sparse_buffer(), buffers=True), E, r"^fingerprint: buffer 'table' has layout torch.sparse_coo; only dense"),
    Case("fingerprint_model", "buffers", "'yes'", lambda: shardinit.fingerprint_model(nn.Linear(3, 2), buffers="yes"), TypeError, r"^buffers must be a bool, got str$"),
    # ---- model_digest(fingerprints) -----------------------------------------------------------
    Case("model_digest", "fingerprints", "3", lambda: shardinit.model_digest(3), TypeError, r"^fingerprints must be a mapping or an iterable of \(name, fingerprint\) pairs, got int$"),
    Case("model_digest", "fingerprints", "'w'", lambda: shardinit.model_digest("w"), TypeError, r"^fingerprints must be a mapping or an iterable of \(name, fingerprint\) pairs, got str$"),
    Case("model_digest", "fingerprints", "[('w',)]", lambda: shardinit.model_digest([("w",)]), TypeError, r"^fingerprints must hold \(name, fingerprint\) pairs, got \('w',\)$"),
    Case("model_digest", "fingerprints", "{3: '0' * 16}", lambda: shardinit.model_digest({3: "0" * 16}), TypeError, r"^fingerprints: name must be a str, got int 3$"),
    Case("model_digest", "fingerprints", "{'w': 3}", lambda: shardinit.model_digest({"w": 3}), TypeError, r"^fingerprints\['w'\] must be a str, got int 3$"),
    Case("model_digest", "fingerprints", "{'w': 'zz'}", lambda: shardinit.model_digest({"w": "zz"}), E, r"^fingerprints\['w'\] must be 16 lowercase hex digits \(a shardinit.fingerprint\), got 'zz'$"),
    Case("model_digest", "fingerprints", "[('w', a), ('w', b)] (a name twice)", lambda: shardinit.model_digest([("w", "0" * 16), ("w", "1" * 16)]), E, r"^fingerprints: name 'w' appears twice \(with '0000000000000000' and '1111111111111111'\); a model's summary holds each parameter once$"),
    Case("model_digest", "fingerprints", "[('w', a), ('w', a)] (a pair twice)", lambda: shardinit.model_digest([("w", "0" * 16)] * 2), E, r"^fingerprints: name 'w' appears twice"),
    Case("model_digest", "fingerprints", "{'w': 16 uppercase hex}", lambda: shardinit.model_digest({"w": "ABCDEF0123456789"}), E, r"^fingerprints\['w'\] must be 16 lowercase hex digits"),
    # ---- presets.llm(std, *, depth_scaled_output, output_proj_patterns, norm_patterns) ----------
    Case("presets.llm", "std", "0", lambda: presets.llm(0), E, r"^std must be > 0, got 0.0$"),
    Case("presets.llm", "std", "nan", lambda: presets.llm(NAN), E, r"^std must be a finite number, got nan$"),
    Case("presets.llm", "std", "10**400", lambda: presets.llm(10**400), E, r"^std must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    Case("presets.llm", "std", "'x'", lambda: presets.llm("x"), TypeError, r"^std must be a real number, got str 'x'$"),
    Case("presets.llm", "depth_scaled_output", "0", lambda: presets.llm(depth_scaled_output=0), E, r"^depth_scaled_output must be in \[1, inf\], got 0$"),
    Case("presets.llm", "depth_scaled_output", "2.0", lambda: presets.llm(depth_scaled_output=2.0), TypeError, r"^depth_scaled_output must be an int, got float 2.0$"),
    Case("presets.llm", "output_proj_patterns", "'*.wo.weight' (a str)", lambda: presets.llm(depth_scaled_output=2, output_proj_patterns="*.wo.weight"), TypeError, r"^output_proj_patterns must be a sequence of name globs \(str\), got '\*.wo.weight'$"),
    Case("presets.llm", "norm_patterns", "3", lambda: presets.llm(norm_patterns=3), TypeError, r"^norm_patterns must be a sequence of name globs \(str\), got 3$"),
    Case("presets.llm", "norm_patterns", "[1]", lambda: presets.llm(norm_patterns=[1]), TypeError, r"^norm_patterns must be a sequence of name globs \(str\), got \[1\]$"),
    Case("ParamSpec", "init", "orthogonal() on shape (5,)", _spec(shape=(5,), init=init.orthogonal()), E, r"^parameter 'w': init orthogonal needs a shape with at least 2 dims \(torch: 'Only tensors with 2 or more dimensions are supported'\), got shape \(5,\)$"),
    Case("ParamSpec", "init", "orthogonal() on shape (8193, 8192)", _spec(shape=(8193, 8192), init=init.orthogonal()), E, r"^parameter 'w': orthogonal init of shape \(8193, 8192\) has 67117056 elements, above the cap of 67108864 \(every rank computes the whole matrix in binary64, 536936448 bytes\); raise the cap with shardinit.init.orthogonal\(max_numel=...\) or the environment variable SHARDINIT_ORTHOGONAL_MAX_NUMEL$"),
    Case("ParamSpec", "init", "orthogonal(max_numel=11) on shape (4, 3)", _spec(init=init.orthogonal(max_numel=11)), E, r"^parameter 'w': orthogonal init of shape \(4, 3\) has 12 elements, above the cap of 11 "),
    Case("ParamSpec", "SHARDINIT_ORTHOGONAL_MAX_NUMEL", "'11', shape (4, 3)", lambda: _with_environment("SHARDINIT_ORTHOGONAL_MAX_NUMEL", "11", _spec(init=init.orthogonal())), E, r"^parameter 'w': orthogonal init of shape \(4, 3\) has 12 elements, above the cap of 11 "),
    Case("ParamSpec", "SHARDINIT_ORTHOGONAL_MAX_NUMEL", "'1e9'", lambda: _with_environment("SHARDINIT_ORTHOGONAL_MAX_NUMEL", "1e9", _spec(init=init.orthogonal())), E, r"^the environment variable SHARDINIT_ORTHOGONAL_MAX_NUMEL must be an int in \[1, 18446744073709551615\], got '1e9'$"),
    Case("ParamSpec", "SHARDINIT_ORTHOGONAL_MAX_NUMEL", "'0'", lambda: _with_environment("SHARDINIT_ORTHOGONAL_MAX_NUMEL", "0", _spec(init=init.orthogonal())), E, r"^the environment variable SHARDINIT_ORTHOGONAL_MAX_NUMEL must be an int in \[1, 18446744073709551615\], got '0'$"),
    Case("init.orthogonal", "gain", "nan", lambda: init.orthogonal(NAN), E, r"^gain must be a finite number, got nan$"),
    Case("init.orthogonal", "gain", "inf", lambda: init.orthogonal(INF), E, r"^gain must be a finite number, got inf$"),
    Case("init.orthogonal", "gain", "10**400", lambda: init.orthogonal(10**400), E, r"^gain must be a finite number in binary64\'s range \[-1\.7976931348623157e\+308, 1\.7976931348623157e\+308\], got int 100000000000\.\.\. \(401 digits\)$"),
    Case("init.orthogonal", "gain", "'1'", lambda: init.orthogonal("1"), TypeError, r"^gain must be a real number, got str '1'$"),
    Case("init.orthogonal", "max_numel", "0", lambda: init.orthogonal(max_numel=0), E, r"^max_numel must be in \[1, 18446744073709551615\], got 0$"),
    Case("init.orthogonal", "max_numel", "1.5", lambda: init.orthogonal(max_numel=1.5), TypeError, r"^max_numel must be an int, got float 1.5$"),
    # ---- shardinit.init classes (the same checks as their constructor functions) -----------
    Case("init.Initializer", "(none)", "instantiated", lambda: init.Initializer(), TypeError, r"^Can't instantiate abstract class Initializer"),
    Case("init.BaseInit", "(none)", "instantiated", lambda: init.BaseInit(), TypeError, r"^Can't instantiate abstract class BaseInit"),
    Case("init.Constant", "value", "'1'", lambda: init.Constant("1"), TypeError, r"^value must be a real number, got str '1'$"),
    Case("init.Uniform", "a, b", "a == b", lambda: init.Uniform(1, 1), E, r"^uniform needs a < b, got a=1.0, b=1.0$"),
    Case("init.Normal", "std", "-1", lambda: init.Normal(0, -1), E, r"^std must be >= 0, got -1.0$"),
    Case("init.TruncNormal", "std", "0", lambda: init.TruncNormal(0, 0), E, r"^trunc_normal needs std > 0, got 0.0$"),
    Case("init.KaimingUniform", "a", "nan", lambda: init.KaimingUniform(a=NAN), E, r"^a must be a finite number, got nan$"),
    Case("init.KaimingNormal", "mode", "'in'", lambda: init.KaimingNormal(mode="in"), E, r"^mode must be 'fan_in' or 'fan_out', got 'in'$"),
    Case("init.XavierUniform", "gain", "'1'", lambda: init.XavierUniform("1"), TypeError, r"^gain must be a real number, got str '1'$"),
    Case("init.XavierNormal", "gain", "-0.5", lambda: init.XavierNormal(-0.5), E, r"^gain must be >= 0, got -0.5$"),
    Case("init.Orthogonal", "gain", "-inf", lambda: init.Orthogonal(-INF), E, r"^gain must be a finite number, got -inf$"),
]
# fmt: on

if not torch.cuda.is_available():
    CASES.append(
        Case(
            "init_shard",
            "device",
            "'cuda' (no CUDA here)",
            lambda: shardinit.init_shard(SPEC, 0, 1, device="cuda"),
            E,
            r"^device is cuda but CUDA is not available",
        )
    )


def _case_id(case: Case) -> str:
    return f"{case.function}-{case.argument}-{case.bad}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_bad_input_raises_a_specific_error_naming_the_argument(case: Case) -> None:
    threads_before = shardinit.get_num_threads()
    with pytest.raises(case.error, match=case.match) as caught:
        case.call()
    # Exactly the documented class: a TypeError is not a ShardInitError, and bad values
    # are ShardInitErrors (ValueErrors), never bare ValueErrors from torch or numpy.
    assert type(caught.value) is case.error
    if case.error is not TypeError:
        assert isinstance(caught.value, shardinit.ShardInitError)
        assert isinstance(caught.value, ValueError)
    assert shardinit.get_num_threads() == threads_before  # a refused setting changes nothing


# Public callables with no bad-input cases, each with the reason. Exception classes are
# left out by rule (raised, not called with user input).
EXEMPT = {
    "CapturedInit": "a record made by capture_init, whose arguments are checked; not built by hand",
    "megatron.deferred_init": "takes no arguments",
    "record_constructors": "takes no arguments (a context manager)",
}


def public_callables() -> set[str]:
    """Every callable that ``shardinit.__all__`` exports, and every callable in the
    ``__all__`` of the public modules it exports (``init.normal``, ``presets.llm``)."""
    found: set[str] = set()

    def add(label: str, value: object) -> None:
        if isinstance(value, type) and issubclass(value, BaseException):
            return
        if callable(value):
            found.add(label)

    for name in shardinit.__all__:
        value = getattr(shardinit, name)
        if isinstance(value, ModuleType):
            for inner in value.__all__:
                add(f"{name}.{inner}", getattr(value, inner))
        else:
            add(name, value)
    return found


def test_every_public_function_has_bad_input_cases() -> None:
    public = public_callables()
    assert {"materialize", "init.normal", "presets.llm", "ParamSpec"} <= public  # the walk works
    assert set(EXEMPT) <= public, f"stale exemptions: {set(EXEMPT) - public}"
    covered = {case.function for case in CASES}
    missing = public - covered - set(EXEMPT)
    assert not missing, f"public callables without bad-input cases: {sorted(missing)}"
    assert covered <= public, f"cases for names that are not public: {sorted(covered - public)}"


def test_refused_out_is_left_untouched() -> None:
    """A refused call writes nothing: an ``out`` of the wrong shape keeps its contents."""
    out = torch.full((3, 4), 5.0)
    with pytest.raises(shardinit.ShardInitError, match="out has shape"):
        shardinit.init_shard(SPEC, 0, 1, out=out)
    assert torch.equal(out, torch.full((3, 4), 5.0))


def _markdown() -> str:
    lines = [
        "# Errors: what each bad input raises",
        "",
        "Every public function checks its arguments before any work. A wrong **type** raises",
        "`TypeError`; a bad **value** raises `shardinit.ShardInitError`, a `ValueError`",
        "subclass (`shardinit.ShapeTooLargeError`, a `ShardInitError`, for shapes past what",
        "stream format v1 addresses). The message always names the argument. A bug inside",
        "the Rust core (a panic) is reported as `shardinit.InternalError`, a `RuntimeError`,",
        "never a crash of the interpreter.",
        "",
        "This table is generated from the test battery",
        "(`tests/core/test_bad_input.py`, which checks each row and fails when this",
        "file is stale); regenerate it with",
        "",
        "    .venv/bin/python tests/core/test_bad_input.py > docs/errors.md",
        "",
        "| function | argument | bad value | exception | message |",
        "|---|---|---|---|---|",
    ]
    for case in CASES:
        if "CUDA is not available" in case.match:
            continue  # depends on the machine
        try:
            case.call()
        except BaseException as error:  # recorded, whatever its kind
            message = str(error).splitlines()[0]
            kind = type(error).__name__
        else:
            raise AssertionError(f"{_case_id(case)} was accepted")
        if len(message) > 140:
            message = message[:137] + "..."
        cells = [case.function, case.argument, case.bad, kind, message]
        lines.append("| " + " | ".join(f"`{c}`".replace("|", "\\|") for c in cells) + " |")
    lines += [
        "",
        "The CUDA backend's machine-dependent rows (tested with Triton, ROCm and the runtime",
        "mocked in `tests/cuda/test_cuda_backend.py`; see docs/gpu.md):",
        "",
        "| situation | result |",
        "|---|---|",
        "| `SHARDINIT_CUDA_BACKEND=gpu` | `ShardInitError` at the first CUDA fill (not at import), naming the variable and the value |",
        "| backend `'triton'`, and Triton missing, older than 3.6, on ROCm, or its runtime does not start (no C compiler, no Python headers, no driver) | `ShardInitError` naming the reason and suggesting `'auto'` or `'host'`; nothing written to `out` |",
        "| backend `'auto'`, and the kernel unavailable for any of those reasons | the host path (same bits), plus one `shardinit.CudaBackendWarning` (a `UserWarning`) per process saying why |",
        "| any bad spec, box, range or `out`, whatever the backend | the error of the table above, checked before the backend is consulted |",
    ]
    shardinit.set_num_threads(None)
    return "\n".join(lines) + "\n"


def test_docs_errors_table_is_current() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
    assert doc.read_text(encoding="utf-8") == _markdown(), (
        "docs/errors.md is stale: regenerate it with "
        "`.venv/bin/python tests/core/test_bad_input.py > docs/errors.md`"
    )


if __name__ == "__main__":
    sys.stdout.write(_markdown())
