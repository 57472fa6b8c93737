"""Memory formats (issue 37, item 7): a Conv2d moved to ``channels_last`` on meta before
``materialize``, or by init code (``module.to(memory_format=...)``), comes out with
eager's strides and the values of the row-major fill (values never depend on the
layout); the Writer fills a strided destination by its strides."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit
from shardinit.shard import writer

SEED = 11
CL = torch.channels_last


class Grid(nn.Module):
    """A conv, a norm and a 4-D buffer init code computes: what ``to(memory_format)``
    reaches (4-D tensors) and what it leaves (1-D ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.norm = nn.BatchNorm2d(4)
        self.register_buffer("grid", torch.empty(2, 3, 4, 5))

    def init(self) -> None:
        nn.init.kaiming_normal_(self.conv.weight)
        self.conv.weight.data[1].fill_(0.25)
        self.conv.weight.data[:, 2].mul_(2.0)
        nn.init.zeros_(self.conv.bias)
        self.grid.copy_(torch.arange(120.0).reshape(2, 3, 4, 5) / 7)


def _meta(move_first: bool) -> Grid:
    with torch.device("meta"):
        model = Grid()
    if move_first:
        model.to(memory_format=CL)
    return model


def _strides(model: nn.Module) -> dict[str, tuple[int, ...]]:
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return {name: tuple(t.stride()) for name, t in tensors}


def _values(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def _eager_strides(init: Callable[[Grid], None]) -> dict[str, tuple[int, ...]]:
    eager = Grid()
    with torch.no_grad():
        eager.init()
        init(eager)
    return _strides(eager)


def _row_major() -> dict[str, torch.Tensor]:
    model = _meta(move_first=False)
    shardinit.materialize(model, seed=SEED, init_fn=model.init)
    assert model.conv.weight.is_contiguous()
    return _values(model)


@pytest.mark.parametrize("move", ["before", "in-init_fn"])
def test_channels_last_keeps_eagers_strides_and_the_row_major_values(move: str) -> None:
    model = _meta(move_first=move == "before")

    def init_fn() -> None:
        model.init()
        if move == "in-init_fn":
            model.to(memory_format=CL)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    want = _eager_strides(lambda eager: eager.to(memory_format=CL))
    assert _strides(model) == want
    assert model.conv.weight.is_contiguous(memory_format=CL)
    assert not model.conv.weight.is_contiguous() and not model.grid.is_contiguous()
    got, row_major = _values(model), _row_major()
    assert got.keys() == row_major.keys()
    for name, value in row_major.items():
        assert torch.equal(got[name], value), name
    assert torch.equal(model.grid, torch.arange(120.0).reshape(2, 3, 4, 5) / 7)
    row = torch.full((3, 3, 3), 0.25)
    row[2] = 0.5  # the fill, then the column scaled
    assert torch.equal(model.conv.weight[1], row)


def test_without_init_fn_a_channels_last_model_fills_as_the_row_major_one() -> None:
    model, plain = _meta(move_first=True), _meta(move_first=False)

    def ones(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
        tensor.fill_(1.0)

    shardinit.materialize(model, seed=SEED, buffer_init=ones)
    shardinit.materialize(plain, seed=SEED, buffer_init=ones)
    eager = nn.Conv2d(3, 4, 3).to(memory_format=CL)
    assert model.conv.weight.stride() == eager.weight.stride() != plain.conv.weight.stride()
    assert torch.equal(model.conv.weight, plain.conv.weight)
    assert model.grid.stride() == (60, 1, 15, 3) and bool((model.grid == 1.0).all())


def test_conv3d_channels_last_3d_in_init_fn() -> None:
    with torch.device("meta"):
        model = nn.Conv3d(2, 3, 2)
    fmt = torch.channels_last_3d
    shardinit.materialize(
        model, seed=SEED, init_fn=lambda: (nn.init.ones_(model.weight), model.to(memory_format=fmt))
    )
    eager = nn.Conv3d(2, 3, 2).to(memory_format=fmt)
    assert model.weight.stride() == eager.weight.stride()
    assert torch.equal(model.weight, torch.ones(3, 2, 2, 2, 2))


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced"])
def test_the_writer_fills_a_strided_destination_by_its_strides(layout: str) -> None:
    with torch.device("meta"):
        conv = nn.Conv2d(3, 4, 3)

    def init_fn() -> None:
        nn.init.normal_(conv.weight, std=0.5)
        conv.weight.data[:, 1].add_(torch.arange(9.0).reshape(3, 3))

    record = shardinit.capture_init(conv, init_fn)["weight"]
    full = writer().full(record, SEED)
    if layout == "channels_last":
        out = torch.empty(4, 3, 3, 3).to(memory_format=CL)
    elif layout == "transposed":
        out = torch.empty(3, 3, 3, 4).permute(3, 2, 1, 0)
    else:
        out = torch.full((4, 3, 3, 6), -1.0)[..., ::2]  # every other column of a larger one
    before = out.stride()
    writer().box(record, SEED, ((0, 4), (0, 3), (0, 3), (0, 3)), out=out)
    assert out.stride() == before and torch.equal(out, full)
    if layout == "sliced":  # the columns between were not written
        assert bool((out._base[..., 1::2] == -1.0).all())  # type: ignore[index]


def _channels_last_conv(move: str) -> nn.Conv2d:
    with torch.device("meta"):
        conv = nn.Conv2d(3, 4, 3)
    if move == "before":
        conv.to(memory_format=CL)
    return conv


@pytest.mark.parametrize("move", ["before", "in-init_fn"])
@pytest.mark.parametrize(
    ("code", "op"),
    [
        (lambda w: w.data.view(-1)[:5].fill_(1.0), "aten.view"),  # eager: raises
        (lambda w: w.data.flatten()[:5].fill_(1.0), "aten.view"),  # eager: a copy, lost
        (lambda w: w.data.contiguous().fill_(1.0), "contiguous"),  # eager: a copy, lost
    ],
    ids=["view", "flatten", "contiguous"],
)  # fmt: skip
def test_views_eager_cannot_make_on_channels_last_are_refused(
    code: Callable[[torch.Tensor], object], op: str, move: str
) -> None:
    # The stand-in is row-major; where eager's layout would make the view fail or copy,
    # the capture refuses it instead of writing through a view eager never has.
    conv = _channels_last_conv(move)

    def init_fn() -> None:
        if move == "in-init_fn":
            conv.to(memory_format=CL)
        code(conv.weight)

    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.materialize(conv, seed=SEED, init_fn=init_fn)
    message = str(raised.value)
    assert "parameter 'weight'" in message and op in message and "(27, 1, 9, 3)" in message
    assert "test_capture_strides.py" in message and conv.weight.is_meta


def test_views_both_layouts_share_are_replayed_on_channels_last() -> None:
    conv = _channels_last_conv("before")

    def init_fn(conv: nn.Conv2d) -> None:
        nn.init.zeros_(conv.weight)
        conv.weight.data[1, :, 0].fill_(2.0)
        conv.weight.data.transpose(0, 1)[2].narrow(1, 1, 2).fill_(-1.0)

    shardinit.materialize(conv, seed=SEED, init_fn=lambda: init_fn(conv))
    eager = nn.Conv2d(3, 4, 3).to(memory_format=CL)
    with torch.no_grad():
        init_fn(eager)
    assert torch.equal(conv.weight, eager.weight) and conv.weight.stride() == eager.weight.stride()


def _layout_answers(w: torch.Tensor) -> tuple[object, ...]:
    return (
        w.stride(),
        w.stride(1),
        w.is_contiguous(),
        w.is_contiguous(memory_format=CL),
        w.data.stride(),
        w[1].stride(),
        w.data.transpose(0, 1).is_contiguous(),
    )


@pytest.mark.parametrize("move", ["before", "in-init_fn"])
def test_a_channels_last_stand_in_answers_eagers_layout_to_init_code(move: str) -> None:
    # Init code that branches on the layout takes eager's branch (issue 37); shardinit's
    # own region arithmetic still reads the stand-in's row-major strides.
    conv = _channels_last_conv(move)
    answers: list[tuple[object, ...]] = []

    def init(conv: nn.Conv2d) -> None:
        answers.append(_layout_answers(conv.weight))
        channels_last = conv.weight.is_contiguous(memory_format=CL)
        nn.init.constant_(conv.weight, 0.5 if channels_last else -0.5)
        conv.weight.data[1, :, 0].fill_(2.0)

    def init_fn() -> None:
        if move == "in-init_fn":
            conv.to(memory_format=CL)
        init(conv)

    shardinit.materialize(conv, seed=SEED, init_fn=init_fn)
    eager = nn.Conv2d(3, 4, 3).to(memory_format=CL)
    with torch.no_grad():
        init(eager)
    assert len(answers) == 2 and answers[0] == answers[1]  # the capture's, then eager's
    assert answers[0][0] == (27, 1, 9, 3) and answers[0][3] is True
    assert torch.equal(conv.weight, eager.weight) and conv.weight.stride() == eager.weight.stride()


@pytest.mark.parametrize("move", ["before", "in-init_fn"])
def test_orthogonal_on_channels_last_is_refused_as_eager_raises(move: str) -> None:
    eager = nn.Conv2d(3, 4, 3).to(memory_format=CL)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        nn.init.orthogonal_(eager.weight.data)
    conv = _channels_last_conv(move)

    def init_fn() -> None:
        if move == "in-init_fn":
            conv.to(memory_format=CL)
        nn.init.orthogonal_(conv.weight)

    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.materialize(conv, seed=SEED, init_fn=init_fn)
    message = str(raised.value)
    assert "parameter 'weight'" in message and "orthogonal_" in message
    assert "(27, 1, 9, 3)" in message and "test_capture_strides.py" in message
    assert conv.weight.is_meta


def test_orthogonal_on_a_channels_last_1x1_kernel_is_replayed_as_eager() -> None:
    # A 1x1 kernel's channels_last view as a matrix exists: eager torch runs it.
    with torch.device("meta"):
        conv = nn.Conv2d(3, 4, 1).to(memory_format=CL)
    shardinit.materialize(conv, seed=SEED, init_fn=lambda: nn.init.orthogonal_(conv.weight))
    matrix = conv.weight.detach().reshape(4, 3)
    torch.testing.assert_close(matrix.T @ matrix, torch.eye(3), atol=1e-5, rtol=0)
    assert conv.weight.stride() == nn.Conv2d(3, 4, 1).to(memory_format=CL).weight.stride()


def _asked_from(module: str) -> Callable[[torch.Tensor], tuple[object, ...]]:
    """:func:`_layout_answers` as a function of the module ``module`` (its globals say
    so), for the stand-in to see that module as the caller."""
    namespace: dict[str, object] = {"__name__": module, "CL": CL}
    exec(  # the same questions, asked from another module's code
        "def ask(w):\n"
        "    return (w.stride(), w.stride(1), w.is_contiguous(),\n"
        "            w.is_contiguous(memory_format=CL), w.data.stride(), w[1].stride(),\n"
        "            w.data.transpose(0, 1).is_contiguous())\n",
        namespace,
    )
    ask = namespace["ask"]
    assert callable(ask)
    return ask  # type: ignore[no-any-return]


def test_a_stand_in_answers_the_same_whoever_asks() -> None:
    # Issue 46: an answer never depends on the caller's module (a helper moved into
    # shardinit, or a torch internal asking, gets eager's layout too); shardinit's own
    # region arithmetic reads the stand-in's layout through _torch_compat.stored_strides.
    conv = _channels_last_conv("before")
    answers: dict[str, tuple[object, ...]] = {}

    def init_fn() -> None:
        for module in ("tests.user_code", "shardinit._integration.helper", "torch.nn.init"):
            answers[module] = _asked_from(module)(conv.weight)
        nn.init.constant_(conv.weight, 0.5)

    shardinit.materialize(conv, seed=SEED, init_fn=init_fn)
    assert set(answers.values()) == {_layout_answers(conv.weight)}, answers
    assert answers["shardinit._integration.helper"][0] == (27, 1, 9, 3)
