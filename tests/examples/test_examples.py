"""The five scripts in examples/ run, so they cannot rot: each printout is checked
against a known answer (the checksums and digests are fixed by stream format v1 and the
same for every world size, as the examples claim; the losses only for being finite).

The FSDP2 examples run in one process in ``make test`` (about 10-20 s each on 2 cores,
mostly importing torch and transformers) and as the two-rank torchrun their docstrings
show with ``--runslow``. The Megatron-core and DeepSpeed examples run under the ``zoo``
marker (``make test-zoo``) at one and two ranks, whose digests must agree.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardinit.cli._launch import free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NUMBER = r"(-?\d+\.\d+)"

pytestmark = pytest.mark.distributed
#: The examples' runs (fresh processes each): ``make test-processes``.
processes = pytest.mark.processes


def run_example(script: str, world: int, *args: str) -> str:
    """The last line ``script`` prints on rank 0: one process for world 1 (the
    environment torchrun would set, without torchrun's agent), else a ``world``-process
    torchrun."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    if world == 1:
        command = [sys.executable, str(EXAMPLES / script), *args]
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={world}", str(EXAMPLES / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    return lines[-1]


def finite_loss(text: str) -> float:
    loss = float(text)
    assert math.isfinite(loss) and 0.0 < loss < 20.0, loss
    return loss


#: The world size of the runs in ``make test``: one process (the examples' FSDP2 code
#: on a one-rank mesh); ``--runslow`` adds the two-rank runs their docstrings show.
WORLDS = [1, pytest.param(2, marks=pytest.mark.slow)]


@processes
@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_llama(world: int) -> None:
    line = run_example("fsdp2_llama.py", world)
    expected = rf"world {world}: initial weights checksum 622\.2922251388, loss {NUMBER}"
    found = re.fullmatch(expected, line)
    assert found, line
    finite_loss(found[1])


@processes
@pytest.mark.parametrize("world", WORLDS)
def test_transformers_llama(world: int) -> None:
    line = run_example("transformers_llama.py", world)
    expected = (
        rf"world {world}: initial weights checksum 1165\.8389527867, padding row zero: True, "
        rf"loss {NUMBER}"
    )
    found = re.fullmatch(expected, line)
    assert found, line
    finite_loss(found[1])


@processes
@pytest.mark.parametrize("world", WORLDS)
def test_torchtitan_llama3(world: int) -> None:
    line = run_example("torchtitan_llama3.py", world)
    assert line == f"world {world}: initial weights checksum 664.6866329528"


@pytest.mark.zoo
def test_megatron_gpt_digest_is_the_same_for_tp_pp_and_one_process() -> None:
    digests = {}
    for world, args in ((1, ()), (2, ("--tp", "2")), (2, ("--pp", "2"))):
        line = run_example("megatron_gpt.py", world, *args)
        found = re.fullmatch(r"tp=(\d) pp=(\d): (\d+) parameters, model digest (\w+)", line)
        assert found, line
        digests[found[1], found[2]] = (found[3], found[4])
    assert set(digests) == {("1", "1"), ("2", "1"), ("1", "2")}
    assert len(set(digests.values())) == 1, digests


@pytest.mark.zoo
def test_deepspeed_zero3_digest_is_the_same_for_one_and_two_ranks() -> None:
    digests = []
    for world in (1, 2):
        line = run_example("deepspeed_zero3.py", world)
        found = re.fullmatch(
            rf"world {world}: initial model digest (\w+), loss after init {NUMBER}", line
        )
        assert found, line
        finite_loss(found[2])
        digests.append(found[1])
    assert digests[0] == digests[1]
