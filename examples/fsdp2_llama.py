"""A Llama-style model built on the meta device, sharded with FSDP2, filled by shardinit.

Run on CPU with two processes (gloo):

    torchrun --nproc_per_node 2 examples/fsdp2_llama.py

The model keeps its own torchtitan-style ``init_weights`` (trunc_normal_ with a
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
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def init_weights(self, init_std: float) -> None:
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = (
            w(x).view(batch, seq, self.n_heads, -1).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, dim))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def init_weights(self, init_std: float) -> None:
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, dim: int, n_heads: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = Attention(dim, n_heads)
        self.ffn_norm = nn.RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)
        self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5

    def init_weights(self) -> None:
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab: int, dim: int, n_layers: int, n_heads: int, hidden: int) -> None:
        super().__init__()
        self.dim = dim
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            TransformerBlock(i, dim, n_heads, hidden) for i in range(n_layers)
        )
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def init_weights(self) -> None:
        """torchtitan's Llama init, unchanged: shardinit captures and replays it."""
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers:
            assert isinstance(layer, TransformerBlock)
            layer.init_weights()
        self.norm.reset_parameters()
        final_out_std = self.dim**-0.5
        cutoff_factor = 3
        nn.init.trunc_normal_(
            self.output.weight,
            mean=0.0,
            std=final_out_std,
            a=-cutoff_factor * final_out_std,
            b=cutoff_factor * final_out_std,
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    n_layers = 4
    with torch.device("meta"):
        model = Llama(vocab=1000, dim=128, n_layers=n_layers, n_heads=4, hidden=344)
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
    tokens = torch.randint(0, 1000, (2, 33), generator=generator)
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
