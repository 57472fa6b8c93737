"""Each op family of the capture's dispatch is registered once, with its names, its
route and its handlers together (``capture/dispatch/families.py``): a route is one
family's, and a name one family lists is that family's, except where an earlier family
takes it on purpose (said here)."""

from __future__ import annotations

from typing import get_args

from shardinit._integration.capture.dispatch import calls, families

#: Names a family lists that an earlier family takes: ``type`` is a cast by its data
#: (``t.type(torch.float64)``) but a question of metadata first (``t.type()``), as it
#: was routed before the families.
SHADOWED = {("type", "cast", "metadata")}


def shadowed(registry: tuple[families.Family, ...]) -> set[tuple[str, str, str]]:
    """``(name, family, taken by)`` for every listed name another family takes first."""
    found = set()
    for family in registry:
        for name in family.names:
            first = next(f for f in registry if f.owns(name))
            if first is not family:
                found.add((name, family.route, first.route))
    return found


def test_each_route_is_one_family() -> None:
    routes = [family.route for family in families.FAMILIES]
    assert len(routes) == len(set(routes))
    assert {*routes, families.OTHER.route} == set(get_args(calls.Route))


def test_a_listed_name_is_its_family() -> None:
    assert shadowed(families.FAMILIES) == SHADOWED
    for family in families.FAMILIES:
        for name in family.names:
            if (name, family.route, families.family_of(name).route) not in SHADOWED:
                assert families.family_of(name) is family, name


def test_a_name_two_families_list_is_found() -> None:
    """The negative control: a view registered again as a pointwise step is shadowed."""
    extra = families.Family("pointwise", frozenset({"narrow"}))
    registry = (*families.FAMILIES, extra)
    assert shadowed(registry) == {*SHADOWED, ("narrow", "pointwise", "view")}


def test_writes_by_name_are_families_of_their_own() -> None:
    # The writes once chosen by name inside the write handler are each a family.
    for name, route in (
        ("data.__set__", "set_data"),
        ("copy_", "copy_into"),
        ("pad", "pad"),
        ("__setitem__", "setitem"),
        ("mul_", "translated"),
        ("log_", "inplace"),
        ("__iadd__", "inplace"),
        ("triu_", "coordinate"),
    ):
        family = families.family_of(name)
        assert family.route == route and family.on_target is not None, name
    assert families.family_of("no_such_op") is families.OTHER
