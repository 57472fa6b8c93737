"""``materialize``'s rules: which initializer a parameter gets when init_fn does not set
all of it. The first matching rule wins, else the parent module's override, else the
torch.nn default of the owning module's type.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeAlias

from torch import nn

from ..init import Initializer
from .defaults import DefaultInit, default_init

#: A rule's key: a glob over the canonical name (``"layers.*.wo.weight"``), a module type
#: (every parameter of such modules), or ``(module type, attribute glob)`` such as
#: ``(nn.Linear, "bias")``.
RuleKey: TypeAlias = str | type[nn.Module] | tuple[type[nn.Module], str]
#: Ordered rules: first match wins.
Rules: TypeAlias = Mapping[RuleKey, Initializer] | Iterable[tuple[RuleKey, Initializer]]
#: Checked rules, in order.
RuleList: TypeAlias = Sequence[tuple[RuleKey, Initializer]]
#: Global parameter shapes per module (``id(module)``) and attribute: a bias bound
#: depends on the weight's fan-in.
ShapesByModule: TypeAlias = Mapping[int, Mapping[str, tuple[int, ...]]]


def _valid_key(key: object) -> bool:
    return (
        isinstance(key, str)
        or (isinstance(key, type) and issubclass(key, nn.Module))
        or (
            isinstance(key, tuple)
            and len(key) == 2
            and isinstance(key[0], type)
            and issubclass(key[0], nn.Module)
            and isinstance(key[1], str)
        )
    )


def rule_pairs(
    rules: object, check_value: Callable[[RuleKey, object], None]
) -> list[tuple[RuleKey, object]]:
    """``rules`` (a mapping or a sequence of pairs) as an ordered list of pairs, each
    key checked here and each value by ``check_value(key, value)``, pair by pair.

    Raises:
        TypeError: not a mapping or sequence of pairs, a key of the wrong kind, or what
            ``check_value`` raises.
    """
    if rules is None:
        return []
    if isinstance(rules, Mapping):
        items = list(rules.items())
    elif isinstance(rules, Iterable) and not isinstance(rules, (str, bytes)):
        items = list(rules)
    else:
        raise TypeError(f"rules must be a mapping or a sequence of pairs, got {rules!r}")
    checked: list[tuple[RuleKey, object]] = []
    for index, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"rules[{index}] must be a (key, initializer) pair, got {item!r}")
        key, value = item
        if not _valid_key(key):
            raise TypeError(
                f"rules key {key!r} must be a name glob (str), an nn.Module subclass, or "
                "(nn.Module subclass, attribute glob)"
            )
        check_value(key, value)
        checked.append((key, value))
    return checked


def _check_initializer(key: RuleKey, value: object) -> None:
    if not isinstance(value, Initializer):
        raise TypeError(
            f"rules[{key!r}] must be a shardinit.init initializer, got "
            f"{type(value).__name__} {value!r}"
        )


def check_rules(rules: Rules | None) -> list[tuple[RuleKey, Initializer]]:
    """``rules`` as an ordered list of pairs.

    Raises:
        TypeError: not a mapping or sequence of pairs, a key of the wrong kind, or a
            value that is not a shardinit initializer.
    """
    pairs = rule_pairs(rules, _check_initializer)
    return [(key, value) for key, value in pairs if isinstance(value, Initializer)]


def rule_matches(key: RuleKey, name: str, owner: nn.Module, attr: str) -> bool:
    """Whether rule ``key`` applies to parameter ``attr`` of ``owner``, canonically ``name``."""
    if isinstance(key, str):
        return fnmatch.fnmatchcase(name, key)
    if isinstance(key, tuple):
        module_type, attr_glob = key
        return isinstance(owner, module_type) and fnmatch.fnmatchcase(attr, attr_glob)
    return isinstance(owner, key)


def first_rule(
    rules: Sequence[tuple[RuleKey, object]], name: str, owner: nn.Module, attr: str
) -> RuleKey | None:
    """The key of the first rule matching the parameter, or None."""
    for key, _ in rules:
        if rule_matches(key, name, owner, attr):
            return key
    return None


def choose_init(
    rules: RuleList,
    name: str,
    owner: nn.Module,
    attr: str,
    shapes: ShapesByModule,
    overrides: Mapping[tuple[int, str], DefaultInit],
) -> DefaultInit | None:
    """The first matching rule, else a parent's override (see
    :func:`~shardinit._integration.defaults.parent_overrides`), else torch.nn's default,
    else None."""
    for key, initializer in rules:
        if rule_matches(key, name, owner, attr):
            return DefaultInit(initializer)
    override = overrides.get((id(owner), attr))
    if override is not None:
        return override
    return default_init(owner, attr, shapes.get(id(owner), {}))
