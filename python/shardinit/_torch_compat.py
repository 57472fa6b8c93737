"""Every private torch API shardinit uses, in one place, each with the torch version it
was checked against.

When torch changes one of these, this module is the only place to adapt; the tests of
the callers (materialize, fingerprint, FSDP1, capture) say whether it still holds.
``Module._parameters`` / ``Module._buffers`` are not wrapped here: they are the
registries ``named_parameters()`` / ``named_buffers()`` read, and writing them directly
is how a parameter is replaced without ``__setattr__``'s checks (torch's own
``Module._apply`` does the same). The wrapper segments dropped from canonical names
(``_fsdp_wrapped_module``, ...) are part of the stream format (docs/stream-format.md
§5) and live in ``_names.py``.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, TypeGuard, TypeVar

import torch
from torch import nn
from torch.utils import _pytree
from torch.utils._device import DeviceContext as _DeviceContext
from torch.utils._device import _device_constructors
from torch.utils._python_dispatch import TorchDispatchMode as DispatchMode

from ._caches import cached

if TYPE_CHECKING:
    from torch.distributed.tensor.placement_types import Placement, _StridedShard

__all__ = [
    "CHECKED_TORCH",
    "CONV_MODULES",
    "DISABLED_TORCH_FUNCTION",
    "GRAD_SWITCH",
    "NN_INIT_FILLS",
    "NORM_MODULES",
    "NOT_RUN",
    "ORIGINAL_KEEPING",
    "SUBCLASS_FUNCTION_DISABLED",
    "WEIGHT_NORM",
    "DispatchMode",
    "FlatEntry",
    "Fsdp1Unit",
    "apply_to_tensors",
    "assign_parameter",
    "aten_packet",
    "deepcopy_memo",
    "enter_dispatch_mode",
    "exit_dispatch_mode",
    "fsdp1_unit",
    "fsdp2_offloaded_params",
    "give_grad_hooks",
    "handed_to_mode",
    "is_flat_param",
    "is_strided_shard",
    "kernels_only",
    "make_parameter",
    "make_subclass",
    "past_device_mode",
    "positional_arguments",
    "python_key_excluded",
    "rewrap_fsdp2_classes",
    "source_as_checked",
    "split_factor",
    "stateless_philox_missing",
    "stateless_philox_uniform",
    "stateless_philox_words",
    "stored_contiguous",
    "stored_order",
    "stored_strides",
    "strided_shard",
    "torch_function_disabled",
    "tree_leaves",
    "tree_map",
    "unchecked_torch",
    "unwrap_fsdp2_classes",
]

#: The torch release every API below was checked against.
CHECKED_TORCH = "2.15.0"

# --------------------------------------------------------------------------- dispatch

# ``DispatchMode`` is ``torch.utils._python_dispatch.TorchDispatchMode`` (checked 2.15.0;
# imported above): a mode that sees every aten operation below the torch-function layer
# (capture's backstop). It is untyped in torch: it is entered and left through these.


def enter_dispatch_mode(mode: DispatchMode) -> None:
    mode.__enter__()  # type: ignore[no-untyped-call]


def exit_dispatch_mode(mode: DispatchMode, *exc: Any) -> None:
    mode.__exit__(*exc)  # type: ignore[no-untyped-call]


def unchecked_torch(version: str) -> str | None:
    """Why torch ``version`` (``torch.__version__``) is not the release the APIs below
    were checked against (another major.minor; local suffixes and patch releases
    count as checked), or None."""
    release = version.split("+")[0].split(".")[:2]
    if release == CHECKED_TORCH.split(".")[:2]:
        return None
    return (
        f"shardinit's uses of private torch APIs were checked against torch "
        f"{CHECKED_TORCH}, this is torch {version}; materialize, capture_init and "
        "fingerprint may fail or refuse models until shardinit is checked against it"
    )


# Checked once, when the first module that needs these APIs is imported.
if (_unchecked := unchecked_torch(torch.__version__)) is not None:
    warnings.warn(_unchecked, UserWarning, stacklevel=2)

# --------------------------------------------------------------------------- torch.nn

#: ``nn.modules.conv._ConvNd`` (checked 2.15.0): Conv1d/2d/3d and ConvTranspose, whose
#: ``reset_parameters`` is Linear's.
CONV_MODULES: tuple[type[nn.Module], ...] = (nn.modules.conv._ConvNd,)
#: ``nn.modules.batchnorm._NormBase`` (checked 2.15.0): BatchNorm1d/2d/3d, SyncBatchNorm
#: and InstanceNorm1d/2d/3d, with ``reset_running_stats``.
NORM_MODULES: tuple[type[nn.Module], ...] = (nn.modules.batchnorm._NormBase,)
#: Every fill function of ``torch.nn.init``, with the private helpers behind the public
#: ones that init code calls too (older timm, DeiT), checked 2.15.0: what capture
#: translates and what a ZeRO-3 build makes no-ops.
NN_INIT_FILLS: tuple[str, ...] = (
    "normal_",
    "uniform_",
    "trunc_normal_",
    "constant_",
    "zeros_",
    "ones_",
    "eye_",
    "dirac_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
    "sparse_",
    "_no_grad_uniform_",
    "_no_grad_normal_",
    "_no_grad_trunc_normal_",
    "_no_grad_fill_",
    "_no_grad_zero_",
)


def apply_to_tensors(module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """``Module._apply(fn)`` (checked 2.15.0): replaces every parameter and buffer of
    ``module`` by ``fn(tensor)``, as ``to_empty`` does. FSDP2 overrides ``_apply`` to
    re-register its sharded parameters afterwards, which ``to_empty`` alone would not
    let shardinit restrict to meta tensors."""
    module._apply(fn)  # type: ignore[no-untyped-call]


def assign_parameter(module: nn.Module, attr: str, param: nn.Parameter) -> None:
    """``setattr(module, attr, param)`` for ``attr`` a parameter of ``module`` already.
    Where the class keeps ``Module.__setattr__`` and ``register_parameter`` (checked
    2.15.0), this does what they come to for a leaf Parameter whose name is registered as
    a parameter only: the global parameter registration hooks run (shardinit's own,
    :mod:`._integration.parents`, is one), then the registry is written. materialize
    allocates every parameter of a model, and the checks around those steps cost more
    than the allocation."""
    cls = type(module)
    if not (
        cls.__setattr__ is nn.Module.__setattr__
        and cls.register_parameter is nn.Module.register_parameter
        and type(param) is nn.Parameter
        and param.grad_fn is None
        and attr in module._parameters
        and attr not in vars(module)
        and attr not in module._buffers
        and attr not in module._modules
        and attr not in module._non_persistent_buffers_set
    ):
        setattr(module, attr, param)
        return
    for hook in _PARAMETER_HOOKS.values():
        output = hook(module, attr, param)
        if output is not None:
            param = output
    module._parameters[attr] = param


#: torch's global parameter registration hooks (checked 2.15.0): a dict torch updates in
#: place, so this reference sees the hooks registered later.
_PARAMETER_HOOKS: dict[Any, Any] = nn.modules.module._global_parameter_registration_hooks


#: torch.nn's normalization layers' base class (checked 2.15.0: BatchNorm, InstanceNorm
#: and SyncBatchNorm build their tensors in its constructor).
NORM_BASE: Any = nn.modules.batchnorm._NormBase
#: torch.nn's convolutions' base class (checked 2.15.0: every ``ConvNd`` and
#: ``ConvTransposeNd`` makes its parameters and calls ``reset_parameters`` in its
#: constructor).
CONV_BASE: Any = CONV_MODULES[0]
#: ``torch.nn.init``'s fans of a tensor, ``(fan_in, fan_out)`` (checked 2.15.0), which
#: torch.nn's ``reset_parameters`` methods read.
FANS: Callable[[torch.Tensor], tuple[int, int]] = torch.nn.init._calculate_fan_in_and_fan_out


#: The source of each torch method whose effect shardinit states without running it all
#: (the known constructors, :mod:`.._integration.capture.session.knownmodules`, and
#: torch's resets recorded, ``knownresets``), as torch 2.15.0 has it: sha256 of its
#: dedented text, first 16 hex digits. Another torch's method (changed arguments, a new
#: call) does not match, and is followed as it runs: slower, never another value.
_CHECKED_SOURCES: Final = {
    "torch.nn.modules.batchnorm._NormBase.__init__": "5e2896ee3f3403a4",
    "torch.nn.modules.batchnorm._NormBase.reset_running_stats": "2f0e4a010d1f4caa",
    "torch.nn.modules.batchnorm._NormBase.reset_parameters": "adf66cc9f595e3ac",
    "torch.nn.modules.conv._ConvNd.__init__": "8b386c1e883899ad",
    "torch.nn.modules.conv._ConvNd.reset_parameters": "93fa40132e9e0627",
    "torch.nn.modules.linear.Linear.__init__": "931dfa117b6496df",
    "torch.nn.modules.linear.Linear.reset_parameters": "ce3708a1bf57c16f",
}


@cached
def source_as_checked(method: Callable[..., object]) -> bool:
    """Whether ``method`` (one of torch's, :data:`_CHECKED_SOURCES`) has the source its
    shortcut was checked against; False for any other, or where its source is not at
    hand (read once per method)."""
    expected = _CHECKED_SOURCES.get(f"{method.__module__}.{method.__qualname__}")
    try:
        text = textwrap.dedent(inspect.getsource(method))
    except (OSError, TypeError):
        return False
    return expected == hashlib.sha256(text.encode()).hexdigest()[:16]


def torchs_own_function(name: str) -> object:
    """torch's own builtin ``torch.<name>`` (checked 2.15.0: ``torch._C._VariableFunctions``),
    whatever the ``torch`` module's attribute holds now."""
    return getattr(torch._C._VariableFunctions, name)


def default_device_type() -> str:
    """The type of device torch's factories make tensors on now when given none, read as
    ``torch.get_default_device`` reads it (checked 2.15.0: the innermost
    ``torch.device`` mode, else the global default's), without the tensor it makes to
    read an index (a torch call every mode above would see)."""
    # Innermost first, one mode at a time (torch.overrides' list of the stack is built
    # in Python; asked at every layer a recording builds through a known constructor).
    for depth in range(torch._C._len_torch_function_stack() - 1, -1, -1):
        mode = torch._C._get_function_stack_at(depth)
        if isinstance(mode, _DeviceContext):
            return _device_type(mode.device)
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return "cpu" if context is None else _device_type(context.device)


def _device_type(device: torch.device | str | int) -> str:
    # A mode's device is a torch.device already (making one is a torch call the modes see).
    return device.type if isinstance(device, torch.device) else torch.device(device).type


def registration_hooks() -> list[object]:
    """Every global registration hook of parameters, buffers and submodules that torch
    runs now (checked 2.15.0: ``torch.nn.modules.module``'s three dicts)."""
    module = nn.modules.module
    return [
        *_PARAMETER_HOOKS.values(),
        *module._global_buffer_registration_hooks.values(),
        *module._global_module_registration_hooks.values(),
    ]


def innermost_function_mode() -> object | None:
    """The ``TorchFunctionMode`` torch hands a call to now in this thread (checked
    2.15.0): the top of the mode stack; None when there is none, or torch functions are
    disabled (``torch._C.DisableTorchFunction``), where no mode sees a call."""
    if not torch._C._is_torch_function_mode_enabled():
        return None
    depth = torch._C._len_torch_function_stack()
    return torch._C._get_function_stack_at(depth - 1) if depth else None


class mode_popped:
    """The ``with`` block with ``mode`` (the innermost, see
    :func:`innermost_function_mode`) off this thread's stack, as torch runs a mode's
    ``__torch_function__`` (checked 2.15.0: ``torch.overrides._pop_mode_temporarily``).
    A class, not a generator: it runs once per recorded call."""

    def __init__(self, mode: object) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        popped = torch._C._pop_torch_function_stack()
        if popped is not self.mode:
            torch._C._push_on_torch_function_stack(popped)
            raise AssertionError("mode_popped: not the innermost mode")

    def __exit__(self, *exc: object) -> None:
        torch._C._push_on_torch_function_stack(self.mode)


def past_device_mode(func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` run as the ``torch.device`` mode would run it, without
    its Python call, when that mode is the only ``TorchFunctionMode`` on this thread's
    stack (asked from a mode's ``__torch_function__``, which torch runs with that mode
    popped) and ``func`` is none of the factories it gives a device (checked 2.15.0:
    ``torch.utils._device``, whose mode then calls ``func`` as it is); else
    :data:`NOT_RUN`, and nothing ran. One Python call: asked at most calls of a build."""
    if torch._C._len_torch_function_stack() != 1 or func in _DEVICE_FACTORIES:
        return NOT_RUN
    mode = torch._C._pop_torch_function_stack()
    try:
        if type(mode) is not _DeviceContext:
            return NOT_RUN
        return func(*args, **(kwargs or {}))
    finally:
        torch._C._push_on_torch_function_stack(mode)


#: :func:`past_device_mode`'s answer when it ran nothing.
NOT_RUN: Final = object()

#: The factories the ``torch.device`` mode gives its device (checked 2.15.0).
_DEVICE_FACTORIES = frozenset(_device_constructors())


def innermost_dispatch_mode() -> object | None:
    """The ``TorchDispatchMode`` on top of this thread's (user) dispatch mode stack, or
    None (checked 2.15.0)."""
    depth = torch._C._len_torch_dispatch_stack()
    return torch._C._get_dispatch_stack_at(depth - 1) if depth else None


class dispatch_mode_popped:
    """The ``with`` block with ``mode`` (the innermost, see
    :func:`innermost_dispatch_mode`) off this thread's dispatch mode stack (checked
    2.15.0: ``torch.utils._python_dispatch._pop_mode`` of a mode with no key)."""

    def __init__(self, mode: DispatchMode) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        popped = torch._C._pop_torch_dispatch_stack(None)
        if popped is not self.mode:
            torch._C._push_on_torch_dispatch_stack(popped)
            raise AssertionError("dispatch_mode_popped: not the innermost mode")

    def __exit__(self, *exc: object) -> None:
        torch._C._push_on_torch_dispatch_stack(self.mode)


def handed_to_mode(caller: FrameType, frame: FrameType) -> bool:
    """Whether the call ``frame`` made that led to ``caller`` (a frame below it) is
    ``torch.overrides.handle_torch_function`` (checked 2.15.0): a ``torch.nn.init``
    function running in ``frame`` handed its own call to the ``__torch_function__``
    modes before running its body (other modes' frames may lie between: a mode above
    the capture's passes the call down)."""
    callee: FrameType | None = caller
    while callee is not None and callee.f_back is not frame:
        callee = callee.f_back
    return callee is not None and callee.f_code.co_name == "handle_torch_function"


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of ``torch.utils._pytree.tree_flatten`` (checked 2.15.0): those of
    nested arguments, as torch's dispatch sees them. Plain tuples, lists and dicts are
    walked here (every call the capture sees, several times: a few microseconds less
    each than torch's walk, which builds a spec of the tree too); a tree holding any
    other type torch's pytree registers (``torch.Size``, a namedtuple, an
    ``OrderedDict``) is torch's to flatten."""
    leaves: list[Any] = []
    return leaves if _plain_leaves(tree, leaves) else _pytree.tree_flatten(tree)[0]


def _plain_leaves(tree: Any, leaves: list[Any]) -> bool:
    """Appends the leaves of ``tree`` to ``leaves``; False (some appended) where it holds
    a pytree node other than a plain tuple, list or dict (values in insertion order,
    as torch's dict flatten gives them)."""
    kind = type(tree)
    if kind is dict:
        tree = tree.values()
    elif kind is not tuple and kind is not list:
        if _pytree_node(kind):
            return False
        leaves.append(tree)
        return True
    for item in tree:  # one level inline: most arguments are flat
        kind = type(item)
        if kind is tuple or kind is list or kind is dict:
            if not _plain_leaves(item, leaves):
                return False
        elif _pytree_node(kind):
            return False
        else:
            leaves.append(item)
    return True


def _pytree_node(kind: type) -> bool:
    """Whether torch's pytree flattens values of ``kind`` (other than plain tuples,
    lists and dicts): registered, or a namedtuple (a subclass of tuple, asked last)."""
    return kind in _pytree.SUPPORTED_NODES or (
        issubclass(kind, tuple) and _pytree.is_namedtuple_class(kind)
    )


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``torch.utils._pytree.tree_map`` (checked 2.15.0): ``tree`` with ``fn`` of each
    leaf, as torch's dispatch walks nested arguments."""
    from torch.utils._pytree import tree_map as map_leaves

    return map_leaves(fn, tree)


#: ``torch._C._set_grad_enabled`` (checked 2.15.0): the switch ``torch.no_grad()`` and
#: the ``torch.nn.init`` functions around their writes call, seen by a function mode.
GRAD_SWITCH: Callable[..., Any] = torch._C._set_grad_enabled
#: ``torch._C.DisableTorchFunction`` (checked 2.15.0): a ``with`` block in which no
#: ``__torch_function__`` (mode or subclass) sees the calls: a tensor's own answers.
#: The capture reads its tensors' layouts in one: under ``torch.device("meta")`` each
#: ``stride()``, ``shape``, ``storage_offset()`` is otherwise a Python call of the device
#: mode (about 1.3 us, against 0.1 us; tens of thousands per model).
torch_function_disabled: Callable[[], Any] = torch._C.DisableTorchFunction


_Param = TypeVar("_Param", bound=nn.Parameter)


def make_parameter(cls: type[_Param], data: torch.Tensor, requires_grad: bool) -> _Param:
    """What ``cls(data, requires_grad)`` makes of a plain tensor, without running the
    class's ``__new__``: ``torch.Tensor._make_subclass`` (checked 2.15.0)."""
    made: _Param = torch.Tensor._make_subclass(cls, data, requires_grad)
    return made


_Tensor = TypeVar("_Tensor", bound=torch.Tensor)


#: A tensor's gradient hooks, by the private attributes ``register_hook`` and
#: ``register_post_accumulate_grad_hook`` keep them in (checked: torch 2.15; setting one
#: registers its dict with autograd, as the registering call does).
_GRAD_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")


def give_grad_hooks(source: torch.Tensor, dest: torch.Tensor) -> None:
    """Gives the leaf ``dest`` the gradient hooks registered on ``source`` (the same
    dicts, so the handles their registration returned remove them from ``dest``)."""
    for attr in _GRAD_HOOKS:
        hooks = getattr(source, attr, None)
        if not hooks:
            continue
        held = getattr(dest, attr, None)
        if held is None:
            setattr(dest, attr, hooks)
        elif held is not hooks:
            held.update(hooks)


def make_subclass(cls: type[_Tensor], data: torch.Tensor) -> _Tensor:
    """``data``'s alias as ``cls`` (no grad); a ``cls`` that defines
    ``__torch_dispatch__`` gets torch's Python dispatch key, so every aten operation on
    the alias, from any thread, reaches it (checked 2.15.0)."""
    made: _Tensor = torch.Tensor._make_subclass(cls, data, False)
    return made


#: The Python dispatch key excluded: inside a ``__torch_dispatch__`` of a subclass made
#: by ``make_subclass``, an operation runs its kernel instead of reaching the subclass
#: again (checked 2.15.0).
_PYTHON_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)


#: ``torch.nn.Parameter``'s ``__torch_function__``: runs the function without converting
#: its results to the caller's subclass (checked 2.15.0).
DISABLED_TORCH_FUNCTION: Callable[..., Any] = torch._C._disabled_torch_function_impl


#: ``torch._C.DisableTorchFunctionSubclass`` (checked 2.15.0): a ``with`` block in which
#: a tensor subclass's ``__torch_function__`` calls torch's own function (the seed
#: checkpoint's trace of transformers' reverse weight conversions).
SUBCLASS_FUNCTION_DISABLED: Callable[[], Any] = torch._C.DisableTorchFunctionSubclass


def is_alias_of(tensor: torch.Tensor, other: torch.Tensor) -> bool:
    """``torch._C._is_alias_of`` (checked 2.15.0): whether ``tensor`` views ``other``'s
    storage (meta tensors included, whose storages have no address to compare)."""
    return bool(torch._C._is_alias_of(tensor, other))  # type: ignore[attr-defined]


def python_key_excluded() -> Any:
    return torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEY)


class kernels_only:
    """A ``with`` block of torch's kernels alone: no ``__torch_function__`` (a mode's
    Python call for every op and every ``shape`` or ``dtype`` read: under
    ``torch.device("meta")`` about 5 us each) and no Python dispatch (the capture's own
    dispatch modes). For the capture's own computations on CPU values it holds (a
    table's checks, an eager evaluation), which no mode has to see; a factory in it
    names its device (the device mode does not give it one). A class, not a
    generator: it runs several times per recorded op."""

    __slots__ = ("_dispatch", "_function")

    def __enter__(self) -> None:
        self._function: Any = torch._C.DisableTorchFunction()
        self._dispatch: Any = torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEY)
        self._function.__enter__()
        self._dispatch.__enter__()  # type: ignore[no-untyped-call]

    def __exit__(self, *exc: Any) -> None:
        self._dispatch.__exit__(*exc)
        self._function.__exit__(*exc)


#: The code of ``nn.Parameter.__deepcopy__`` (checked 2.15.0), whose local ``memo`` is
#: the running ``copy.deepcopy``'s table of originals to copies.
_PARAM_DEEPCOPY = nn.Parameter.__deepcopy__.__code__


def deepcopy_memo(frame: FrameType | None, depth: int = 3) -> dict[int, Any] | None:
    """The ``memo`` of the ``copy.deepcopy`` whose ``Parameter.__deepcopy__`` is
    ``frame`` or one of its ``depth`` callers (its ``self.data.clone()``, called through
    torch's dispatch helpers), read from that frame's locals; None outside one."""
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code is _PARAM_DEEPCOPY:
            memo = frame.f_locals.get("memo")
            return memo if isinstance(memo, dict) else None
        frame = frame.f_back
    return None


# --------------------------------------------------------------------------- DTensor


def is_strided_shard(placement: Placement) -> TypeGuard[_StridedShard]:
    """Whether ``placement`` is ``_StridedShard`` (checked 2.15.0; what FSDP2 on top of
    tensor parallelism produces). In some torch versions it subclasses ``Shard``: test
    this before ``Shard``."""
    from torch.distributed.tensor.placement_types import _StridedShard

    return isinstance(placement, _StridedShard)


def split_factor(placement: _StridedShard) -> int:
    """A ``_StridedShard``'s split factor as an int (checked 2.15.0: it keeps a possibly
    symbolic ``split_factor`` and the concrete ``_split_factor_int()`` apart)."""
    concrete = getattr(placement, "_split_factor_int", None)
    if concrete is not None:
        return int(concrete())
    return int(placement.split_factor)


def strided_shard(dim: int, split_factor: int) -> Placement:
    """``_StridedShard(dim, split_factor=split_factor)`` (checked 2.15.0): the layout of
    Megatron-core's ``partition_stride`` on its 1-D tensor-parallel group (see
    :mod:`shardinit._integration.megatron`)."""
    from torch.distributed.tensor.placement_types import _StridedShard

    return _StridedShard(dim, split_factor=split_factor)


# --------------------------------------------------------------------------- FSDP1


def is_flat_param(param: torch.Tensor) -> bool:
    """Whether ``param`` is FSDP1's ``FlatParameter`` (checked 2.15.0: a plain Parameter
    marked ``_is_flat_param`` by torch's metaclass)."""
    return bool(getattr(param, "_is_flat_param", False))


@dataclass(frozen=True)
class FlatEntry:
    """One original parameter of an FSDP1 unit and the part of it this rank's flat shard
    holds.

    Attributes:
        path: its dotted path relative to the unit.
        module: the module that owns it.
        attr: its attribute name on ``module``.
        shape: its (global) shape.
        offset: where the part starts in the local flat shard.
        start: the first flat element of the parameter held here.
        stop: one past the last (``start == stop`` when none is held).
    """

    path: str
    module: nn.Module
    attr: str
    shape: tuple[int, ...]
    offset: int
    start: int
    stop: int


@dataclass(frozen=True)
class Fsdp1Unit:
    """What shardinit reads of one FSDP1 unit.

    Attributes:
        flat_param: the local flat parameter (this rank's padded shard).
        sharded_now: False while the unit is unsharded (``summon_full_params``, forward).
        entries: its original parameters, in flat order.
        shared: ``(module, attr)`` of the other holders of parameters shared inside it.
        shard_group: the process group the flat parameter is split over, None for a
            strategy that does not split it (NO_SHARD: every rank holds all of it).
    """

    flat_param: torch.Tensor
    sharded_now: bool
    entries: tuple[FlatEntry, ...]
    shared: tuple[tuple[nn.Module, str], ...]
    shard_group: Any


def fsdp1_unit(wrapper: nn.Module) -> Fsdp1Unit | None:
    """The flat parameter of FSDP1 wrapper ``wrapper``, or None for a unit without
    parameters. Checked 2.15.0: ``FullyShardedDataParallel._handle`` (a
    ``FlatParamHandle``: ``flat_param``, ``uses_sharded_strategy``, ``is_sharded``) and
    the ``FlatParameter`` fields ``_fqns``, ``_param_infos``, ``_shapes``,
    ``_shard_param_infos`` (``in_shard``, ``offset_in_shard``, inclusive
    ``intra_param_start_idx`` / ``intra_param_end_idx``) and ``_shared_param_infos``, and
    the wrapper's ``process_group`` (the shard group; HYBRID_SHARD's intra-node one)."""
    handle = getattr(wrapper, "_handle", None)
    if handle is None:
        return None
    flat_param = handle.flat_param
    sharded_now = not handle.uses_sharded_strategy or bool(handle.is_sharded(flat_param))
    return Fsdp1Unit(
        flat_param=flat_param,
        sharded_now=sharded_now,
        entries=tuple(_flat_entries(flat_param)),
        shared=tuple((info.module, info.param_name) for info in flat_param._shared_param_infos),
        shard_group=wrapper.process_group if handle.uses_sharded_strategy else None,
    )


def _flat_entries(flat_param: Any) -> Iterator[FlatEntry]:
    for path, info, shape, shard in zip(
        flat_param._fqns,
        flat_param._param_infos,
        flat_param._shapes,
        flat_param._shard_param_infos,
        strict=True,
    ):
        if shard.in_shard:
            offset = int(shard.offset_in_shard)
            start = int(shard.intra_param_start_idx)
            stop = int(shard.intra_param_end_idx) + 1
        else:
            offset, start, stop = 0, 0, 0
        yield FlatEntry(
            path=path,
            module=info.module,
            attr=info.param_name,
            shape=tuple(int(size) for size in shape),
            offset=offset,
            start=start,
            stop=stop,
        )


# --------------------------------------------------------------------------- FSDP2


def unwrap_fsdp2_classes(
    module: nn.Module, modules: Iterable[nn.Module] | None = None
) -> list[tuple[nn.Module, type]]:
    """Gives modules ``fully_shard`` wrapped their own class back (checked 2.15.0:
    FSDP2 swaps the class for a dynamic subclass of ``FSDPModule`` and the original);
    returns ``(module, wrapper class)`` to put back with :func:`rewrap_fsdp2_classes`.
    ``modules``: ``module.modules()``, where the caller has them.

    FSDP2 swaps a module's class for a subclass ``FSDP<Class>`` defined in torch. Init code
    may look at the class: transformers treats a model whose class lives outside its
    package as custom code and skips ``_init_weights`` for modules without parameters of
    their own (GPT-2's depth-scaled ``c_proj``, T5's attention). Init code then runs on
    the classes the model was built with, as on the CPU.
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    wrapper = getattr(fsdp, "FSDPModule", None)
    swapped: list[tuple[nn.Module, type]] = []
    if wrapper is None:
        return swapped
    for sub in module.modules() if modules is None else modules:
        cls = type(sub)
        if isinstance(sub, wrapper):
            bases = [b for b in cls.__bases__ if not issubclass(b, wrapper)]
            if len(bases) == 1 and issubclass(bases[0], nn.Module):
                sub.__class__ = bases[0]
                swapped.append((sub, cls))
    return swapped


def fsdp2_offloaded_params(root: nn.Module) -> dict[int, bool]:
    """The sharded parameters of ``root`` that FSDP2 offloads to the CPU
    (``fully_shard(offload_policy=CPUOffloadPolicy(...))``), as ``id(parameter) ->
    pin_memory``. Read from each ``FSDPModule``'s private state (checked 2.15.0:
    ``_get_fsdp_state()._fsdp_param_group.fsdp_params``, each ``FSDPParam`` with
    ``offload_to_cpu``, ``pin_memory`` and ``sharded_param``)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    wrapper = getattr(fsdp, "FSDPModule", None)
    offloaded: dict[int, bool] = {}
    if wrapper is None:
        return offloaded
    for sub in root.modules():
        if not isinstance(sub, wrapper):
            continue
        group = sub._get_fsdp_state()._fsdp_param_group
        for fsdp_param in group.fsdp_params if group is not None else ():
            if fsdp_param.offload_to_cpu:
                offloaded[id(fsdp_param.sharded_param)] = bool(fsdp_param.pin_memory)
    return offloaded


def rewrap_fsdp2_classes(swapped: list[tuple[nn.Module, type]]) -> None:
    for sub, cls in swapped:
        sub.__class__ = cls


def aten_packet(func: Any) -> Any:
    """The packet of an aten overload (``torch.ops.aten.fill_`` for
    ``torch.ops.aten.fill_.Scalar``); any other callable as it is. ``torch._ops.OpOverload``
    is private (checked: torch 2.15)."""
    return func.overloadpacket if isinstance(func, torch._ops.OpOverload) else func


def stored_strides(tensor: torch.Tensor) -> tuple[int, ...]:
    """The strides of ``tensor`` as its storage holds it: ``torch.Tensor``'s own answer,
    never a subclass's. A capture's stand-in is row-major (its boxes are) but answers
    init code with eager's layout (a ``channels_last`` parameter's strides); shardinit's
    own region arithmetic reads the stand-in's real layout here, wherever it is called
    from (with torch functions disabled: no mode's answer either, and no Python call of
    a ``torch.device`` mode). Public API, kept here as the one place such reads go."""
    with torch_function_disabled():
        return tuple(torch.Tensor.stride(tensor))


def stored_contiguous(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is row-major in its storage (:func:`stored_strides`)."""
    with torch_function_disabled():
        return bool(torch.Tensor.is_contiguous(tensor))


def stored_order(tensor: torch.Tensor) -> list[int] | None:
    """The order of ``tensor``'s dims in its storage, outermost first, where it is dense
    (``tensor.permute(order)`` is row-major: a ``channels_last`` tensor's NHWC, a
    transposed copy's reversed dims); None where it has gaps or overlaps (a strided view).
    Used where shardinit follows a new dense tensor by row-major boxes but must hand init
    code eager's layout."""
    strides = stored_strides(tensor)
    order = sorted(range(len(strides)), key=lambda dim: -strides[dim])
    if order == list(range(len(strides))):  # most: no permuted view to make (one op each)
        return order if stored_contiguous(tensor) else None
    return order if stored_contiguous(tensor.permute(order)) else None


def positional_arguments(name: str) -> tuple[str, ...]:
    """The names of the positional arguments of the aten operator ``name`` (its default
    overload), in order: as the torch function or method of that name takes them
    (``torch.full(size, fill_value)``, ``t.new_full(size, fill_value)`` with ``t`` as
    ``self``). ``OpOverload._schema`` is private (checked: torch 2.15)."""
    schema = getattr(torch.ops.aten, name).default._schema
    return tuple(argument.name for argument in schema.arguments if not argument.kwarg_only)


#: ``torch.nn.utils.parametrizations``' private parametrization classes (checked: torch
#: 2.15): weight_norm's, whose ``right_inverse`` gives ``(g, v)`` with ``v`` the weight
#: itself, and those whose ``right_inverse`` returns its input (spectral_norm's).
WEIGHT_NORM: type[nn.Module] = torch.nn.utils.parametrizations._WeightNorm
ORIGINAL_KEEPING: tuple[type[nn.Module], ...] = (torch.nn.utils.parametrizations._SpectralNorm,)


# --------------------------------------------------------------------------- stateless Philox

#: Where torch's stateless Philox lives (checked 2.15.0, private and "subject to change
#: without notice"): a key is a uint64 tensor ``(seed, offset)``, the offset counted in
#: 128-bit Philox blocks. docs/stream-format.md §2 says how stream v1 maps onto it.
_STATELESS_PHILOX = "torch.func._random"


def stateless_philox_missing() -> str | None:
    """Why torch's stateless Philox (``torch.func._random.bits``, torch >= 2.15) cannot
    be reached in this torch, or None when it can."""
    try:
        from torch.func import _random
    except ImportError:
        return f"torch {torch.__version__} has no {_STATELESS_PHILOX} (new in torch 2.15)"
    if not hasattr(_random, "bits") or not hasattr(_random, "uniform"):
        return f"torch {torch.__version__}'s {_STATELESS_PHILOX} has no bits() / uniform()"
    return None


def _stateless_key(key64: int, first_block: int) -> torch.Tensor:
    return torch.tensor([key64, first_block], dtype=torch.uint64)


def stateless_philox_words(key64: int, first_block: int, count: int) -> torch.Tensor:
    """``count`` raw uint32 words of torch's stateless Philox4x32-10 with seed ``key64``,
    starting at block ``first_block`` (``torch.func._random.bits``, checked 2.15.0)."""
    from torch.func import _random

    return _random.bits(_stateless_key(key64, first_block), (count,), dtype=torch.uint32)


def stateless_philox_uniform(
    key64: int, first_block: int, count: int, dtype: torch.dtype
) -> torch.Tensor:
    """``count`` uniforms in [0, 1) of ``dtype`` from the same key and blocks
    (``torch.func._random.uniform``, checked 2.15.0)."""
    from torch.func import _random

    return _random.uniform(_stateless_key(key64, first_block), (count,), dtype=dtype)
