"""The capture's op tables: what each torch name is, and what it computes.

The lowest wing of the capture. It knows torch's names, never a tracked tensor:
:mod:`.translations` turns init calls into fills, :mod:`.pointwise` and
:mod:`.composites` turn elementwise and composite ops into program steps,
:mod:`.tables` says which route each name takes, and :mod:`.torchvalues` computes
the values of temporaries torch's own kernels would give. Imports nothing of the
other wings.
"""
