"""The ``shardinit`` command line end to end: exit codes mean what they say."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardinit
from shardinit.cli import _launch, run
from shardinit.cli.models import MODELS
from shardinit.cli.transformer import build_model


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = run(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------- bad arguments

BAD_ARGUMENTS = [
    [],
    ["bogus"],
    ["demo", "--worlds", "0"],
    ["demo", "--worlds", "1,x"],
    ["demo", "--worlds", "2,2"],
    ["demo", "--seed", "-1"],
    ["demo", "--seed", str(2**64)],
    ["demo", "--model", "gpt-5"],
    ["demo", "--tp", "2", "--worlds", "1,2"],
    ["plan", "--world", "2"],
    ["plan", "--model", "tiny"],
    ["plan", "--model", "tiny", "--shapes", "x.json", "--world", "2"],
    ["plan", "--model", "tiny", "--world", "4", "--tp", "3"],
    ["plan", "--shapes", "/nonexistent/shapes.json", "--world", "2"],
    ["fingerprint", "--expect", "xyz"],
    ["fingerprint", "--world", "3", "--tp", "2"],
    ["fingerprint", "--world", "-2"],
]


@pytest.mark.parametrize("argv", BAD_ARGUMENTS, ids=lambda argv: " ".join(argv) or "<none>")
def test_bad_arguments_exit_2_with_one_line_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(argv, capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("usage: shardinit")
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1]
    assert re.match(r"^shardinit( \w+)?: error: \S", errors[0])
    assert "Traceback" not in err


def test_bad_shapes_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "shapes.json"
    path.write_text('{"w": [4, -1]}')
    code, _, err = _run(["plan", "--shapes", str(path), "--world", "2"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("shardinit plan: error: shapes file")


def test_bad_arguments_in_a_real_process_have_no_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "shardinit", "demo", "--worlds", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "shardinit demo: error: argument --worlds: expected a positive integer, got 0"
    )


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["plan", "--help"], capsys)
    assert code == 0
    assert "--shapes FILE" in out


# ---------------------------------------------------------------------------------- plan


def test_plan_model_bytes_and_estimates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["plan", "--model", "tiny", "--world", "2"], capsys)
    assert code == 0
    total = MODELS["tiny"].num_params() * 4
    # every tiny parameter has an even number of rows: exactly half on each rank
    assert f"rank    0: {total / 2 / 1024:.2f} KiB" in out
    assert f"rank    1: {total / 2 / 1024:.2f} KiB" in out
    assert "tok_embeddings.weight  (512, 64)  (Shard(dim=0),)" in out
    assert "r0 [0:256, :]  r1 [256:512, :]" in out
    assert "layers.*.attention.wq.weight x2  (64, 64)" in out
    section = out.split("Estimated peak parameter memory per rank")[1]
    estimates = dict(re.findall(r"^  (\S.*?)\s{2,}([\d.]+ (?:B|KiB|MiB|GiB))$", section, re.M))
    assert list(estimates) == [
        "FSDP1, model built on CPU on every rank",
        "FSDP1, meta + param_init_fn per unit",
        "FSDP1 + shardinit.fsdp1_param_init_fn",
        "FSDP2, meta + to_empty + reset_parameters",
        "FSDP2 + shardinit.materialize",
    ]
    half = f"{total / 2 / 1024:.2f} KiB"
    assert estimates["FSDP2 + shardinit.materialize"] == half
    assert estimates["FSDP2, meta + to_empty + reset_parameters"] == half
    # FSDP1 on CPU holds the whole model plus a flat copy of a unit
    fsdp1_cpu = float(estimates["FSDP1, model built on CPU on every rank"].split()[0]) * 1024
    assert fsdp1_cpu > total


def test_plan_shapes_file_uneven(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"w": [7, 4], "b": {"shape": [7], "dtype": "bfloat16"}}))
    code, out, _ = _run(["plan", "--shapes", str(path), "--world", "3"], capsys)
    assert code == 0
    # torch.chunk: 7 rows on 3 ranks -> 3, 3, 1
    assert "r0 [0:3, :]  r1 [3:6, :]  r2 [6:7, :]" in out
    assert "r0 [0:3]  r1 [3:6]  r2 [6:7]" in out
    assert "rank    0: 54 B" in out  # 3*4 float32 + 3 bfloat16
    assert "rank    2: 18 B" in out  # 1*4 float32 + 1 bfloat16


def test_plan_tp_layout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["plan", "--model", "tiny", "--world", "4", "--tp", "2"], capsys)
    assert code == 0
    assert "(_StridedShard(dim=0, sf=2), Shard(dim=0))" in out
    # column-wise: rank 1 (dp 0, tp 1) holds the first dp half of TP shard 1
    assert "r0 [0:16, :]  r1 [32:48, :]  r2 [16:32, :]  r3 [48:64, :]" in out
    assert "n/a (FSDP1 with TP/EP not modeled)" in out


# --------------------------------------------------------------------------- fingerprint


def _fingerprint_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code, out, err = _run(["fingerprint", "--json", *argv], capsys)
    assert code == 0, err
    result: dict[str, object] = json.loads(out)
    return result


@pytest.mark.distributed
@pytest.mark.processes
def test_fingerprint_same_for_worlds_1_and_2(capsys: pytest.CaptureFixture[str]) -> None:
    one = _fingerprint_json(["--model", "tiny", "--seed", "3"], capsys)
    two = _fingerprint_json(["--model", "tiny", "--seed", "3", "--world", "2"], capsys)
    assert one["model_digest"] == two["model_digest"]
    assert one["fingerprints"] == two["fingerprints"]
    # and equal to fingerprinting the full tensors built here
    model = shardinit.materialize(build_model("tiny"), seed=3)
    fingerprints = one["fingerprints"]
    assert isinstance(fingerprints, dict)
    assert fingerprints["layers.1.feed_forward.w2.weight"] == shardinit.fingerprint(
        model.layers[1].feed_forward.w2.weight
    )
    other_seed = _fingerprint_json(["--model", "tiny", "--seed", "4"], capsys)
    assert other_seed["model_digest"] != one["model_digest"]


def test_fingerprint_expect(capsys: pytest.CaptureFixture[str]) -> None:
    digest = _fingerprint_json(["--seed", "9"], capsys)["model_digest"]
    assert isinstance(digest, str)
    code, out, _ = _run(["fingerprint", "--seed", "9", "--expect", digest], capsys)
    assert code == 0
    assert out.strip().splitlines()[-1].split() == ["model", "digest", digest]
    wrong = "0" * 16 if digest != "0" * 16 else "1" * 16
    code, _, err = _run(["fingerprint", "--seed", "9", "--expect", wrong], capsys)
    assert code == 1
    assert f"model digest {digest} != expected {wrong}" in err


# ---------------------------------------------------------------------------------- demo


@pytest.mark.distributed
@pytest.mark.processes
def test_demo_tiny_worlds_1_and_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["demo", "--model", "tiny", "--worlds", "1,2", "--seed", "5"], capsys)
    assert code == 0, out
    lines = out.splitlines()
    # The verdict comes first, after the progress lines: 16 random parameters (embedding,
    # 14 Linear weights, output) differ on torch's path; 5 norm weights are ones.
    verdict = "PASS: 21 of 21 parameters identical across worlds 1 and 2; "
    verdict += "torch's path differs on 16 of 21"
    assert verdict in lines
    assert lines.index(verdict) < lines.index(
        "Per world (time: slowest rank; memory: largest rank):"
    )
    # shardinit's digest is the digest of the plainly materialized model
    model = shardinit.materialize(build_model("tiny"), seed=5)
    expected = shardinit.model_digest(shardinit.fingerprint_model(model))
    assert f"shardinit's model digest at every world size: {expected}" in lines
    # the per-parameter table only with --verbose or a difference
    assert "shardinit fingerprints" not in out
    assert "layers.1.feed_forward.w2.weight" not in out
    # torch's own path: layout-dependent; rank shards are copies on a CPU mesh
    assert "world 2: rank shards are exact copies of each other for 16 of 16 randomly" in out
    assert lines[-1].startswith("total ")


# The report from synthetic worker results: no processes, every number known.


def _fake_worlds(differ_at: int | None) -> Callable[..., list[dict[str, Any]]]:
    """A stand-in for the launcher: two parameters; ``a.weight`` gets another shardinit
    fingerprint at world ``differ_at``; torch's path differs at every world on ``a``."""

    def launch(module: str, world: int, args: list[str], **_: Any) -> list[dict[str, Any]]:
        assert module == "shardinit.cli._worker" and "--torch-path" in args
        fingerprints = {"a.weight": "aaaaaaaaaaaaaaaa", "b.weight": "bbbbbbbbbbbbbbbb"}
        if world == differ_at:
            fingerprints["a.weight"] = "cccccccccccccccc"
        rank = {
            "seconds": 0.5 * world,
            "rss_before": 2**30,
            "peak_rss": 2**30 + 3 * 2**20,
            "bytes": 2**20 // world,
            "shapes": {"a.weight": [8, 4], "b.weight": [4]},
            "fingerprints": fingerprints,
            "torch_seconds": 1.0,
            "threads": 1,
            "torch_fingerprints": {"a.weight": f"{world:016x}", "b.weight": "bbbbbbbbbbbbbbbb"},
            "torch_local": {"a.weight": [[8 // world, 4], "same"], "b.weight": [[4], "b"]},
        }
        return [rank] * world

    return launch


def test_demo_report_verdict_resources_and_no_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_launch, "launch", _fake_worlds(differ_at=None))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("os.getloadavg", lambda: (9.5, 0.0, 0.0))
    code, out, _ = _run(["demo", "--model", "tiny", "--worlds", "1,2,4"], capsys)
    assert code == 0
    lines = out.splitlines()
    verdict = lines.index(
        "PASS: 2 of 2 parameters identical across worlds 1, 2 and 4; torch's path differs on 1 of 2"
    )
    table = lines.index("Per world (time: slowest rank; memory: largest rank):")
    assert verdict < table
    rows = [line.split() for line in lines[table + 1 : table + 5]]
    header = "world shardinit init torch's init generated/rank peak RSS/rank RSS added by init"
    assert rows[0] == header.split()
    assert rows[1] == ["1", "0.50", "s", "1.00", "s", "1.00", "MiB", "1.00", "GiB", "3.00", "MiB"]
    assert rows[3] == ["4", "2.00", "s", "1.00", "s", "256.00", "KiB", "1.00", "GiB", "3.00", "MiB"]
    assert "a.weight" not in out  # no per-parameter table
    assert "the parameters that agree (1 of 2) are constants such as norms" in out
    assert "world 4: rank shards are exact copies of each other for 1 of 1 randomly" in out
    # What each time includes, then why shardinit is slower where it is (world 4 only).
    flat = " ".join(out.split())
    assert "Both times start from the same sharded model on meta" in flat
    assert "shardinit's is materialize; torch's is to_empty + manual_seed" in flat
    assert "shardinit is slower at world 4 (2.00 s vs 1.00 s)" in flat
    assert "4 ranks x 1 fill threads share 2 cores" in flat
    assert "the machine is busy (load average 9.5 on 2 cores)" in flat
    assert "slower at world 1" not in flat and "slower at world 2" not in flat


def test_demo_offload_reaches_the_workers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[list[str]] = []
    fake = _fake_worlds(differ_at=None)

    def launch(module: str, world: int, args: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        seen.append(args)
        return fake(module, world, args, **kwargs)

    monkeypatch.setattr(_launch, "launch", launch)
    code, out, _ = _run(["demo", "--model", "tiny", "--worlds", "1,2", "--offload"], capsys)
    assert code == 0
    assert all("--offload" in args for args in seen) and len(seen) == 2
    assert "FSDP2 fully_shard with CPU offload (CPUOffloadPolicy)" in out


def test_demo_verbose_prints_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_launch, "launch", _fake_worlds(differ_at=None))
    code, out, _ = _run(["demo", "--model", "tiny", "--worlds", "1,2", "--verbose"], capsys)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert ["a.weight", "8x4", "aaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaa"] in rows
    assert ["b.weight", "4", "bbbbbbbbbbbbbbbb", "bbbbbbbbbbbbbbbb"] in rows
    assert "<- differs" not in out


def test_demo_difference_fails_and_prints_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_launch, "launch", _fake_worlds(differ_at=2))
    code, out, _ = _run(["demo", "--model", "tiny", "--worlds", "1,2"], capsys)
    assert code == 1
    lines = out.splitlines()
    assert (
        "FAIL: 1 of 2 parameters identical across worlds 1 and 2; torch's path differs on 1 of 2"
    ) in lines
    rows = [line.split() for line in lines]
    assert ["a.weight", "8x4", "aaaaaaaaaaaaaaaa", "cccccccccccccccc", "<-", "differs"] in rows
    assert ["b.weight", "4", "bbbbbbbbbbbbbbbb", "bbbbbbbbbbbbbbbb"] in rows
    digests = next(row for row in rows if row[:2] == ["model", "digest"])
    assert len(digests) == 4 and digests[2] != digests[3]
    assert any(line.startswith("shardinit's model digests: world 1 ") for line in lines)
