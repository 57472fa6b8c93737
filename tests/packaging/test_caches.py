"""One policy for process-global caches (``shardinit._caches``): least recently used,
bounded; no other cache decorator or hand-written clear in the package."""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path

import shardinit
from shardinit._caches import CACHE_SIZE, BoundedMap

PACKAGE = Path(shardinit.__file__).parent
#: Another cache decorator, or a hand-written bound (``if len(_CACHE) > N: clear``).
OTHER_CACHES = re.compile(
    r"lru_cache|functools\.cache\b|from functools import cache\b|len\(_[A-Z_]+\)\s*>=?\s*[1-9]"
)


def test_the_package_caches_only_through_the_one_policy() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_caches.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if OTHER_CACHES.search(code):
                found.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_a_bounded_map_forgets_the_least_recently_used() -> None:
    kept: BoundedMap[int, str] = BoundedMap()
    for key in range(CACHE_SIZE):
        kept.put(key, str(key))
    assert kept.get(0) == "0"  # now the most recently used: 1 goes first
    kept.put(CACHE_SIZE, "new")
    assert len(kept) == CACHE_SIZE
    assert kept.get(1) is None
    assert kept.get(0) == "0" and kept.get(2) == "2" and kept.get(CACHE_SIZE) == "new"


def test_user_code_objects_are_let_go_past_the_bound() -> None:
    from shardinit._integration.capture.trace import frames

    def code_of(index: int) -> object:
        namespace: dict[str, object] = {}
        exec(compile(f"def f{index}(): pass", f"<user {index}>", "exec"), namespace)
        return namespace[f"f{index}"].__code__  # type: ignore[attr-defined]

    first = code_of(0)
    assert frames._users_code(first) is True
    gone = weakref.ref(first)
    del first
    for index in range(1, CACHE_SIZE + 1):
        frames._users_code(code_of(index))
    gc.collect()
    assert gone() is None


def test_a_bounded_map_with_a_budget_keeps_its_weights_under_it() -> None:
    kept: BoundedMap[str, int] = BoundedMap(budget=100)
    kept.put("a", 1, 60)
    kept.put("b", 2, 30)
    assert kept.get("a") == 1  # now the most recently used: b goes first
    kept.put("c", 3, 30)  # 120 > 100: the least recently used (b) is dropped
    assert kept.get("b") is None and kept.get("a") == 1 and kept.get("c") == 3
    kept.put("a", 4, 10)  # a replaced value counts its new weight only
    kept.put("d", 5, 60)
    assert [kept.get(k) for k in "acd"] == [4, 3, 5]
    kept.put("e", 6, 101)  # heavier than the whole budget: not kept, nothing dropped
    assert kept.get("e") is None and len(kept) == 3
