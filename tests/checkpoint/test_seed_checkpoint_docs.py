"""docs/seed-checkpoints.md quotes the flows tests/checkpoint runs, verbatim: each
``<!-- recipe: NAME -->`` block is the source of the function ``NAME`` of
checkpoint_recipes.py, and every function there is quoted."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import checkpoint_recipes

DOC = Path(__file__).resolve().parents[2] / "docs" / "seed-checkpoints.md"
RECIPE_BLOCK = r"<!-- recipe: (\w+) -->\n```python\n(.*?)```"


def test_doc_quotes_every_recipe_verbatim() -> None:
    quoted = dict(re.findall(RECIPE_BLOCK, DOC.read_text(), re.S))
    recipes = {
        name: inspect.getsource(fn)
        for name, fn in vars(checkpoint_recipes).items()
        if inspect.isfunction(fn) and fn.__module__ == checkpoint_recipes.__name__
    }
    assert sorted(quoted) == sorted(recipes), "docs/seed-checkpoints.md quotes other recipes"
    for name, source in recipes.items():
        assert quoted[name] == source, f"docs/seed-checkpoints.md quotes an old {name}"
