"""A model built under DeepSpeed ZeRO-3 and filled by shardinit, then trained one step.

Run on CPU with two processes (gloo):

    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 examples/deepspeed_zero3.py

(DeepSpeed's CPU backend JIT-compiles a small comm op with g++ and ninja on its first
run; ninja must be on PATH, e.g. the venv's bin/.)

``deepspeed.zero.Init`` builds every module in full on every rank and broadcasts each
parameter from rank 0. ``shardinit.deepspeed.Init`` skips both: parameters are
partitioned untouched, and ``shardinit.materialize`` writes each rank's padded flat
partition (padding zero), here with the model's own HF-style ``_init_weights``, captured
once on a meta copy. The printed fingerprint digest is computed from the partitions in
place and is the same for any --nproc_per_node.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn

import shardinit
import shardinit.deepspeed

DS_CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 3},
    "zero_allow_untested_optimizer": True,
}


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 96, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
            )
            for _ in range(layers)
        )
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)

    def _init_weights(self, module: nn.Module) -> None:  # as transformers models write it
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()


def main() -> None:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()

    with torch.device("meta"):
        meta = TinyLM()
    captured = shardinit.capture_init(meta, lambda: meta.apply(meta._init_weights))

    with shardinit.deepspeed.Init(config_dict_or_path=DS_CONFIG, remote_device="cpu"):
        model = TinyLM()  # partitioned as built: no full init, no broadcast
    shardinit.materialize(model, seed=1234, init_fn=captured)  # before deepspeed.initialize
    digest = shardinit.model_digest(shardinit.fingerprint_model(model))

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=DS_CONFIG)
    tokens = torch.randint(1, 1000, (2, 16), generator=torch.Generator().manual_seed(rank))
    logits = engine(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, 1000), tokens[:, 1:].reshape(-1))
    engine.backward(loss)
    engine.step()
    if rank == 0:
        world = torch.distributed.get_world_size()
        print(f"world {world}: initial model digest {digest}, loss after init {loss.item():.4f}")
    # An orderly end: every rank done with gloo before any destroys its group. A rank that
    # exits with the group (and its gloo threads) still alive can abort in teardown
    # ("terminate called without an active exception", seen once in CI at world 2).
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
