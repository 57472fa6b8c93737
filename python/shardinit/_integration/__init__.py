"""The internal integration layer: everything that walks ``nn.Module``s (materialize,
DTensor placements, FSDP1 flat shards, torch.nn defaults, fingerprints).

Nothing here is public API: :mod:`shardinit` re-exports what users call.
"""
