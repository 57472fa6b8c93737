"""A Megatron-core GPT (local spec: GLU MLP, grouped-query attention) filled by shardinit.

Run on CPU with two processes (gloo), tensor parallel 2 or pipeline parallel 2:

    torchrun --nproc_per_node 2 examples/megatron_gpt.py --tp 2
    torchrun --nproc_per_node 2 examples/megatron_gpt.py --pp 2

Megatron-core's CPU init allocates a full fp32 master of every layer on every TP rank,
and its GPU init seeds per TP rank and pipeline stage, so the weights depend on the
layout. Here each rank generates exactly its partitions from stream v1 (no full tensor,
no communication), with Megatron's own init methods. The printed model digest is the
same for every --tp/--pp and equals the single-process run (the TP partitions are
gathered for that printout only).
"""

from __future__ import annotations

import argparse
import os
import warnings

import torch
import torch.distributed as dist

import shardinit
import shardinit.megatron


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # Megatron warns that Apex/TE are not installed
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(args.tp, args.pp)
    config = TransformerConfig(
        num_layers=4,
        hidden_size=64,
        num_attention_heads=4,
        num_query_groups=2,
        ffn_hidden_size=128,
        gated_linear_unit=True,
        add_bias_linear=False,
        use_cpu_initialization=True,
        perform_initialization=True,  # inside deferred_init: partitions are only tagged
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        pipeline_dtype=torch.float32,
    )
    # megatron-core 0.16 does not tag its weights' partitions under
    # perform_initialization=False; deferred_init tags them and generates nothing.
    with shardinit.megatron.deferred_init():
        model = GPTModel(
            config,
            get_gpt_layer_local_spec(),
            vocab_size=512,
            max_sequence_length=32,
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=False,
        )
    shardinit.megatron.materialize(model, seed=1234, config=config)

    # One fingerprint per canonical parameter (TP partitions gathered for the printout).
    names = shardinit.megatron.partition_names(model)
    tp_group = parallel_state.get_tensor_model_parallel_group()
    local = {}
    for raw, param in model.named_parameters():
        if getattr(param, "tensor_model_parallel", False):
            shape = list(param.shape)
            shape[param.partition_dim] *= args.tp
            pieces = [torch.empty_like(param) for _ in range(args.tp)]
            dist.all_gather(pieces, param.detach(), group=tp_group)  # for the printout only
            full = torch.cat(pieces, dim=param.partition_dim)
            if param.partition_stride > 1:  # undo Megatron's strided split
                full = _unstride(full, param.partition_dim, param.partition_stride, args.tp)
            local[names[raw]] = shardinit.fingerprint(full)
        else:
            local[names[raw]] = shardinit.fingerprint(param.detach())
    gathered: list[dict[str, str]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, local)
    if dist.get_rank() == 0:
        merged = {name: digest for part in gathered for name, digest in part.items()}
        print(
            f"tp={args.tp} pp={args.pp}: {len(merged)} parameters, model digest "
            f"{shardinit.model_digest(merged)}"
        )
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


def _unstride(gathered: torch.Tensor, dim: int, stride: int, world: int) -> torch.Tensor:
    """Megatron's stride split puts pieces r, r + world, ... on rank r: reorder the rank
    concatenation back into global order."""
    pieces = torch.chunk(gathered, world * stride, dim=dim)  # rank-major
    order = [rank * stride + j for j in range(stride) for rank in range(world)]
    return torch.cat([pieces[i] for i in order], dim=dim)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
