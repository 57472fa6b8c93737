"""Choosing the CUDA fill path (``set_cuda_backend`` / ``SHARDINIT_CUDA_BACKEND``) and
every bad-input row of docs/errors.md's CUDA backend table, with Triton, ROCm and the
CUDA runtime mocked away (no GPU needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator

import pytest
import torch

import shardinit
from shardinit import init
from shardinit._cuda import backend

CUDA0 = torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def fresh_backend_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts from the defaults: no setting, no environment value, no cached
    availability, no warning given yet."""
    monkeypatch.delenv(backend.ENV_VAR, raising=False)
    monkeypatch.setattr(backend, "_setting", None)
    monkeypatch.setattr(backend, "_warned", False)
    backend.kernel_unavailable_reason.cache_clear()
    yield
    backend.kernel_unavailable_reason.cache_clear()


def make_unavailable(monkeypatch: pytest.MonkeyPatch, why: str) -> str:
    """Makes the kernel unavailable for the reason ``why``; returns what the error or
    warning must say."""
    if why == "missing":
        monkeypatch.setitem(sys.modules, "triton", None)  # import raises ImportError
        return "triton cannot be imported"
    if why == "too_old":
        monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__="3.5.1"))
        return "triton 3.5 is older than 3.6"
    if why == "rocm":
        monkeypatch.setattr(torch.version, "hip", "6.4.0")
        return "ROCm"
    assert why == "cannot_start"
    pytest.importorskip("triton")
    from shardinit._cuda import launch

    def no_compiler(device: torch.device) -> bool:
        raise RuntimeError("Failed to compile cuda_utils.c: gcc: not found")

    monkeypatch.setattr(launch, "self_check", no_compiler)
    return "did not start (RuntimeError: Failed to compile cuda_utils.c: gcc: not found)"


REASONS = ["missing", "too_old", "rocm", "cannot_start"]


def test_default_is_auto_and_set_get_round_trip() -> None:
    assert shardinit.get_cuda_backend() == "auto"
    for name in backend.BACKENDS:
        shardinit.set_cuda_backend(name)
        assert shardinit.get_cuda_backend() == name
    shardinit.set_cuda_backend(None)
    assert shardinit.get_cuda_backend() == "auto"


def test_environment_sets_the_initial_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(backend.ENV_VAR, "host")
    assert shardinit.get_cuda_backend() == "host"
    shardinit.set_cuda_backend("triton")  # the call wins over the environment
    assert shardinit.get_cuda_backend() == "triton"


def test_non_str_backend_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"^backend must be a str or None, got int 3$"):
        shardinit.set_cuda_backend(3)  # type: ignore[arg-type]


def test_unknown_backend_lists_the_names() -> None:
    with pytest.raises(shardinit.ShardInitError, match=r"'auto', 'triton', 'host', got 'gpu'"):
        shardinit.set_cuda_backend("gpu")
    assert shardinit.get_cuda_backend() == "auto"  # unchanged


def test_bad_environment_value_fails_at_the_first_cuda_fill_not_at_import() -> None:
    env = {**os.environ, backend.ENV_VAR: "gpu"}
    code = (
        "import sys, torch, shardinit\n"
        "from shardinit._cuda import backend\n"
        "assert 'triton' not in sys.modules\n"
        "try:\n"
        "    backend.use_device_kernel(torch.device('cuda', 0))\n"
        "except shardinit.ShardInitError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    message = done.stdout.strip()
    assert "SHARDINIT_CUDA_BACKEND" in message and "'gpu'" in message, message
    assert "'auto', 'triton', 'host'" in message, message


@pytest.mark.parametrize("why", REASONS)
def test_forced_triton_unavailable_names_the_reason(
    monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    expected = make_unavailable(monkeypatch, why)
    shardinit.set_cuda_backend("triton")
    with pytest.raises(shardinit.ShardInitError) as caught:
        backend.use_device_kernel(CUDA0)
    message = str(caught.value)
    assert expected in message, message
    assert "'auto'" in message and "'host'" in message, message


@pytest.mark.parametrize("why", REASONS)
def test_auto_unavailable_falls_back_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    expected = make_unavailable(monkeypatch, why)
    with pytest.warns(backend.CudaBackendWarning, match="unavailable") as caught:
        assert backend.use_device_kernel(CUDA0) is False
    assert len(caught) == 1 and expected in str(caught[0].message)
    assert issubclass(backend.CudaBackendWarning, UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        assert backend.use_device_kernel(CUDA0) is False
        assert backend.use_device_kernel(torch.device("cuda", 1)) is False


def test_host_never_imports_triton() -> None:
    code = (
        "import sys, torch, shardinit\n"
        "from shardinit._cuda import backend\n"
        "shardinit.set_cuda_backend('host')\n"
        "assert backend.use_device_kernel(torch.device('cuda', 0)) is False\n"
        "assert 'triton' not in sys.modules, 'triton imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_available_kernel_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "_triton_version", lambda: (3, 9))
    monkeypatch.setattr(backend, "_runtime_reason", lambda device: None)
    for name, expected in (("auto", True), ("triton", True), ("host", False)):
        shardinit.set_cuda_backend(name)
        assert backend.use_device_kernel(CUDA0) is expected


def bad_calls(spec: shardinit.ParamSpec) -> list[tuple[str, object]]:
    """Calls with a bad spec, box, range or out, each run under every backend."""
    return [
        ("box", lambda: shardinit.init_box(spec, [(0, 5), (0, 3)])),
        ("box_dims", lambda: shardinit.init_box(spec, [(0, 2)])),
        ("flat_range", lambda: shardinit.init_flat(spec, 5, 3)),
        ("rank", lambda: shardinit.init_shard(spec, 3, 3)),
        ("out_shape", lambda: shardinit.init_box(spec, [(0, 2), (0, 3)], out=torch.empty(3, 2))),
        (
            "out_dtype",
            lambda: shardinit.init_flat(spec, 0, 4, out=torch.empty(4, dtype=torch.float64)),
        ),
        ("out_meta", lambda: shardinit.init_flat(spec, 0, 4, out=torch.empty(4, device="meta"))),
        (
            "out_strided",
            lambda: shardinit.init_box(spec, [(0, 3), (0, 3)], out=torch.empty(3, 6)[:, ::2]),
        ),
        ("cuda_absent", lambda: shardinit.init_box(spec, [(0, 2), (0, 3)], device="cuda")),
        ("full_cuda_absent", lambda: shardinit.full(spec, device="cuda:0")),
    ]


def outcome(call: object) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError)) as caught:
        call()  # type: ignore[operator]
    return type(caught.value), str(caught.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CUDA-absent errors")
def test_bad_input_raises_todays_error_whatever_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = shardinit.ParamSpec("w", (4, 3), torch.float32, init.normal(), seed=0)
    shardinit.set_cuda_backend("host")
    expected = {name: outcome(call) for name, call in bad_calls(spec)}
    make_unavailable(monkeypatch, "missing")
    for setting in ("triton", "auto"):
        shardinit.set_cuda_backend(setting)
        assert {name: outcome(call) for name, call in bad_calls(spec)} == expected
    shardinit.set_cuda_backend(None)
    monkeypatch.setenv(backend.ENV_VAR, "gpu")  # even a bad environment value
    assert {name: outcome(call) for name, call in bad_calls(spec)} == expected
