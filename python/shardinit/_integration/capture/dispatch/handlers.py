"""What a call does when no write into a followed tensor took it, per op family
(:mod:`.families`): views, temporaries (factories, ``cat``/``stack``, ``clone``),
sources, elementwise steps, casts, ``_foreach_``, dropout, ``resize_``; a ``out=`` of
any function; and :func:`unrouted`, every call no family's handler took: refused where
it reads or writes a parameter's values, else run on the CPU where its values are
known (:mod:`..trace.concrete`) or run as it is, its results opaque."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from ...._program.actions import Opaque
from ...._program.cannot import Cannot
from ...._torch_compat import (
    aten_packet,
    dispatch_mode_popped,
    innermost_dispatch_mode,
    positional_arguments,
    stored_contiguous,
    stored_order,
    torch_function_disabled,
    tree_leaves,
)
from ..ops import (
    FACTORIES,
    MOVES,
    cast_dtype,
    dropout_drops,
    foreach_parts,
    is_inplace,
    metadata_operands,
    no_formula,
    normal_parts,
    resizes_to_itself,
    same_device,
    split_device,
)
from ..trace import Evaluated, Track, read_reason, run_op, storage_id, user_frame
from .calls import NOT_MINE, Call, Mode
from .scattered import PURE_WRITES, write_scattered
from .targets import CPU, META, stands_for_cpu
from .writes import tensors_in

__all__ = [
    "as_is",
    "cast",
    "concat",
    "copy",
    "dropout",
    "factory",
    "foreach",
    "into_out",
    "pointwise",
    "relaid_format",
    "relayout",
    "resize",
    "source",
    "unrouted",
    "view",
]


def as_is(mode: Mode, call: Call) -> Any:
    """A call that touches no value the capture follows: run as it is."""
    return call.func(*call.args, **call.kwargs)


def unrouted(mode: Mode, call: Call) -> Any:
    """An operation no route takes: refused where it reads a parameter's values, else
    run as :func:`unfollowed` runs it."""
    name, target, args = call.name, call.target, call.args
    params = mode.store.params_in(value_operands(call))
    if params:
        if _scattered(mode, call):  # values known at capture, at positions known too
            return args[0]
        if no_formula(name):
            why = "it is an elementwise operation shardinit has no exact formula for"
        elif is_inplace(name) and (_writes_param(target) or mode.store.params_in(args[:1])):
            # on the parameter, or on a list holding it (a _foreach_ op): a write
            why = "this in-place operation on the parameter's values is not replayable"
        else:  # a read, into a result or a temporary written in place (index_add_)
            why = (
                "it reads the parameter's values (they do not exist on meta) in an "
                "operation shardinit does not follow"
            )
        raise mode.store.fail(params[0], name, why)
    reads = mode.engine.read_in(value_operands(call), name)
    if reads:  # values computed from a parameter's, beyond elementwise steps
        raise mode.store.fail(reads[0][0], name, read_reason(reads[0]))
    return unfollowed(mode, call)


def _writes_param(target: Track | None) -> bool:
    """Whether an operation's written tensor is a parameter (not a temporary or buffer
    it computes into from the parameter's values: a read)."""
    return target is not None and target.kind == "param"


def _scattered(mode: Mode, call: Call) -> bool:
    """Whether ``call`` is a write of values known at capture into a parameter
    (:mod:`.scattered`), now recorded.

    Raises:
        UnsupportedInitOpError: it is one of those ops, but no such write (why).
    """
    target, args, kwargs = call.target, call.args, call.kwargs
    if target is None or target.kind != "param" or call.name not in PURE_WRITES:
        return False
    if mode.store.params_in((args[1:], kwargs)):
        return False
    try:
        write_scattered(mode, call.name, target, call.func, args, kwargs)
    except Cannot as cannot:
        raise mode.store.fail(target, call.name, cannot.reason) from None
    return True


def unfollowed(mode: Mode, call: Call) -> Any:
    """An operation no route follows, reading no parameter's values: run on the CPU
    where its meta operands' values are known (:mod:`..trace.concrete`), its results
    tables; else run as it is, its results opaque (:meth:`..trace.steps.Steps.taint`)."""
    name, func, args, kwargs = call.name, call.func, call.args, call.kwargs
    evaluated, why = mode.concrete.attempt(name, func, args, kwargs)
    if call.target is not None and is_inplace(name):
        return _other_inplace(mode, call, call.target, evaluated, why)
    if evaluated is not None:
        return mode.concrete.results(name, func, args, kwargs, evaluated)
    result = run_op(func, args, kwargs)
    mode.steps.taint(name, args, kwargs, result, why)
    return result


def _other_inplace(
    mode: Mode, call: Call, target: Track, values: Evaluated | None, why: str | None
) -> Any:
    """An in-place operation no route follows on a followed tensor: on a known meta
    temporary, the table of its values run on the CPU (:mod:`..trace.concrete`; meta
    holds no values, so nothing runs there); else the tensor's values become opaque
    (with why the CPU run could not be had, if it was tried)."""
    name, args = call.name, call.args
    if values is not None and target.kind == "temp" and target.base.is_meta:
        mode.concrete.write_inplace(name, target, args[0], values)
        return args[0]
    if target.kind == "temp" and name in PURE_WRITES:  # a CPU temporary's (dispatch/scattered.py)
        try:
            write_scattered(mode, name, target, call.func, args, call.kwargs)
        except Cannot:
            pass  # opaque, as below
        else:
            return mode.writes.run_on(target, call.func, args, call.kwargs)
    mode.engine.record(target, args[0], Opaque(why or f"{name} is not a recorded fill"), name)
    with mode.backstop.expecting(target):
        result = run_op(call.func, args, call.kwargs)
    mode.steps.taint(name, args, call.kwargs, result)
    return result


def _on_cpu(mode: Mode, call: Call) -> tuple[Any, str | None]:
    """The call's results run on the CPU values of its known meta operands
    (:meth:`..trace.concrete.Concrete.attempt`), or :data:`.calls.NOT_MINE` and why not."""
    evaluated, why = mode.concrete.attempt(call.name, call.func, call.args, call.kwargs)
    if evaluated is None:
        return NOT_MINE, why
    return mode.concrete.results(call.name, call.func, call.args, call.kwargs, evaluated), None


def into_out(mode: Mode, call: Call, types: Any) -> Any:
    """``func(..., out=tensor)`` with ``tensor`` followed: the result computed out of
    place (a temporary, on the out tensor's device and in its dtype for factories),
    then copied into it, as torch writes it."""
    name, args, kwargs = call.name, call.args, dict(call.kwargs)
    out = kwargs.pop("out")
    func = aten_packet(call.func)  # ``aten.add.out`` without out is ``aten.add``'s to resolve
    target = mode.store.lookup(out) if isinstance(out, torch.Tensor) else None
    if target is None:  # several outs (``torch.max(..., out=(a, b))``), some followed
        track = mode.store.followed(out)[0]
        if track.kind == "param":
            raise mode.store.fail(track, f"{name}(out=...)", "an out= of several tensors")
        kwargs["out"] = out
        return func(*args, **kwargs)  # the backstop makes the followed outs opaque
    if call.route in ("factory", "source"):
        kwargs.setdefault("device", out.device)
        kwargs.setdefault("dtype", out.dtype)
    result = mode.__torch_function__(func, types, args, kwargs)
    op = f"{name}(out=...)"
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != tuple(out.shape):
        shape = tuple(result.shape) if isinstance(result, torch.Tensor) else result
        why = f"it resizes the out tensor of shape {tuple(out.shape)} to {shape}"
        if target.kind != "temp":
            raise mode.store.fail(target, op, why)
        mode.engine.record(target, out, Opaque(why), op)
        return result
    mode.copies.copy_into(target, out, result, op)
    mode.writes.run_on(target, torch.Tensor.copy_, (out, result), {})
    if call.route in ("factory", "source"):  # torch's factories give out= their flag too
        out.requires_grad_(bool(kwargs.get("requires_grad", False)))
    return out


def value_operands(call: Call) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """The call's arguments whose values it reads: without the tensors torch's operator
    of that name takes for their shape, dtype and device only
    (:func:`..ops.tables.metadata_operands`: ``x.view_as(p)``, ``randint_like(p, 5)``)."""
    skipped = metadata_operands(call.name)
    if not skipped:
        return call.args, call.kwargs
    args = [arg for position, arg in enumerate(call.args) if position not in skipped]
    names = positional_arguments(call.name)
    kept = {names[position] for position in skipped if position < len(names)}
    return args, {key: value for key, value in call.kwargs.items() if key not in kept}


def view(mode: Mode, call: Call) -> Any:
    """A view (or an index by tensors, a copy): of a parameter, a view the stand-in
    follows (a copy of its values is a read, refused); of known meta temporaries
    indexed by tensors, run on the CPU; else its result opaque."""
    _refuse_dtype_view(mode, call.name, call.args, call.kwargs)
    # ``x.view_as(p)`` reads ``p``'s shape alone: ``x`` is the one viewed.
    operands = value_operands(call)
    params = mode.store.params_in(operands)
    why: str | None = None
    if not params and tensors_in((operands[0][1:], operands[1])):  # indexing by tensors: a copy
        result, why = _on_cpu(mode, call)
        if result is not NOT_MINE:
            return result
    result = _viewed(mode, call, bool(params))
    if params:  # every result a view the stand-in follows: nothing for taint to make
        for leaf in tensors_in(result):
            if mode.store.lookup(leaf) is None:
                raise mode.store.fail(params[0], call.name, "it copies the values (a read)")
        return result
    mode.steps.taint(call.name, *operands, result, why)  # advanced indexing copies
    return result


def _viewed(mode: Mode, call: Call, of_param: bool) -> Any:
    """A view's result. A view of a parameter's stand-in runs below the backstop (as
    :func:`_made` runs a factory): no view operation writes its operands (none of the
    family's names is in place), and its results are meta, which the backstop marks
    never, so the backstop would pass it untouched, at a Python dispatch per aten view
    (a row loop's ``w[i, ::2]`` makes two)."""
    backstop = mode.backstop
    if of_param and innermost_dispatch_mode() is backstop:
        with dispatch_mode_popped(backstop):
            return call.func(*call.args, **call.kwargs)
    return call.func(*call.args, **call.kwargs)


def factory(mode: Mode, call: Call) -> Any:
    """A factory (``zeros``, ``full``, ``empty_like``, ...): a new temporary, filled with
    its constant (:data:`..ops.tables.FACTORIES`)."""
    result = _made(mode, call)
    stored = _storage_order(result)
    if stored is None:
        return result
    temp = mode.store.new_temp(call.name, stored[0])
    value = FACTORIES[call.name]
    if value == "arg":  # its fill_value, bound as the function's signature binds it
        position = _FILL_VALUE_AT[call.name]
        value = call.kwargs.get("fill_value", _at(call.args, position))
    if value is not None:
        constant = mode.writes.constant(temp, value, call.name)
        mode.engine.record(temp, temp.base, constant, call.name)
    return result


def _made(mode: Mode, call: Call) -> Any:
    """A factory's result. One given no tensor (sizes, a constant, a dtype, a device:
    ``torch.empty(n, m)``, every constructor's parameter) runs below the backstop, as
    nothing there is the backstop's: it writes no tensor it was given, reads none, and
    draws nothing (a factory's aten operation is no random one), so the backstop would
    pass it untouched, at a Python dispatch per operation (most of a factory's cost)."""
    backstop = mode.backstop
    if innermost_dispatch_mode() is backstop and not tensors_in((call.args, call.kwargs)):
        with dispatch_mode_popped(backstop):
            return call.func(*call.args, **call.kwargs)
    return run_op(call.func, call.args, call.kwargs)


#: Where each factory that takes a fill value has it among its positional arguments.
_FILL_VALUE_AT = {
    name: positional_arguments(name).index("fill_value")
    for name, value in FACTORIES.items()
    if value == "arg"
}


def _at(args: Sequence[Any], position: int) -> Any:
    return args[position] if len(args) > position else None


def _contiguous(result: Any) -> bool:
    """Whether a factory's, copy's or concatenation's result is a new temporary."""
    return isinstance(result, torch.Tensor) and stored_contiguous(result)


def copy(mode: Mode, call: Call) -> Any:
    """``clone``/``contiguous`` of a followed tensor: a new temporary, a copy of it (a
    parameter's clone carries the read, :attr:`..trace.tracks.Track.reads`, refused only
    where its values reach a tensor: ``p.clone().fill_(v)`` overwrites them first, as
    eager's copy does)."""
    if call.target is None:
        return NOT_MINE
    if relaid_format(call.kwargs) is not None:
        return relayout(mode, call)
    result = run_op(call.func, call.args, call.kwargs)
    if not _contiguous(result) or storage_id(result) == storage_id(call.args[0]):
        return result  # contiguous() of a contiguous tensor: itself
    temp = mode.store.new_temp(call.name, result)
    mode.copies.copy_into(temp, result, call.args[0], call.name)
    return result


def relaid_format(kwargs: Mapping[str, Any]) -> torch.memory_format | None:
    """The memory format a copy or cast is asked to give its result, where it asks for
    one that is not row-major (``torch.channels_last``, ``channels_last_3d``)."""
    memory_format = kwargs.get("memory_format")
    if memory_format in (None, torch.preserve_format, torch.contiguous_format):
        return None
    return memory_format if isinstance(memory_format, torch.memory_format) else None


def _relays_only(call: Call) -> bool:
    """Whether a cast asks for a memory format and nothing else (``to(memory_format=)``,
    no dtype or device: a cast with one is a cast, :func:`cast`)."""
    rest = {k for k in call.kwargs if k not in ("memory_format", "non_blocking", "copy")}
    return relaid_format(call.kwargs) is not None and len(call.args) == 1 and not rest


def relayout(mode: Mode, call: Call) -> Any:
    """``t.contiguous(memory_format=torch.channels_last)`` (or ``clone`` / ``to`` with
    one) of a followed tensor: a new temporary holding its values in that layout, as
    eager's copy does (a parameter's values carry the read, as a clone's). Its storage
    is row-major in a permutation of its dims (channels_last: NHWC): that permutation
    is the temporary followed, the result a permuted view of it, so its boxes are
    row-major as every temporary's. ``.data =`` of it gives a parameter the layout
    (:func:`.targets.write_data`). A cast to another dtype or device with a format
    too is followed as a cast is (:func:`_relays_only`)."""
    source, memory_format = call.args[0], relaid_format(call.kwargs)
    result = run_op(torch.Tensor.clone, (source,), {"memory_format": memory_format})
    stored = _storage_order(result)
    if stored is None:
        return NOT_MINE  # no dense layout (torch makes one for every format it has)
    temp, order = mode.store.new_temp(call.name, stored[0]), stored[1]
    shown = f"{call.name}(memory_format={memory_format})"
    with torch_function_disabled():  # the stand-in's own (row-major) view, as torch reads it
        permuted = source.permute(order)
    mode.copies.copy_into(temp, temp.base, permuted, shown)
    return result


def _storage_order(result: Any) -> tuple[torch.Tensor, list[int]] | None:
    """A new dense tensor (a factory's, a copy's) as the temporary to follow, with the
    order of its dims in storage (:func:`stored_order`): ``result.permute(order)`` is
    row-major, so that every followed temporary's boxes are. None for anything else (no
    new dense tensor)."""
    if not isinstance(result, torch.Tensor):
        return None
    order = stored_order(result)
    if order is None:
        return None
    # Row-major already (most factories): the result itself, which its writes then name.
    identity = order == list(range(len(order)))
    return (result if identity else result.permute(order)), order


def concat(mode: Mode, call: Call) -> Any:
    """``cat``/``stack``: a new temporary, each part copied into its place (of a
    parameter, a read: refused)."""
    params = mode.store.params_in((call.args, call.kwargs))
    if params:
        raise mode.store.fail(params[0], call.name, "it reads the parameter's values")
    if any(v.is_complex() for v in tensors_in(call.args) if v.is_meta):
        return unfollowed(mode, call)  # programs hold real values: run on the CPU
    result = run_op(call.func, call.args, call.kwargs)
    if not _contiguous(result):
        return result
    temp = mode.store.new_temp(call.name, result)
    tensors = list(call.kwargs.get("tensors", call.args[0] if call.args else ()))
    dim = int(call.kwargs.get("dim", call.args[1] if len(call.args) > 1 else 0))
    dim %= temp.base.dim()
    parts = [
        (mode.engine.operand(part, tuple(part.shape), call.name), tuple(part.shape))
        for part in tensors
        if mode.store.lookup(part) is not None
    ]
    if len(parts) > 1 and mode.engine.places.overlap(parts):
        why = (
            f"{call.name} at {user_frame()} puts the same random values in two places, "
            "which torch repeats and shardinit would draw anew at each (it draws a random "
            "value at its destination element's own index): compute it once and copy it"
        )
        mode.engine.record(temp, temp.base, Opaque(why), call.name)
        return result
    offset = 0
    for index, part in enumerate(tensors):
        if call.name == "stack":
            dst = temp.base.select(dim, index)
        else:
            dst = temp.base.narrow(dim, offset, part.shape[dim] if part.dim() else 0)
            offset += dst.shape[dim]
        if dst.numel():
            mode.copies.copy_into(temp, dst, part, call.name)
    return result


def source(mode: Mode, call: Call) -> Any:
    """``arange``, ``rand``, ``tensor``, ...: a temporary of known values per element."""
    return mode.steps.source(call.name, call.func, call.args, call.kwargs)


#: Steps whose value jumps where an operand moves by one ulp (``%`` and ``//`` jump by a
#: whole divisor or unit): on values known at capture, run by torch itself on the CPU
#: (:mod:`..trace.concrete`), so they are eager's bit for bit, not binary64's.
_TORCH_STEPS = frozenset(
    {"remainder", "__mod__", "__rmod__", "floor_divide", "__floordiv__", "__rfloordiv__"}
)


def _rounded_division(call: Call) -> bool:
    """``torch.div(a, b, rounding_mode="floor")`` (or ``"trunc"``): ``//`` by another
    name, a step that jumps by a unit where the quotient crosses an integer."""
    return call.name in _DIVISIONS and call.kwargs.get("rounding_mode") is not None


#: Divisions that take a ``rounding_mode``.
_DIVISIONS = frozenset({"div", "divide", "true_divide"})


def pointwise(mode: Mode, call: Call) -> Any:
    """An elementwise step of followed tensors: a program's step (on buffers' real
    values, or none followed: run as it is)."""
    if all(track.kind == "buffer" for track in mode.store.followed((call.args, call.kwargs))):
        return NOT_MINE  # on buffers' real values (or none followed): run as it is
    if call.name in _TORCH_STEPS or _rounded_division(call):
        if mode.steps.known_on_cpu(call.args, call.kwargs):
            # followed CPU temporaries of known values: torch's own result, a table
            return run_op(call.func, call.args, call.kwargs)
        result, _ = _on_cpu(mode, call)  # values not known at capture: a program's step
        if result is not NOT_MINE:
            return result
    return mode.steps.pointwise(call.name, call.func, call.args, call.kwargs)


def foreach(mode: Mode, call: Call) -> Any:
    """``torch._foreach_<op>(tensors, ...)``: ``<op>`` on each tensor, each routed as its
    own call (:func:`..ops.composites.foreach_parts`); in place, torch returns None."""
    parts = foreach_parts(call.name, call.args, call.kwargs)
    if parts is None:
        return NOT_MINE
    results = [mode.__torch_function__(func, (), args, kwargs) for func, args, kwargs in parts]
    return None if is_inplace(call.name) else results


def normal(mode: Mode, call: Call) -> Any:
    """``torch.normal(mean, std[, size])``: the calls aten makes for it
    (:func:`..ops.composites.normal_parts`), each routed as its own call, so its random
    values are the stream's, scaled by ``std`` and shifted by ``mean`` where those are
    tensors, as torch scales its own draw."""
    parts = normal_parts(call.args, call.kwargs)
    if parts is None:
        return NOT_MINE
    mean, std, shape, options = parts
    route = mode.__torch_function__
    drawn = route(torch.empty, (), (shape,), options)
    if not isinstance(std, torch.Tensor):
        first = (0.0, std) if isinstance(mean, torch.Tensor) else (mean, std)
        route(torch.Tensor.normal_, (), (drawn, *first), {})
    else:
        route(torch.Tensor.normal_, (), (drawn, 0.0, 1.0), {})
        route(torch.Tensor.mul_, (), (drawn, std), {})
    if isinstance(mean, torch.Tensor) or isinstance(std, torch.Tensor):
        route(torch.Tensor.add_, (), (drawn, mean), {})
    return drawn


def dropout(mode: Mode, call: Call) -> Any:
    """Dropout of a followed tensor: the identity where it drops nothing (torch returns
    its input itself); where it drops, refused on a parameter (a mask drawn from
    torch's generator has no stream rule), else run as any call that draws."""
    followed = mode.store.followed((call.args, call.kwargs))
    if not followed or not call.args:
        return NOT_MINE
    p = dropout_drops(call.name, call.args, call.kwargs)
    if p is None:
        return call.args[0]
    params = [track for track in followed if track.kind == "param"]
    if params:
        raise mode.store.fail(
            params[0], call.name,
            f"dropout with p={p} in training multiplies the values by a random mask drawn from "
            "torch's generator, which no stream rule describes (dropout with p=0 or "
            "training=False is the identity, and is replayed)",
        )  # fmt: skip
    return NOT_MINE


def resize(mode: Mode, call: Call) -> Any:
    """``resize_`` of a followed tensor to its own shape changes nothing, as in eager;
    any other resize of one is refused: the capture follows a tensor's values in the
    shape it was made with (a resized temporary's values were read in the old shape)."""
    if call.target is None:
        return NOT_MINE
    if not resizes_to_itself(call.name, call.args, call.kwargs):
        raise mode.store.fail(
            call.target, call.name,
            "it changes the shape or strides of a tensor whose values the capture follows "
            "(resize_ to the tensor's own shape is the identity, and is replayed); make "
            "the tensor in the shape it needs, or view it",
        )  # fmt: skip
    return call.args[0]


def cast(mode: Mode, call: Call) -> Any:
    """A cast or device move: of a parameter, :func:`_param_cast`; of a temporary, a
    step of its values; a temporary's move runs on its CPU values where known. A move
    of a temporary on meta to the CPU, the device it answers
    (:func:`.targets.stands_for_cpu`), copies nothing: the temporary, or its cast.
    ``torch.as_tensor(t, dtype, device)`` of a followed tensor is ``t.to(dtype=...,
    device=...)``, as torch computes it (``t`` itself where nothing changes)."""
    if call.name == "as_tensor":
        if call.target is None:
            return NOT_MINE  # data that is no followed tensor: a table, as before
        call = _as_tensor_to(call)
    if call.target is not None and _relays_only(call):
        return relayout(mode, call)
    if call.target is not None and call.target.kind == "param":
        return _param_cast(mode, call, call.target)
    if call.target is not None and stands_for_cpu(call.target):
        device, _, _ = split_device(call.name, call.args, call.kwargs)
        if device is not None and same_device(device, CPU):  # no copy: the cast alone
            if call.name in MOVES:
                return call.args[0]
            call = _kept_on_meta(call)
    if call.target is None or call.target.kind != "temp" or call.name in MOVES:
        return NOT_MINE  # a temporary's move: run on its CPU values where known
    if _truncates(call):
        result, _ = _on_cpu(mode, call)  # values known at capture: torch's own cast
        if result is not NOT_MINE:
            return result
    return mode.steps.cast_temp(call.name, call.func, call.args, call.kwargs)


def _kept_on_meta(call: Call) -> Call:
    """``t.to(...)`` of a temporary on meta with its CPU device (a name, a device, a CPU
    tensor's) made meta, where the temporary is: what is left is the cast, in the
    call's own positions (``Module.to`` passes ``(device, dtype, non_blocking)``)."""

    def on_meta(value: Any) -> Any:
        if isinstance(value, (str, torch.device)):
            return META
        if isinstance(value, torch.Tensor) and not value.is_meta:
            return value.dtype  # to(other): other's dtype, here
        return value

    args = (call.args[0], *(on_meta(value) for value in call.args[1:]))
    kwargs = dict(call.kwargs)
    if kwargs.get("device") is not None:
        kwargs["device"] = META
    return replace(call, args=args, kwargs=kwargs)


def _truncates(call: Call) -> bool:
    """Whether ``call`` casts float values to an integer dtype: a step that jumps by a
    unit where its operand crosses an integer, so a value within the last bits of
    eager's is not enough (as for ``%`` and ``//``): on values known at capture it is
    torch's own CPU cast, eager's, also where interval bounds cannot show the values in
    the dtype's range (``(log(t) * 10).int()``; docs/capturing-init.md, "Floats to
    integers")."""
    dtype = cast_dtype(call.name, call.args, call.kwargs)
    source = call.args[0].dtype if call.args and isinstance(call.args[0], torch.Tensor) else None
    return (
        dtype is not None and source is not None and source.is_floating_point
        and not dtype.is_floating_point and dtype != torch.bool
    )  # fmt: skip


def _as_tensor_to(call: Call) -> Call:
    """``as_tensor(t, dtype=None, device=None)`` as the ``t.to`` call it is."""
    named = dict(zip(("dtype", "device"), call.args[1:], strict=False))
    named.update((k, v) for k, v in call.kwargs.items() if k in ("dtype", "device"))
    kwargs = {k: v for k, v in named.items() if v is not None}
    return replace(call, name="to", func=torch.Tensor.to, args=call.args[:1], kwargs=kwargs)


def _param_cast(mode: Mode, call: Call, target: Track) -> Any:
    """A cast or device move of a parameter's stand-in, as eager torch does it on the
    parameter: the parameter itself where nothing changes (``p.cpu()`` of a CPU
    parameter, ``p.float()`` of a float32 one: writes to it are the parameter's); a cast
    to another dtype is a step of its values (a temporary carrying the read, refused
    only where its values reach a tensor, as ``p * 2``); a move to another device than
    the parameter's at run time is a copy of values that do not exist at capture."""
    device, args, kwargs = split_device(call.name, call.args, call.kwargs)
    runtime = mode.devices.get(id(target), CPU)
    if device is not None and not same_device(device, runtime):
        raise mode.store.fail(
            target, call.name,
            f"it copies the parameter's values to {device} (the parameter will be on "
            f"{runtime}), and they do not exist at capture",
        )  # fmt: skip
    if call.name in MOVES:
        return call.args[0]
    return mode.steps.cast_temp(call.name, call.func, args, kwargs)


def _refuse_dtype_view(
    mode: Mode, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    """A view of a parameter or temporary as another dtype (``w.view(torch.int32)``)
    reinterprets its bits: programs hold values, not bits, so writes or reads through
    it are refused, naming the parameter, the operation and the line."""
    base = args[0] if args and isinstance(args[0], torch.Tensor) else None
    dtypes = [v for v in [*args[1:], *kwargs.values()] if isinstance(v, torch.dtype)]
    if base is None or not dtypes or dtypes[0] == base.dtype:
        return
    tracks = [t for t in mode.store.followed((base,)) if t.kind in ("param", "temp")]
    if tracks:
        raise mode.store.fail(
            tracks[0], name,
            f"a view of its {base.dtype} values as {dtypes[0]} reinterprets their bits, "
            "which shardinit does not replay (write the values in its own dtype)",
        )  # fmt: skip


#: The operations that hand init code a tensor's values as Python values or bytes (not
#: its shape, dtype or device): ``item()``, ``tolist()``, a comparison's ``bool``, numpy,
#: and every path by bytes (its storage, pickle and ``torch.save`` read it, a deep
#: copy): refused on values the capture does not know (:func:`refuse_unknown_out`).
VALUES_OUT = frozenset(
    {
        "item", "tolist", "numpy", "__float__", "__int__", "__index__", "__bool__",
        "__complex__", "__array__", "__dlpack__", "untyped_storage", "storage",
        "_typed_storage", "__deepcopy__", "__reduce_ex__", "__getstate__",
    }
)  # fmt: skip


def refuse_unknown_out(mode: Mode, name: str, args: Sequence[Any], kwargs: Any) -> None:
    """Refuses a Python value or the bytes of a tensor whose values the capture does not
    know: a temporary of random values (torch's draw, no function of ``seed`` and
    another on every rank; the stream draws those at each destination's own index) or a
    tensor computed from unknown values (:meth:`..trace.store.RecordStore.mark_unknown`).
    Init code could put them in a weight or buffer by a path no op shows, or branch on
    them (each rank then records other operations).

    Raises:
        UnsupportedInitOpError: such a read.
    """
    why = (
        "it hands init code a Python value (or the bytes) of random values from torch's "
        "global generator, no function of seed and different on each rank (a buffer "
        "filled with it, or a branch on it, would differ per rank); compute such values "
        "deterministically, or write the random values into a tensor directly"
    )
    for track in mode.store.followed((args, kwargs)):
        if track.kind == "temp" and track.reads:  # a parameter's values: named as such
            raise mode.store.fail(track.reads[0][0], name, read_reason(track.reads[0]))
        if track.kind == "temp" and mode.engine.random(track):
            raise mode.store.fail(track, name, why)
    for leaf in tree_leaves((args, kwargs)):
        unknown = mode.store.unknown_of(leaf)
        if unknown is not None:
            raise mode.store.fail(
                f"a tensor of shape {tuple(leaf.shape)}", name,
                f"it hands init code values shardinit does not know ({unknown.why})",
            )  # fmt: skip


def type_as_to(
    args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """``t.type("torch.FloatTensor")`` (or a tensor class, or ``dtype=``) as the
    ``t.to(...)`` it is: the same dtype (and a ``torch.cuda`` class's device); an
    argument that names no tensor type is left to torch, which refuses it."""
    kind = args[1] if len(args) > 1 else kwargs.get("dtype")
    cls = kind
    if isinstance(kind, str):
        cls = torch.cuda if kind.startswith("torch.cuda.") else torch
        cls = getattr(cls, kind.rsplit(".", 1)[-1], None)
    dtype = getattr(cls, "dtype", None)
    if not isinstance(dtype, torch.dtype):
        return torch.Tensor.type, tuple(args), kwargs
    moved: tuple[Any, ...] = (args[0], dtype)
    if isinstance(kind, str) and kind.startswith("torch.cuda."):
        moved = (args[0], "cuda", dtype)
    rest = {k: v for k, v in kwargs.items() if k == "non_blocking"}
    return torch.Tensor.to, moved, rest
