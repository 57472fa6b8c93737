"""torch.nn defaults at their edges (shardinit._integration.defaults), asked directly:
a parameter torch does not own, a recurrent cell of hidden size 0, and the originals of
parametrized tensors whose values the parametrization keeps or not."""

from __future__ import annotations

from torch import nn
from torch.nn.utils import parametrizations, parametrize

from shardinit import init
from shardinit._integration.defaults import DefaultInit, _parametrized_defaults, default_init


def test_a_parameter_added_to_a_bilinear_has_no_default() -> None:
    bilinear = nn.Bilinear(6, 7, 5)
    assert default_init(bilinear, "extra", {"weight": (5, 6, 7)}) is None
    assert default_init(bilinear, "bias", {"weight": (5, 6, 7)}) is not None


def test_a_recurrent_cell_of_hidden_size_zero_has_bound_zero_as_in_torch() -> None:
    # torch's RNNCellBase.reset_parameters: stdv = 1 / sqrt(hidden_size) if > 0 else 0.
    assert default_init(nn.RNNCell(4, 0), "weight_ih", {}) == DefaultInit(init.constant(0.0))


class _Double(nn.Module):
    """A parametrization without ``right_inverse``: ``original`` holds the values."""

    def forward(self, x: object) -> object:
        return 2 * x  # type: ignore[operator]


def _original_defaults(module: nn.Module) -> dict[str, DefaultInit]:
    found = _parametrized_defaults(module)
    return {attr: d for (owner, attr), d in found.items() if owner != id(module)}


def test_an_original_takes_the_default_only_where_the_parametrization_keeps_its_values() -> None:
    kaiming = default_init(nn.Linear(4, 3), "weight", {"weight": (3, 4)})
    plain = nn.Linear(4, 3)
    parametrize.register_parametrization(plain, "weight", _Double())
    assert _original_defaults(plain) == {"original": kaiming}
    spectral = parametrizations.spectral_norm(nn.Linear(4, 3))
    assert _original_defaults(spectral) == {"original": kaiming}
    orthogonal = parametrizations.orthogonal(nn.Linear(4, 3))  # right_inverse changes values
    assert _original_defaults(orthogonal) == {}
