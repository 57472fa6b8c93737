"""Init code that writes a parameter piece by piece (issue 51): row loops with a step per
row, copies per row, per-expert fills, then a step over all of it, against the same code
run eagerly on the CPU where its values are deterministic (bit for bit), and past the
few hundred rows where a fold of every earlier write hit Python's recursion limit."""

from __future__ import annotations

import torch
from torch import nn

import shardinit

ROWS = 600  # past the depth at which the capture used to fail (a RecursionError)


class _Custom(nn.Module):
    """A parameter with no rule and no torch.nn default: init code must set all of it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ROWS, 8))
        self.experts = nn.Parameter(torch.empty(16, 4, 8))


def _rows_with_steps(model: _Custom) -> None:
    with torch.no_grad():
        for row in range(ROWS):
            model.weight[row].fill_(row * 0.25)
            model.weight[row].mul_(0.5)
            model.weight[row].add_(torch.arange(8.0) * row)
        for expert in range(16):
            model.experts[expert] = torch.arange(32.0).view(4, 8) / (expert + 1)
        model.experts[:8].mul_(3.0)


def test_row_loops_with_steps_give_eagers_values() -> None:
    eager = _Custom()
    _rows_with_steps(eager)
    with torch.device("meta"):
        meta = _Custom()
    shardinit.materialize(meta, seed=51, init_fn=lambda: _rows_with_steps(meta))
    for name, want in eager.named_parameters():
        assert torch.equal(meta.get_parameter(name).detach(), want.detach()), name


def test_a_step_over_all_rows_after_a_long_row_loop() -> None:
    def init(model: _Custom) -> None:
        _rows_with_steps(model)
        with torch.no_grad():
            model.weight.clamp_(-100.0, 100.0)

    eager = _Custom()
    init(eager)
    with torch.device("meta"):
        meta = _Custom()
    shardinit.materialize(meta, seed=51, init_fn=lambda: init(meta))
    assert torch.equal(meta.weight.detach(), eager.weight.detach())


def test_a_step_over_two_writes_needs_no_default() -> None:
    # The values before init_fn are read nowhere: the writes cover all of it.
    def init(model: _Custom) -> None:
        with torch.no_grad():
            model.weight[: ROWS // 2].fill_(1.0)
            model.weight[ROWS // 2 :].fill_(2.0)
            model.weight[ROWS // 4 : ROWS // 2 + 1].mul_(3.0)
            model.experts.zero_()

    eager = _Custom()
    init(eager)
    with torch.device("meta"):
        meta = _Custom()
    captured = shardinit.capture_init(meta, lambda: init(meta))
    assert captured["weight"].covers_all()
    shardinit.materialize(meta, seed=51, init_fn=captured)
    assert torch.equal(meta.weight.detach(), eager.weight.detach())


def test_random_rows_then_a_step_keep_their_draws() -> None:
    # Per-row random fills then a step of each: each row holds its own draw, scaled.
    def init(model: _Custom, scaled: bool) -> None:
        with torch.no_grad():
            for row in range(ROWS):
                model.weight[row].normal_(0.0, 1.0 / (row + 1))
                if scaled:
                    model.weight[row].mul_(2.0)
            model.experts.zero_()

    values = []
    for scaled in (False, True):
        with torch.device("meta"):
            meta = _Custom()
        shardinit.materialize(meta, seed=51, init_fn=lambda m=meta, s=scaled: init(m, s))
        values.append(meta.weight.detach())
    plain, scaled_values = values
    assert torch.equal(scaled_values, plain * 2.0)
    assert float(plain[0].std()) > 10 * float(plain[-1].std()) > 0.0


def test_a_step_over_all_rows_after_random_rows_reads_each_rows_draw() -> None:
    # The step over all of it is recorded piece by piece (one piece per row, past
    # engine.PIECEWISE_PAST): each row's clamp reads that row's own draw.
    def init(model: _Custom, clamped: bool) -> None:
        with torch.no_grad():
            for row in range(ROWS):
                model.weight[row].normal_(0.0, 1.0 / (row + 1))
            if clamped:
                model.weight.clamp_(-0.01, 0.01)
            model.experts.zero_()

    values = []
    for clamped in (False, True):
        with torch.device("meta"):
            meta = _Custom()
        shardinit.materialize(meta, seed=51, init_fn=lambda m=meta, c=clamped: init(m, c))
        values.append(meta.weight.detach())
    plain, clamped_values = values
    assert torch.equal(clamped_values, plain.clamp(-0.01, 0.01))
    assert 0 < int((plain.abs() > 0.01).sum()) < plain.numel()  # the clamp changes some
