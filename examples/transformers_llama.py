"""A transformers Llama built on the meta device, sharded with FSDP2, filled by shardinit
with transformers' own init code.

Run on CPU with two processes (gloo):

    torchrun --nproc-per-node 2 examples/transformers_llama.py

The model comes from a small config (nothing is downloaded). ``model.init_weights`` is
transformers' own: its guarded ``torch.nn.init`` wrappers, the rotary buffers, then
``tie_weights``. shardinit runs it once on stand-ins, records what it does to each
parameter and replays that shard-locally (docs/capturing-init.md). The tied ``lm_head``
takes the embedding's init, as transformers' CPU init gives it (a warning names the
``lm_head`` write that is dropped). The printed checksum is the same for every world size.
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import LlamaConfig, LlamaForCausalLM

import shardinit

CONFIG = LlamaConfig(
    hidden_size=128, intermediate_size=344, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=1000, max_position_embeddings=128, pad_token_id=0,
    tie_word_embeddings=True,
)  # fmt: skip


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    with torch.device("meta"):
        model = LlamaForCausalLM(CONFIG)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)

    with warnings.catch_warnings():
        if rank != 0:
            warnings.simplefilter("ignore")  # one copy of the dropped-tie-write warning
        shardinit.materialize(model, seed=1234, init_fn=model.init_weights)

    # Gathering is only for the printout (a collective: every rank calls it).
    checksum = sum(p.full_tensor().double().sum().item() for p in model.parameters())
    # Read before the step: at world 1 full_tensor() is the parameter itself, not a copy.
    padding_zero = not model.model.embed_tokens.weight.full_tensor()[CONFIG.pad_token_id].any()

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(
        0, CONFIG.vocab_size, (2, 33), generator=torch.Generator().manual_seed(rank)
    )
    loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    optimizer.step()

    if rank == 0:
        print(f"world {world}: initial weights checksum {checksum:.10f}, "
              f"padding row zero: {padding_zero}, loss {loss.item():.4f}")  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
