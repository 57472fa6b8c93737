"""A Llama-style model built on the meta device, sharded with FSDP2, filled by shardinit.

Run on CPU with two processes (gloo):

    torchrun --nproc_per_node 2 examples/fsdp2_llama.py

The model is a small Llama-style decoder written here in plain torch.nn, as your own
model would be, with torchtitan's ``init_weights`` (trunc_normal_ with a per-layer std):
shardinit runs it once on the meta device, records what it does to each parameter, and
replays it shard-locally (docs/capturing-init.md). Every rank generates only its own
shards; the gathered model is bit-identical for any world size (compare the printed
checksum with --nproc_per_node 1, 3, ...).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit

DIM, LAYERS, HEADS, FFN_HIDDEN, VOCAB = 128, 4, 4, 344, 1000


class Attention(nn.Module):
    """Causal self-attention (no rotary embedding: the init is what this example shows)."""

    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))

    def init_weights(self, init_std: float) -> None:
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = (
            w(x).view(batch, seq, HEADS, -1).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, DIM))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(DIM, FFN_HIDDEN, bias=False)
        self.w2 = nn.Linear(FFN_HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN_HIDDEN, bias=False)

    def init_weights(self, init_std: float) -> None:
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """Pre-norm attention and feed-forward; torchtitan scales the init std by depth."""

    def __init__(self, layer_id: int) -> None:
        super().__init__()
        self.attention, self.feed_forward = Attention(), FeedForward()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(DIM, eps=1e-5), nn.RMSNorm(DIM, eps=1e-5)
        self.init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5

    def init_weights(self) -> None:
        self.attention_norm.reset_parameters()
        self.ffn_norm.reset_parameters()
        self.attention.init_weights(self.init_std)
        self.feed_forward.init_weights(self.init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """Embedding, blocks, final norm and an untied output head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block(layer_id) for layer_id in range(LAYERS))
        self.norm = nn.RMSNorm(DIM, eps=1e-5)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def init_weights(self) -> None:
        """torchtitan's Llama init: a standard normal embedding, depth-scaled truncated
        normals in the blocks, and an output head cut off at 3 std."""
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers:
            layer.init_weights()
        self.norm.reset_parameters()
        std = DIM**-0.5
        nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    with torch.device("meta"):
        model = Llama()
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
    tokens = torch.randint(0, VOCAB, (2, 33), generator=generator)
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
