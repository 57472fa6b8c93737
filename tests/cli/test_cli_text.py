"""What the CLI prints and returns, by its pieces (no process started): the ranks a
large plan shows, an interrupt's exit status, the demo's description of its layout."""

from __future__ import annotations

import pytest

from shardinit import cli
from shardinit.cli import demo, plan


def test_a_large_plan_shows_the_first_three_the_middle_and_the_last_two_ranks() -> None:
    assert plan._shown_ranks(16) == [0, 1, 2, 8, 14, 15]
    assert plan._shown_ranks(9) == [0, 1, 2, 4, 7, 8]


def test_an_interrupt_exits_with_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(plan, "run_plan", interrupted)
    assert cli.run(["plan", "--model", "tiny", "--world", "2"]) == 130


def test_the_demo_names_two_way_tensor_parallelism(capsys: pytest.CaptureFixture[str]) -> None:
    demo._print_intro("tiny", 5, 2, [2], offload=False)
    assert "on top of 2-way tensor parallelism" in capsys.readouterr().out
    demo._print_intro("tiny", 5, 1, [2], offload=False)
    assert "tensor parallelism" not in capsys.readouterr().out


def test_a_large_plan_marks_the_ranks_left_out_and_names_no_ep_when_there_is_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.run(["plan", "--model", "tiny", "--world", "16"]) == 0
    out = capsys.readouterr().out
    assert "  FSDP2 fully_shard on 16 rank(s), mesh 16\n" in out  # no EP named
    assert "      r0 [0:32, :]  r1 [32:64, :]  r2 [64:96, :]  ...  r8 [256:288, :]\n" in out
