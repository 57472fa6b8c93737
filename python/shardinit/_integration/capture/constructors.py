"""Constructor values: what a model's constructor computes for its parameters
(``nn.Parameter(torch.tensor(2.6592))``, ``nn.Parameter(torch.ones(d))``,
``nn.Parameter(torch.randn(d) * 0.02)``, ``nn.Parameter(torch.log(A))``), recorded while
the model is built (on meta) so that ``materialize`` can give them those values.

:func:`record_constructors` follows every tensor made while it is active, as
:func:`~shardinit.capture_init` follows temporaries, and a parameter registration hook
notes which module attribute each parameter lands on. When it exits, each parameter
still held there gets its init program (the fold of what was written to its tensor).
Records are kept per module object and attribute name (weakly), so they survive
``fully_shard`` (which swaps Parameters for DTensors but keeps the modules).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.modules.module import register_module_parameter_registration_hook

from ..exclusive import ThreadExclusive
from .mode import CaptureMode
from .program import Bad, Expr, bad_reasons
from .records import CapturedOp, ParamRecord, program_of

__all__ = ["ConstructorValue", "constructor_record", "record_constructors"]


@dataclass(frozen=True)
class ConstructorValue:
    """What a constructor computed for one parameter (over its GLOBAL coordinates), or
    why it cannot be replayed (``expr`` is then a :class:`~.program.Bad`)."""

    expr: Expr
    where: str


_RECORDS: weakref.WeakKeyDictionary[nn.Module, dict[str, ConstructorValue]] = (
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
_NEVER = "that were never written"


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
    """
    mode = CaptureMode([], {})
    seen: list[tuple[weakref.ref[nn.Module], str, nn.Parameter]] = []

    def hook(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None:
            seen.append((weakref.ref(module), name, param))

    with _RECORDING.hold():
        handle = register_module_parameter_registration_hook(hook)
        try:
            with mode:
                yield
        finally:
            handle.remove()
    for ref, name, param in seen:
        module = ref()
        if module is None or module._parameters.get(name) is not param:
            continue
        value = _value(mode, param)
        if value is not None:
            _RECORDS.setdefault(module, {})[name] = value


def _value(mode: CaptureMode, param: nn.Parameter) -> ConstructorValue | None:
    if mode.store.lookup(param) is None:
        return None
    expr = mode.engine.value_of(param, "nn.Parameter")
    reasons = bad_reasons(expr)
    if reasons and all(_NEVER in why for why in reasons):
        return None  # never written (torch.empty): no constructor value
    if reasons:
        expr = Bad(reasons[0])
    return ConstructorValue(expr, "constructor")


def constructor_record(
    module: nn.Module, attr: str, name: str, shape: tuple[int, ...], dtype: torch.dtype
) -> ParamRecord | None:
    """The constructor value of ``module.<attr>`` as a record of one whole-parameter
    op, or None.

    Raises:
        ShardInitError: the constructor computed values that cannot be replayed.
    """
    from ...errors import ShardInitError

    value = _RECORDS.get(module, {}).get(attr)
    if value is None:
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
