"""Seed checkpoints read by the libraries that train from them: transformers'
``from_pretrained`` (tied and untied Llama) and torchtitan's initial load (DCP) give
exactly what ``materialize`` gives the same meta model with the same init code; the
``shardinit checkpoint --hf-config`` command writes the same files as the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from checkpoint_recipes import (
    hf_load,
    hf_seed_checkpoint,
    titan_initial_load,
    titan_seed_checkpoint,
)
from seed_models import SEED, file_digests
from tiny_configs import hf_llama_config, titan_llama3_config
from torch import nn

import shardinit
from shardinit.cli import run

pytestmark = [
    pytest.mark.clients,
    # transformers' capture of a tied Llama drops the head's own init (materialize warns
    # the same); DCP warns that it loads in one process.
    pytest.mark.filterwarnings("ignore:capture_init. 1 write.s. to tied parameter"),
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
]


def _materialized_llama(tied: bool) -> nn.Module:
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_llama_config(tied))
    return shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)


def _assert_same_state(loaded: nn.Module, expected: nn.Module) -> None:
    got, want = loaded.state_dict(), expected.state_dict()
    assert sorted(got) == sorted(want)
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype, key
        assert torch.equal(got[key], tensor), key


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_from_pretrained_equals_materialize(tmp_path: Path, tied: bool) -> None:
    hf_seed_checkpoint(hf_llama_config(tied), str(tmp_path), SEED)
    loaded = hf_load(str(tmp_path))
    _assert_same_state(loaded, _materialized_llama(tied))
    if tied:
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
        names = json.loads((tmp_path / "shardinit-manifest.json").read_text())["tensors"]
        assert names["lm_head.weight"]["alias_of"] == "model.embed_tokens.weight"


def test_command_writes_what_the_api_writes(tmp_path: Path) -> None:
    config = hf_llama_config(tied=True)
    config.save_pretrained(tmp_path / "config")
    hf_seed_checkpoint(config, str(tmp_path / "api"), SEED)
    argv = ["checkpoint", "--hf-config", str(tmp_path / "config" / "config.json")]
    argv += ["--out", str(tmp_path / "cli"), "--seed", str(SEED), "--no-progress"]
    assert run(argv) == 0
    written, expected = file_digests(tmp_path / "cli"), file_digests(tmp_path / "api")
    assert written.pop("config.json") and expected.pop("config.json")  # both saved one
    assert written == expected


def test_command_refuses_a_config_transformers_cannot_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "no-such-model"}))
    argv = ["checkpoint", "--hf-config", str(bad), "--out", str(tmp_path / "out")]
    assert run(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"shardinit checkpoint: --hf-config {bad}: transformers cannot")
    assert err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_torchtitan_initial_load_equals_materialize(tmp_path: Path, tied: bool) -> None:
    titan_seed_checkpoint(titan_llama3_config(tied=tied), str(tmp_path), SEED)
    with torch.device("meta"):
        loaded = titan_llama3_config(tied=tied).build()
    loaded = loaded.to_empty(device="cpu")
    titan_initial_load(loaded, str(tmp_path))
    with torch.device("meta"):
        expected = titan_llama3_config(tied=tied).build()
    expected = shardinit.materialize(expected, seed=SEED, init_fn=expected.init_weights)
    _assert_same_state(loaded, expected)


@pytest.mark.slow  # starts two writer processes that import transformers (about a minute)
def test_command_with_two_workers_writes_the_same_bytes(tmp_path: Path) -> None:
    config = hf_llama_config(tied=True)
    config.save_pretrained(tmp_path / "config")
    argv = ["checkpoint", "--hf-config", str(tmp_path / "config" / "config.json")]
    argv += ["--seed", str(SEED), "--max-shard-size", "100KB", "--no-progress"]
    assert run([*argv, "--out", str(tmp_path / "one")]) == 0
    assert run([*argv, "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    digests = file_digests(tmp_path / "one")
    assert len(digests) > 4  # several files, the index, the manifest, the config
    assert file_digests(tmp_path / "two") == digests


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_files_are_what_save_pretrained_writes(tmp_path: Path, tied: bool) -> None:
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_llama_config(tied))
    shardinit.save_seed_checkpoint(
        model, tmp_path / "seed", seed=SEED, init_fn=model.init_weights, max_shard_size="100KB"
    )
    materialized = _materialized_llama(tied)
    materialized.save_pretrained(tmp_path / "hf", max_shard_size="100KB")
    written, expected = file_digests(tmp_path / "seed"), file_digests(tmp_path / "hf")
    weights = sorted(name for name in expected if name.endswith(".safetensors"))
    assert len(weights) > 2, weights  # split into several files
    for name in [*weights, "model.safetensors.index.json"]:
        assert written[name] == expected[name], name


#: Runs one writer of ``shardinit checkpoint --workers N`` and adds to its result which
#: of the planning's modules it imported (the launcher returns each writer's result).
_WRITER_REPORTING_IMPORTS = """
import json, os, sys
from pathlib import Path
from shardinit.cli._checkpoint_worker import main
code = main(sys.argv[1:])
result = Path(sys.argv[sys.argv.index("--out") + 1], f"rank{os.environ['RANK']}.json")
report = json.loads(result.read_text())
planning = ("transformers", "shardinit._integration.capture", "shardinit._integration.materialize")
report["imported"] = [name for name in planning if name in sys.modules]
result.write_text(json.dumps(report))
sys.stdout.flush()
os._exit(code)
"""


@pytest.mark.slow  # starts two writer processes, one of which imports transformers
def test_only_writer_0_builds_the_model_and_the_others_write_its_plan(tmp_path: Path) -> None:
    from shardinit.cli._launch import launch

    config = hf_llama_config(tied=False)
    config.save_pretrained(tmp_path / "config")
    config_path = str(tmp_path / "config" / "config.json")
    argv = ["checkpoint", "--hf-config", config_path, "--seed", str(SEED)]
    argv += ["--max-shard-size", "100KB", "--no-progress", "--out", str(tmp_path / "one")]
    assert run(argv) == 0
    script = tmp_path / "writer.py"
    script.write_text(_WRITER_REPORTING_IMPORTS)
    (tmp_path / "progress").mkdir()
    forwarded = ["--hf-config", config_path, "--checkpoint-dir", str(tmp_path / "two")]
    forwarded += ["--format", "safetensors", "--seed", str(SEED), "--max-shard-size", "100000"]
    results = launch(str(script), 2, [*forwarded, "--progress-dir", str(tmp_path / "progress")])
    planning = [
        "transformers",
        "shardinit._integration.capture",
        "shardinit._integration.materialize",
    ]
    assert results == [{"error": None, "imported": planning}, {"error": None, "imported": []}]
    digests = file_digests(tmp_path / "one")
    assert len(digests) > 4  # several files: both writers wrote some
    assert file_digests(tmp_path / "two") == digests


@pytest.mark.slow  # starts two writer processes
def test_writer_0s_planning_error_is_every_writers_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "no-such-model"}))
    argv = ["checkpoint", "--hf-config", str(bad), "--out", str(tmp_path / "out")]
    assert run([*argv, "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"shardinit checkpoint: --hf-config {bad}: transformers cannot")
    assert err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
