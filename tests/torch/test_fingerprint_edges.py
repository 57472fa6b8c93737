"""``fingerprint`` of tensors whose bits are not plainly their values (issue 37): a
negative view is fingerprinted by its values; quantized, sparse and nested tensors are
refused (tests/core/test_bad_input.py), never read as raw bits."""

from __future__ import annotations

import pytest
import torch

import shardinit


def test_a_negative_view_is_fingerprinted_by_its_values() -> None:
    base = torch.linspace(-3, 5, 12, dtype=torch.float32).reshape(3, 4)
    view = torch._neg_view(base)
    assert view.is_neg()
    assert torch.equal(view, -base)
    assert shardinit.fingerprint(view) == shardinit.fingerprint(-base)
    assert shardinit.fingerprint(view) != shardinit.fingerprint(base)
    # the view of a view (transposed) too, and integer dtypes
    assert shardinit.fingerprint(view.t()) == shardinit.fingerprint((-base).t().contiguous())
    ints = torch.arange(-4, 8, dtype=torch.int64)
    assert shardinit.fingerprint(torch._neg_view(ints)) == shardinit.fingerprint(-ints)


def test_the_imaginary_part_of_a_conjugate_is_its_negated_values() -> None:
    values = torch.tensor([1 + 2j, -3 - 0.5j, 0.25j], dtype=torch.complex64)
    imag = values.conj().imag  # a view with the negative bit
    assert imag.is_neg()
    assert shardinit.fingerprint(imag) == shardinit.fingerprint(torch.tensor([-2.0, 0.5, -0.25]))


def test_a_sparse_model_buffer_is_refused_naming_it() -> None:
    model = torch.nn.Linear(2, 2)
    model.register_buffer("scale_table", torch.ones(2, 2).to_sparse_coo())
    assert len(shardinit.fingerprint_model(model)) == 2  # buffers are left out by default
    with pytest.raises(
        shardinit.ShardInitError,
        match=r"^fingerprint: buffer 'scale_table' has layout torch.sparse_coo",
    ):
        shardinit.fingerprint_model(model, buffers=True)
