"""A Llama-style model built on the meta device, sharded with FSDP2, filled by shardinit.

Run on CPU with two processes (gloo):

    torchrun --nproc_per_node 2 examples/fsdp2_llama.py

The model is the project's one Llama (``shardinit/cli/transformer.py``, the model of
``shardinit demo``), with torchtitan's own ``init_weights`` (trunc_normal_ with a
per-layer std): shardinit runs it once on the meta device, records what it does to each
parameter, and replays it shard-locally (docs/capturing-init.md). Every rank generates
only its own shards; the gathered model is bit-identical for any world size (compare the
printed checksum with --nproc_per_node 1, 3, ...).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit
from shardinit.cli.models import LlamaConfig
from shardinit.cli.transformer import Transformer

CONFIG = LlamaConfig(dim=128, n_layers=4, n_heads=4, n_kv_heads=4, ffn_hidden=344, vocab_size=1000)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    with torch.device("meta"):
        model = Transformer(CONFIG)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)

    # One line: the model's own init_weights, captured on meta and replayed shard-locally;
    # every rank fills exactly its shards (no full tensor, no communication).
    shardinit.materialize(model, seed=1234, init_fn=model.init_weights)

    # Gathering is only for the printout (a collective: every rank calls it).
    checksum = sum(p.full_tensor().double().sum().item() for p in model.parameters())

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, CONFIG.vocab_size, (2, 33), generator=generator)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()

    if rank == 0:
        # The checksum of the initial weights is the same for every world size.
        print(f"world {world}: initial weights checksum {checksum:.10f}, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
