"""Type stub of the compiled extension ``shardinit._core`` (checked by stubtest)."""

from typing import Any, Final

__all__ = [
    "STREAM_FORMAT_VERSION",
    "InternalError",
    "ShapeTooLargeError",
    "ShardInitError",
    "__version__",
    "_panic_for_test",
    "backend",
    "chunk_range",
    "fill_box",
    "fill_flat",
    "key64",
    "phi",
    "phi_inv",
    "stream_words",
]

__version__: Final[str]
backend: Final[str]
STREAM_FORMAT_VERSION: Final[int]

class ShardInitError(ValueError): ...
class ShapeTooLargeError(ShardInitError): ...
class InternalError(RuntimeError): ...

def key64(seed: int, name: str) -> int: ...
def stream_words(key: int, start: int, out: Any) -> None: ...
def fill_box(
    key: int,
    global_shape: list[int],
    init_kind: str,
    init_params: tuple[float, float, float, float],
    dtype: str,
    region: list[tuple[int, int]],
    out_offset: int | None,
    out: Any,
    threads: int = 0,
) -> None: ...
def fill_flat(
    key: int,
    global_shape: list[int],
    init_kind: str,
    init_params: tuple[float, float, float, float],
    dtype: str,
    start: int,
    out: Any,
    threads: int = 0,
) -> None: ...
def chunk_range(size: int, rank: int, world: int) -> tuple[int, int]: ...
def phi(x: float) -> float: ...
def phi_inv(p: float, q: float) -> float: ...
def _panic_for_test(message: str) -> None: ...
