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
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_buffer_registration_hook,
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)
from torch.nn.parameter import is_lazy

from ...._program.actions import CapturedOp, Fill, ParamRecord, program_of
from ...._program.cannot import Cannot, too_deep
from ...._program.index import strided_coords
from ...._program.nodes import Bad, Const, Coord, Expr, Source, bad_reasons, contains
from ...._program.regions import whole
from ...._program.rewrite import reindex
from ...._torch_compat import (
    NOT_RUN,
    deepcopy_memo,
    past_device_mode,
    stored_strides,
    torch_function_disabled,
)
from ....errors import ShardInitError
from ...collector import collector_paused
from ...exclusive import ThreadExclusive
from ...meta_attributes import keep_attribute_tables
from ..dispatch import CaptureMode, routing
from ..ops import eager_values
from ..trace import Track, drawn, user_frame
from .knownmodules import install_known_constructors
from .modulecalls import constructor_moves

__all__ = [
    "ConstructorValue",
    "buffer_tensor",
    "constructor_buffer",
    "constructor_record",
    "constructor_seed",
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
        elif self.store.in_signal is None and routing(func)[2]:
            # A call the capture lets through as it is (a layout question, no_grad's
            # switch: most calls of a build) goes straight to the kernel where the one
            # mode below is the torch.device one, which would let it through too: two
            # Python layers less (the device mode's and the capture's routing).
            result = past_device_mode(func, args, kwargs)
            if result is not NOT_RUN:
                return result
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

    modules: list[weakref.ref[nn.Module]] = []  # those that may hold attribute tables

    def hook(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None:
            seen.append((weakref.ref(module), name, param))

    def module_hook(module: nn.Module, name: str, submodule: nn.Module | None) -> None:
        modules.append(weakref.ref(module))
        if submodule is not None:
            modules.append(weakref.ref(submodule))

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
                register_module_module_registration_hook(module_hook),
            ]
            undo_known = install_known_constructors(mode, (hook, buffer_hook, module_hook))
            try:
                with mode, constructor_moves():
                    # The frame of the ``with`` statement (this generator's, then
                    # contextlib's ``__enter__``, then it): the build runs below it, so
                    # the search of torch.nn.init frames at every call stops there, not
                    # at the bottom of the stack (the mode's own frame, this generator,
                    # is on no stack the build runs on).
                    mode.outer = sys._getframe(2)
                    yield
            finally:
                undo_known()
                for handle in handles:
                    handle.remove()
        mode.record_copies()
        values = _Values(mode)
        _keep_values(values, seen, buffers)
        _keep_attribute_tables(values, modules, seen, buffers)


def _keep_values(
    values: _Values,
    params: list[tuple[weakref.ref[nn.Module], str, nn.Parameter]],
    buffers: list[tuple[weakref.ref[nn.Module], str, torch.Tensor, str]],
) -> None:
    """Records the value of each parameter and meta buffer its module still holds."""
    # Folding makes CPU constants (the model's device is meta), and reads the tensors'
    # layouts: with no mode (not even the device's), both go straight to torch's kernels.
    with torch_function_disabled():
        for ref, name, param in params:
            module = ref()
            if module is None or module._parameters.get(name) is not param or is_lazy(param):
                continue  # (a lazy layer's parameter has no shape yet, nor values)
            value = _value(values, param)
            if value is not None:
                _RECORDS.setdefault(module, {})[name] = value
        _keep_buffers(values, buffers)


class _Values:
    """The value of each followed tensor at the end of the build (the fold of what was
    written to it, :meth:`..trace.Engine.value_of`), kept by what made it where the
    value holds no random source and no refusal: a model builds the same module many
    times (every normalization layer writes ones and zeros of a few sizes; MaxViT
    writes one 2,156-element lookup table in each of its 44 blocks), and each fold of
    the same writes on the same layout gives the same program. A random source names
    its operation (its origin), and a refusal its tensor: those are folded per tensor."""

    def __init__(self, mode: CaptureMode) -> None:
        self.mode = mode
        self.kept: dict[tuple[object, ...], Expr] = {}
        #: Each action met, by identity, as the number of the first equal one
        #: (``tokens`` holds the actions: their ids stay theirs while it lives).
        self.tokens: dict[object, int] = {}
        self.token_of: dict[int, int] = {}

    def of(self, tensor: torch.Tensor, track: Track, op: str) -> Expr:
        """``tensor``'s value over its own coordinates (``track`` its followed tensor),
        as ``engine.value_of`` gives it (called with torch functions disabled: the
        layouts are read as they are)."""
        filled = _filled_whole(tensor, track)
        if filled is not None:  # (most weights and normalization layers' tensors)
            return filled
        key = self._key(tensor, track, op)
        if key is not None:
            known = self.kept.get(key)
            if known is not None:
                return known
        value = self.mode.engine.value_of(tensor, op)
        if key is not None and not contains(value, (Source, Bad)):
            self.kept[key] = value
        return value

    def _key(self, tensor: torch.Tensor, track: Track, op: str) -> tuple[object, ...] | None:
        """What the fold of ``tensor``'s value is a function of, for a temporary on meta
        (a CPU one may be read as the table of its memory: folded per tensor); None
        when it is not hashable (an action holding an unhashable argument)."""
        if track.kind != "temp" or not track.base.is_meta:
            return None
        if track.ops and drawn(track.ops[-1].action):
            return None  # its last write's random values: never kept (most weights)
        tokens = self.token_of
        writes = []
        for write in track.ops:  # (a loop of C calls: tables hold thousands of writes)
            token = tokens.get(id(write.action))
            if token is None:
                try:
                    token = self._token(write.action)
                except TypeError:
                    return None
            writes.append((write.region, token))
        base = track.base
        return (
            op, tuple(base.shape), base.dtype, track.from_random,
            tuple(tensor.shape), stored_strides(tensor), tensor.dtype,
            tensor.storage_offset() - base.storage_offset(), tuple(writes),
        )  # fmt: skip

    def _token(self, action: object) -> int:
        """The number of ``action`` (equal actions share one): an action is hashed once
        per object, not at every tensor whose writes hold it (a model's tensors share a
        few: ``build`` keeps one per kind and arguments).

        Raises:
            TypeError: an action holding an unhashable argument.
        """
        token = self.token_of.get(id(action))
        if token is None:
            token = self.tokens.setdefault(action, len(self.tokens))
            self.token_of[id(action)] = token
        return token


def _filled_whole(tensor: torch.Tensor, track: Track) -> Expr | None:
    """``tensor``'s value when the last write to its meta temporary ``track`` is a fill
    of all of it, random or constant (a weight's last init call: ``normal_``,
    ``kaiming_uniform_``; a normalization layer's ``ones_``, ``zeros_``), else None. It
    is what ``engine.value_of`` gives: the fold of a meta temporary starts at its last
    write that sets all of it (:mod:`..trace.folds`), whose value a fill gives without
    reading the one before (``where`` over all of it is that value), read through
    ``tensor``'s layout. Without the fold of the track and the questions around it (nor
    the key of :meth:`_Values._key`): a model has hundreds of such tensors, each folded
    once, at the end."""
    ops = track.ops
    if track.kind != "temp" or not ops or track.emptied:
        return None
    last = ops[-1]
    action = last.action
    base = track.base
    if not isinstance(action, Fill) or not base.is_meta:
        return None
    shape = tuple(base.shape)
    if tensor.dtype != base.dtype or not _covers(last.region, shape):
        return None
    offset = int(tensor.storage_offset() - base.storage_offset())
    coords, repeats = strided_coords(tensor.shape, stored_strides(tensor), offset, shape)
    if repeats is not None:
        return None  # values read twice (random ones: the engine's refusal says so)
    written = action.after(base.dtype, len(shape), id(last), _UNREAD)  # (engine.op_value's)
    if isinstance(written, Source) and written.at == _own_coords(len(shape)):
        # A source read at its own coordinates, reindexed: the source at ``coords`` (a
        # Coord is the one node reindex replaces), without walking its nodes.
        return written if coords == written.at else written.with_children(coords)
    return reindex(written, coords, whole(tensor.shape))


def _covers(region: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> bool:
    """Whether ``region`` is all of a tensor of ``shape`` (``regions.whole(shape)``)."""
    return len(region) == len(shape) and all(
        start == 0 and stop == size for (start, stop), size in zip(region, shape, strict=True)
    )


#: The value before a random fill, which the fill does not read (``Fill.reads_prior``).
_UNREAD = Const(0.0)
#: ``(Coord(0), ..., Coord(n - 1))`` by ``n``.
_OWN_COORDS: dict[int, tuple[Expr, ...]] = {}


def _own_coords(ndim: int) -> tuple[Expr, ...]:
    found = _OWN_COORDS.get(ndim)
    if found is None:
        found = _OWN_COORDS[ndim] = tuple(Coord(dim) for dim in range(ndim))
    return found


def _keep_attribute_tables(
    values: _Values,
    modules: list[weakref.ref[nn.Module]],
    params: list[tuple[weakref.ref[nn.Module], str, nn.Parameter]],
    buffers: list[tuple[weakref.ref[nn.Module], str, torch.Tensor, str]],
) -> None:
    """Records the tables the constructors hold as plain attributes of ``modules`` (not
    the parameters and buffers): :func:`..meta_attributes.keep_attribute_tables`."""
    held = {id(param) for _, _, param in params} | {id(buffer) for _, _, buffer, _ in buffers}
    alive = [m for m in (ref() for ref in modules) if m is not None]
    with torch_function_disabled():  # as _keep_values: straight to torch's kernels
        keep_attribute_tables(alive, lambda tensor: _attribute_values(values, tensor), held)


def _keep_buffers(
    values: _Values, buffers: list[tuple[weakref.ref[nn.Module], str, torch.Tensor, str]]
) -> None:
    """Records the value of each meta buffer its module still holds (the last one
    registered under a name wins, as the module holds it)."""
    for ref, name, buffer, where in buffers:
        module = ref()
        if module is None or module._buffers.get(name) is not buffer or is_lazy(buffer):
            continue
        value = _buffer_value(values, buffer, where)
        records = _BUFFERS.setdefault(module, {})
        if value is None:
            records.pop(name, None)
        else:
            shape = tuple(buffer.shape)
            held = weakref.ref(buffer)
            records[name] = ConstructorValue(value.expr, value.where, held, shape, buffer.dtype)


def _buffer_value(values: _Values, buffer: torch.Tensor, where: str) -> ConstructorValue | None:
    """A meta buffer's value as a program of its coordinates; a :class:`Bad` one
    names why it cannot be computed; None when its constructor never wrote it."""
    track = values.mode.store.lookup(buffer)
    if track is None:
        why = "computed by operations shardinit does not follow"
        return ConstructorValue(Bad(why), where)
    try:
        expr = values.of(buffer, track, "register_buffer")
    except RecursionError:  # shardinit's own expression of it, not the constructor's code
        return ConstructorValue(Bad(too_deep()), where)
    reasons = bad_reasons(expr)
    if reasons and all(_NEVER in why for why in reasons):
        return None  # never written (torch.empty): no constructor value
    if reasons:
        return ConstructorValue(Bad(reasons[0]), where)
    if contains(expr, Source):
        why = "random values (torch's generator in eager torch; no stream draws buffers)"
        return ConstructorValue(Bad(why), where)
    return ConstructorValue(expr, where)


def _attribute_values(values: _Values, tensor: torch.Tensor) -> torch.Tensor:
    """A meta tensor a constructor holds as a plain attribute (a rotary table), computed
    as a buffer's value is (:func:`buffer_tensor`: eager torch's bits, on the CPU); a
    complex one as the CPU run of the op that made it gave it (programs hold real
    values).

    Raises:
        Cannot: why it cannot be computed.
    """
    held = values.mode.concrete.complex_values(tensor)
    if held is not None:
        return held
    if tensor.is_complex():
        raise Cannot(
            "complex values written after the operation that computed them, or computed "
            "by operations followed as programs, which hold real values"
        )
    value = _buffer_value(values, tensor, "")
    if value is None:
        raise Cannot("it was never written")
    if isinstance(value.expr, Bad):
        raise Cannot(value.expr.why)
    converted = eager_values(value.expr, tuple(tensor.shape), tensor.dtype)
    if converted is None:
        raise Cannot(f"its values are not exactly representable as {tensor.dtype}")
    return converted


def _value(values: _Values, param: nn.Parameter) -> ConstructorValue | None:
    track = values.mode.store.lookup(param)
    if track is None:
        return None
    expr = values.of(param, track, "nn.Parameter")
    reasons = bad_reasons(expr)
    if reasons and all(_NEVER in why for why in reasons):
        return None  # never written (torch.empty): no constructor value
    shape = tuple(param.shape)
    try:
        values.mode.engine.places.place_value(expr, shape, "the parameter")
    except Cannot as cannot:  # a constructor's value that cannot be had: said at materialize
        reasons = [cannot.reason, *reasons]
    if reasons:
        expr = Bad(reasons[0])
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


def constructor_seed(
    owner: nn.Module, attr: str, name: str, buffer: torch.Tensor
) -> torch.Tensor | None:
    """The meta buffer ``owner.<attr>``'s constructor value on the CPU, as eager torch
    holds it before init_fn (a capture's stand-in starts from it), or None: none
    recorded, or one that cannot be computed (materialize refuses that one where it
    needs it)."""
    value = constructor_buffer(owner, attr)
    if value is None or not value.computable:
        return None
    return eager_values(value.expr, tuple(buffer.shape), buffer.dtype)  # (buffer_tensor's)


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
