"""Constructor values: what a model's constructor computes for its parameters
(``nn.Parameter(torch.tensor(2.6592))``, ``nn.Parameter(torch.ones(d))``,
``nn.Parameter(torch.randn(d) * 0.02)``, ``nn.Parameter(torch.log(A))``) and its meta
buffers (``register_buffer("position_ids", torch.arange(n).expand((1, -1)))``, a causal
mask ``torch.empty(n, n).fill_(-inf).triu_(1)``, sin-cos tables), recorded while the
model is built (on meta) so that ``materialize`` can give them those values.

:func:`record_constructors` follows every tensor made while it is active, as
:func:`~shardinit.capture_init` follows temporaries, and registration hooks note which
module attribute each parameter and buffer lands on. When it exits, each parameter
still held there gets its init program (the fold of what was written to its tensor);
so does each buffer still held there on the meta device (a CPU buffer keeps its real
value anyway), evaluated whole at ``materialize``. Records are kept per module object
and attribute name (weakly), so they survive ``fully_shard`` (which swaps Parameters
for DTensors but keeps the modules).

Copies: ``copy.deepcopy`` of a module (peft's ``modules_to_save`` wrapper) starts each
copied parameter bit-equal to its source in eager torch. ``Parameter.__deepcopy__``
clones ``self.data`` under the active mode; :class:`_ConstructorCapture` notes the ``memo`` of
that deep copy, and at exit every copied parameter is recorded as a copy of its source
(``memo`` maps each original to its copy), by module and attribute like the values.
``materialize`` then names the copy's values by the source's canonical name
(docs/capturing-init.md, "Copies").
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_buffer_registration_hook,
    register_module_parameter_registration_hook,
)

from ...._program.actions import CapturedOp, ParamRecord, program_of
from ...._program.nodes import Bad, Expr, Source, bad_reasons, contains
from ...._torch_compat import deepcopy_memo, torch_function_disabled
from ....errors import ShardInitError
from ...collector import collector_paused
from ...exclusive import ThreadExclusive
from ..dispatch import CaptureMode
from ..ops import eager_values
from ..trace import user_frame
from .modulecalls import constructor_moves

__all__ = [
    "ConstructorValue",
    "buffer_tensor",
    "constructor_buffer",
    "constructor_record",
    "copied_any",
    "copy_source",
    "record_constructors",
]


@dataclass(frozen=True)
class ConstructorValue:
    """What a constructor computed for one parameter (over its GLOBAL coordinates), or
    why it cannot be replayed (``expr`` is then a :class:`~shardinit._program.nodes.Bad`)."""

    expr: Expr
    where: str
    #: The tensor the value was computed for, weakly, with its shape and dtype: a
    #: parameter init code put in its place afterwards is another one (:meth:`is_for`).
    tensor: weakref.ref[torch.Tensor] | None = None
    shape: tuple[int, ...] | None = None
    dtype: torch.dtype | None = None

    @property
    def computable(self) -> bool:
        """Whether the value can be replayed (else ``expr`` says why not)."""
        return not isinstance(self.expr, Bad)

    def is_for(self, current: object, shape: tuple[int, ...], dtype: torch.dtype) -> bool:
        """Whether the value is that of ``current``, the tensor of ``shape`` and ``dtype``
        the module holds now: one of another shape or dtype, or another plain tensor
        than the recorded one, replaced it after the constructor and takes its own init.
        (A DTensor or flat parameter of the same shape is the recorded one as FSDP2 or
        FSDP1 holds it: those keep the module, not the Parameter object.)"""
        if self.shape is not None and (tuple(shape), dtype) != (self.shape, self.dtype):
            return False
        if self.tensor is None or type(current) not in (nn.Parameter, torch.Tensor):
            return True
        return self.tensor() is current


_RECORDS: weakref.WeakKeyDictionary[nn.Module, dict[str, ConstructorValue]] = (
    weakref.WeakKeyDictionary()
)
_BUFFERS: weakref.WeakKeyDictionary[nn.Module, dict[str, ConstructorValue]] = (
    weakref.WeakKeyDictionary()
)
#: One thread records at a time (the registration hook is process-wide); nested in the
#: same thread each level records its own modules; entered from init code that
#: capture_init runs, it is refused.
_RECORDING = ThreadExclusive(
    "record_constructors()",
    "build the model inside record_constructors(), outside init code that capture_init runs",
    clashes_with=("capture_init",),
    reentrant=True,
)
#: copy module -> {attr: (source module, source attr)}: parameters deep-copied from another.
_COPIES: weakref.WeakKeyDictionary[nn.Module, dict[str, tuple[weakref.ref[nn.Module], str]]] = (
    weakref.WeakKeyDictionary()
)
_NEVER = "that were never written"


class _ConstructorCapture(CaptureMode):
    """The capture of a model's construction (:class:`CaptureMode`, followed from no
    tensor), which notes besides the ``memo`` of every deep copy that copies a Parameter
    (``Parameter.__deepcopy__`` clones ``self.data``): one mode, not a second one every
    torch call of the constructor passes through."""

    def __init__(self) -> None:
        super().__init__([], {})
        self.memos: dict[int, dict[int, Any]] = {}

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        if func is torch.Tensor.clone:
            memo = deepcopy_memo(sys._getframe(1))
            if memo is not None:
                self.memos[id(memo)] = memo
        return super().__torch_function__(func, types, args, kwargs)

    def record_copies(self) -> None:
        """Records each deep-copied parameter of a module as a copy of its source."""
        for memo in self.memos.values():
            for original in memo.get(id(memo), ()):  # deepcopy keeps the originals alive there
                copy = memo.get(id(original))
                if not isinstance(original, nn.Module) or not isinstance(copy, nn.Module):
                    continue
                for attr, param in original._parameters.items():
                    copied = copy._parameters.get(attr)
                    if param is not None and copied is not None and memo.get(id(param)) is copied:
                        _COPIES.setdefault(copy, {})[attr] = (weakref.ref(original), attr)
        self.memos.clear()


def copied_any() -> bool:
    """Whether any live module has a recorded copy (else :func:`copy_source` answers None
    for every parameter, and a caller can skip asking per parameter)."""
    return len(_COPIES) > 0


def copy_source(module: nn.Module, attr: str) -> tuple[nn.Module, str] | None:
    """The ``(module, attr)`` that ``module.<attr>`` was deep-copied from while
    :func:`record_constructors` was active, if that source is still alive, else None."""
    found = _COPIES.get(module, {}).get(attr)
    if found is None:
        return None
    source = found[0]()
    return None if source is None else (source, found[1])


@contextlib.contextmanager
def record_constructors() -> Iterator[None]:
    """Records what the constructors of modules built inside it compute for their
    parameters, so that :func:`shardinit.materialize` gives those parameters their
    constructor's values (after ``init_fn`` and rules, before torch.nn defaults).

    Build the model on meta inside it::

        with torch.device("meta"), shardinit.record_constructors():
            model = CLIPModel(config)          # logit_scale = nn.Parameter(torch.tensor(2.6592))
        fully_shard(...)
        shardinit.materialize(model, seed=1234, init_fn=model.init_weights)

    Values are followed as :func:`shardinit.capture_init` follows temporaries
    (docs/capturing-init.md): fills, ``torch.tensor`` of Python data, ``arange`` /
    ``linspace`` / ``ones`` / ..., ``rand`` / ``randn``, elementwise arithmetic, casts.
    A parameter whose constructor computed something that cannot be replayed (e.g.
    ``orthogonal_``) is refused by ``materialize`` if nothing earlier in the order
    initializes it; a parameter its constructor never wrote has no constructor value.
    A parameter deep-copied from another inside it (peft's ``modules_to_save``) keeps
    its source's values, as in eager torch (:func:`copy_source`).

    A buffer registered on the meta device gets the value its constructor computed
    (``position_ids``, causal masks, sin-cos tables), written by ``materialize`` after
    ``init_fn``'s and before torch's defaults and ``buffer_init``; one computed by
    operations shardinit does not follow is refused there (naming the buffer and the
    line that registered it) unless ``buffer_init`` fills it.
    """
    mode = _ConstructorCapture()
    seen: list[tuple[weakref.ref[nn.Module], str, nn.Parameter]] = []
    buffers: list[tuple[weakref.ref[nn.Module], str, torch.Tensor, str]] = []

    def hook(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None:
            seen.append((weakref.ref(module), name, param))

    def buffer_hook(module: nn.Module, name: str, buffer: torch.Tensor | None) -> None:
        if buffer is None:
            return
        with torch_function_disabled():  # the tensor's own device, not the dispatch's
            meta = buffer.is_meta
        if meta:
            buffers.append((weakref.ref(module), name, buffer, user_frame()))

    # The collector paused (why: collector.py) while the capture follows every tensor
    # the constructors make, and while their values are folded at the end.
    with collector_paused():
        with _RECORDING.hold():
            handles = [
                register_module_parameter_registration_hook(hook),
                register_module_buffer_registration_hook(buffer_hook),
            ]
            try:
                with mode, constructor_moves():
                    yield
            finally:
                for handle in handles:
                    handle.remove()
        mode.record_copies()
        _keep_values(mode, seen, buffers)


def _keep_values(
    mode: CaptureMode,
    params: list[tuple[weakref.ref[nn.Module], str, nn.Parameter]],
    buffers: list[tuple[weakref.ref[nn.Module], str, torch.Tensor, str]],
) -> None:
    """Records the value of each parameter and meta buffer its module still holds."""
    # Folding makes CPU constants (the model's device is meta), and reads the tensors'
    # layouts: with no mode (not even the device's), both go straight to torch's kernels.
    with torch_function_disabled():
        for ref, name, param in params:
            module = ref()
            if module is None or module._parameters.get(name) is not param:
                continue
            value = _value(mode, param)
            if value is not None:
                _RECORDS.setdefault(module, {})[name] = value
        _keep_buffers(mode, buffers)


def _keep_buffers(
    mode: CaptureMode, buffers: list[tuple[weakref.ref[nn.Module], str, torch.Tensor, str]]
) -> None:
    """Records the value of each meta buffer its module still holds (the last one
    registered under a name wins, as the module holds it)."""
    for ref, name, buffer, where in buffers:
        module = ref()
        if module is None or module._buffers.get(name) is not buffer:
            continue
        value = _buffer_value(mode, buffer, where)
        records = _BUFFERS.setdefault(module, {})
        if value is None:
            records.pop(name, None)
        else:
            shape = tuple(buffer.shape)
            records[name] = replace(
                value, tensor=weakref.ref(buffer), shape=shape, dtype=buffer.dtype
            )


def _buffer_value(mode: CaptureMode, buffer: torch.Tensor, where: str) -> ConstructorValue | None:
    """A meta buffer's value as a program of its coordinates; a :class:`Bad` one
    names why it cannot be computed; None when its constructor never wrote it."""
    if mode.store.lookup(buffer) is None:
        why = "computed by operations shardinit does not follow"
        return ConstructorValue(Bad(why), where)
    expr = mode.engine.value_of(buffer, "register_buffer")
    reasons = bad_reasons(expr)
    if reasons and all(_NEVER in why for why in reasons):
        return None  # never written (torch.empty): no constructor value
    if reasons:
        return ConstructorValue(Bad(reasons[0]), where)
    if contains(expr, Source):
        why = "random values (torch's generator in eager torch; no stream draws buffers)"
        return ConstructorValue(Bad(why), where)
    return ConstructorValue(expr, where)


def _value(mode: CaptureMode, param: nn.Parameter) -> ConstructorValue | None:
    if mode.store.lookup(param) is None:
        return None
    expr = mode.engine.value_of(param, "nn.Parameter")
    reasons = bad_reasons(expr)
    if reasons and all(_NEVER in why for why in reasons):
        return None  # never written (torch.empty): no constructor value
    if reasons:
        expr = Bad(reasons[0])
    shape = tuple(param.shape)
    return ConstructorValue(expr, "constructor", weakref.ref(param), shape, param.dtype)


def constructor_record(
    module: nn.Module, attr: str, name: str, shape: tuple[int, ...], dtype: torch.dtype
) -> ParamRecord | None:
    """The constructor value of ``module.<attr>`` as a record of one whole-parameter
    op, or None.

    Raises:
        ShardInitError: the constructor computed values that cannot be replayed.
    """
    value = _RECORDS.get(module, {}).get(attr)
    if value is None or not value.is_for(module._parameters.get(attr), shape, dtype):
        return None
    if isinstance(value.expr, Bad):
        raise ShardInitError(
            f"parameter {name}: its constructor's value cannot be replayed "
            f"({value.expr.why}); give it a rule or initialize it in init_fn"
        )
    action = program_of(value.expr)
    whole = tuple((0, size) for size in shape)
    op = CapturedOp(whole, action, "constructor value", value.where)
    return ParamRecord(name, shape, dtype, (op,))


def constructor_buffer(module: nn.Module, attr: str) -> ConstructorValue | None:
    """The constructor value recorded for the meta buffer ``module.<attr>``, or None
    (a :class:`Bad` one says why it cannot be computed: see :func:`buffer_tensor`);
    None too where init code put another buffer in its place after the constructor."""
    value = _BUFFERS.get(module, {}).get(attr)
    current = module._buffers.get(attr)
    if value is None or current is None:
        return None
    return value if value.is_for(current, tuple(current.shape), current.dtype) else None


def buffer_tensor(
    value: ConstructorValue, name: str, shape: tuple[int, ...], dtype: torch.dtype
) -> torch.Tensor:
    """The buffer ``name``'s constructor value, whole, on the CPU, as eager torch computed
    it: the program step by step with torch's own CPU kernels in the dtypes eager used
    (:mod:`.torchvalues`; a buffer is the same on every rank and is never sharded, so
    its bits are eager's, not the core's binary64 ones), then converted where every
    value is exact.

    Raises:
        ShardInitError: a value that cannot be computed (names the buffer and the line
            that registered it), or one an integer or bool buffer cannot hold.
    """
    if isinstance(value.expr, Bad):
        raise ShardInitError(
            f"buffer {name}: its constructor's value (registered at {value.where}) cannot "
            f"be computed ({value.expr.why}); pass buffer_init=fn to fill it"
        )
    converted = eager_values(value.expr, shape, dtype)
    if converted is None:
        raise ShardInitError(
            f"buffer {name}: its constructor's value (registered at {value.where}) is not "
            f"exactly representable as {dtype}; pass buffer_init=fn to fill it"
        )
    return converted
