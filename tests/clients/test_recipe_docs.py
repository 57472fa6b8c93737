"""The docs quote the recipes the client tests run, verbatim: each ``<!-- recipe: NAME -->``
block of a doc is the source of the function ``NAME`` of one of its recipe modules, and
every recipe of those modules is quoted (a doc block with no recipe behind it, or a recipe
nobody quotes, fails too)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import ModuleType

import ecosystem_recipes
import finetune_recipes
import pytest
import trainer_recipes

pytestmark = pytest.mark.clients

DOCS = Path(__file__).resolve().parents[2] / "docs"
RECIPE_BLOCK = r"<!-- recipe: (\w+) -->\n```python\n(.*?)```"


def _recipes(module: ModuleType) -> dict[str, str]:
    """The source of each function ``module`` defines (not the ones it imports)."""
    return {
        name: inspect.getsource(fn)
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and fn.__module__ == module.__name__
    }


@pytest.mark.parametrize(
    ("doc", "modules"),
    [
        ("trainers.md", [trainer_recipes]),
        ("capturing-init.md", [ecosystem_recipes, finetune_recipes]),
    ],
)
def test_doc_quotes_every_recipe_verbatim(doc: str, modules: list[ModuleType]) -> None:
    quoted = dict(re.findall(RECIPE_BLOCK, (DOCS / doc).read_text(), re.S))
    recipes: dict[str, str] = {}
    for module in modules:
        recipes.update(_recipes(module))
    assert sorted(quoted) == sorted(recipes), f"docs/{doc} quotes other recipes than the tests run"
    for name, source in recipes.items():
        assert quoted[name] == source, f"docs/{doc} quotes an old {name}: copy it again"
