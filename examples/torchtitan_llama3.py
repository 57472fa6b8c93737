"""torchtitan's Llama3 (fused ``wqkv``, its default) built on the meta device, sharded
with FSDP2, filled by shardinit with torchtitan's own init code.

Run on CPU with two processes (gloo):

    torchrun --nproc-per-node 2 examples/torchtitan_llama3.py

The model is built from a small config with torchtitan's own per-layer init tables.
``model.init_weights`` initializes the fused ``wqkv`` through temporaries (q, k and v made
with ``new_empty``, filled with ``trunc_normal_``, concatenated and copied in): shardinit
gives each row of ``wqkv`` the initializer of the part it comes from, with values from the
parameter's own stream, so each rank fills only its rows (docs/capturing-init.md). The
printed checksum is the same for every world size.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.llama3 import (
    _EMBEDDING_INIT,
    _NORM_INIT,
    Llama3Model,
    _build_llama3_layers,
    _output_linear_init,
)

import shardinit

DIM, LAYERS, HEADS, VOCAB = 128, 4, 4, 1000


def build_config() -> Llama3Model.Config:
    # As torchtitan's own "debugmodel" flavor, smaller.
    return Llama3Model.Config(
        dim=DIM,
        vocab_size=VOCAB,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM,
                                        param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB,
                              param_init=_output_linear_init(DIM)),
        layers=_build_llama3_layers(
            n_layers=LAYERS, dim=DIM, n_heads=HEADS, n_kv_heads=2, hidden_dim=344,
            attn_backend="flex",
            rope=ComplexRoPE.Config(dim=DIM // HEADS, max_seq_len=128, theta=500000),
        ),
    )  # fmt: skip


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    with torch.device("meta"):
        model = build_config().build()
    for layer in model.layers.values():
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)

    shardinit.materialize(model, seed=1234, init_fn=model.init_weights)

    # Gathering is only for the printout (a collective: every rank calls it).
    checksum = sum(p.full_tensor().double().sum().item() for p in model.parameters())
    if rank == 0:
        print(f"world {world}: initial weights checksum {checksum:.10f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
