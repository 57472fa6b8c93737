"""A CUDA device stood in by CPU tensors, for the host path to a CUDA tensor
(``_host.fill_via_pinned``: bounded pinned buffers, one chunk at a time) on a machine
without a GPU.

* :class:`OnCuda` is a CPU tensor that says it is on ``cuda:0`` (the fill dispatch picks
  its path by ``out.device``). Its asynchronous copies (``copy_(..., non_blocking=True)``)
  are queued on the current :class:`FakeStream` and run only when an event recorded after
  them is synchronized, as a real stream may run them late: a pinned buffer written
  again before its copy's event was waited for gives wrong values here too.
* :func:`stand_in` mocks the runtime calls of the host path (``torch.cuda.device``,
  ``current_stream``, ``Event``) and the pinned allocator (``_host.pinned_empty``, the
  one place pinned buffers are made), selects the host path, and returns the byte size
  of every buffer allocated.

The device kernel is not involved: the backend is ``"host"`` while the mock lasts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch

from shardinit import _host
from shardinit._cuda import backend


class FakeStream:
    """Copies queued in order; :meth:`run_until` runs them up to a recorded mark."""

    def __init__(self) -> None:
        self.queued: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.ran = 0

    def run_until(self, mark: int) -> None:
        while self.ran < mark:
            destination, source = self.queued[self.ran]
            torch.Tensor.copy_(destination.as_subclass(torch.Tensor), source)
            self.ran += 1


class FakeEvent:
    def __init__(self) -> None:
        self.stream: FakeStream | None = None
        self.mark = 0

    def record(self, stream: FakeStream) -> None:
        self.stream, self.mark = stream, len(stream.queued)

    def synchronize(self) -> None:
        assert self.stream is not None, "an event waited for before it was recorded"
        self.stream.run_until(self.mark)


class OnCuda(torch.Tensor):
    """A CPU tensor that says it is on cuda:0; its non-blocking copies go to ``stream``."""

    stream: ClassVar[FakeStream | None] = None

    @property  # type: ignore[override]
    def device(self) -> torch.device:
        return torch.device("cuda", 0)

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.copy_ and kwargs.get("non_blocking") and cls.stream is not None:
            destination, source = args
            cls.stream.queued.append((destination, source))
            return destination
        return super().__torch_function__(func, types, args, kwargs)


def stand_in(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Mocks the CUDA runtime of the host path (see the module's docstring); the byte
    sizes of the pinned buffers allocated from now on."""
    sizes: list[int] = []

    def pinned_empty(numel: int, dtype: torch.dtype) -> torch.Tensor:
        buffer = torch.empty(numel, dtype=dtype)
        sizes.append(buffer.numel() * buffer.element_size())
        return buffer

    stream = FakeStream()
    monkeypatch.setattr(_host, "pinned_empty", pinned_empty)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: stream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(OnCuda, "stream", stream)
    monkeypatch.setattr(backend, "_setting", "host")  # set_cuda_backend("host"), undone
    return sizes


def on_cuda(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (CPU) standing in for a CUDA tensor."""
    return tensor.as_subclass(OnCuda)


def on_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """What a stand-in holds, as a plain CPU tensor."""
    return tensor.as_subclass(torch.Tensor)
