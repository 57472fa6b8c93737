"""``materialize(only=...)``: which parameters a fill of part of a model plans.

Fine-tuning loads a checkpoint into part of a meta model and fills the rest: ``only`` is
then the ``missing_keys`` of ``load_state_dict(ckpt, strict=False, assign=True)`` (or of
``set_model_state_dict``), names as they come (module paths: wrapper segments and the
non-canonical holders of tied parameters are mapped to the canonical name; buffer
names are accepted, buffers follow their own rule), or a predicate over canonical names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from torch import nn

from .._names import ModuleWalk, buffer_holders, canonical_name, holder_names, listing
from .._torch_compat import is_flat_param
from ..errors import ShardInitError
from .targets import Target

#: ``only``: the names to fill (canonical or module paths), or a predicate over canonical names.
Only = Iterable[str] | Callable[[str], bool]


def check_only(only: object) -> None:
    """Raises TypeError for an ``only`` that is neither names nor a predicate."""
    if only is None or callable(only):
        return
    if isinstance(only, str | bytes) or not isinstance(only, Iterable):
        raise TypeError(
            "only must be an iterable of parameter names (e.g. load_state_dict's "
            f"missing_keys) or a callable name -> bool, got {type(only).__name__} {only!r}"
        )


def chosen_names(
    root: nn.Module, targets: Sequence[Target], only: Only, walk: ModuleWalk | None = None
) -> set[str]:
    """The canonical names of the targets ``only`` selects (``walk``: ``root``'s, where
    the caller has it).

    Raises:
        TypeError: a name that is not a str.
        ShardInitError: names that match no parameter or buffer of ``root``.
    """
    names = {target.name for target in targets}
    if callable(only):
        return {name for name in names if only(name)}
    holders = holder_names(root, skip=lambda module, attr, param: is_flat_param(param), walk=walk)
    buffers = {holder.name for holder in buffer_holders(root, walk)}
    chosen: set[str] = set()
    unknown: list[str] = []
    for given in list(only):
        if not isinstance(given, str):
            raise TypeError(f"only must hold str names, got {type(given).__name__} {given!r}")
        name = canonical_name(given)
        name = holders.get(name, name)  # a tied parameter's other holders: its canonical name
        if name in names:
            chosen.add(name)
        elif name not in buffers:  # buffers: filled on meta as always, else left alone
            unknown.append(given)
    if unknown:
        raise ShardInitError(
            f"materialize: only names {len(unknown)} parameter(s) the model does not have: "
            f"{listing(unknown)}. Pass the names of this model's parameters (canonical or "
            "as named_parameters() and load_state_dict's missing_keys give them)"
        )
    return chosen
