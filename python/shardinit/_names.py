"""Canonical parameter names (docs/stream-format.md §5).

A parameter's stream is keyed by its canonical name: the dotted path in the model with
the segments that wrappers insert (FSDP1, activation checkpointing, ``torch.compile``)
removed, so the same parameter has the same name wrapped or not.
"""

from __future__ import annotations

__all__ = ["WRAPPER_SEGMENTS", "canonical_name", "qualified"]

#: Path segments of wrappers, removed from canonical names (stream-format.md §5).
WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})


def qualified(path: str, attr: str) -> str:
    """The dotted path of attribute ``attr`` of the module at ``path`` (``""`` is the root).

    Example:
        >>> qualified("layers.0", "weight"), qualified("", "weight")
        ('layers.0.weight', 'weight')
    """
    return f"{path}.{attr}" if path else attr


def canonical_name(path: str) -> str:
    """The canonical name (stream-format.md §5) of a dotted parameter path: wrapper segments
    (``_fsdp_wrapped_module``, ``_checkpoint_wrapped_module``, ``_orig_mod``) removed.

    Example:
        >>> canonical_name("_orig_mod.layers.0._fsdp_wrapped_module.attn.wq.weight")
        'layers.0.attn.wq.weight'
    """
    return ".".join(part for part in path.split(".") if part not in WRAPPER_SEGMENTS)
