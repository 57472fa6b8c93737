"""Init code that reaches the stand-ins from another thread (issue 37, item 1): every
operation on a parameter's or buffer's stand-in (or a view of one) from a thread other
than the capturing one is refused, naming the parameter, the thread and the line, before
anything is allocated; however the thread was started, even when the thread swallows the
error. Reading a stand-in's shape there is harmless and gives eager's result."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

SEED = 9
HERE = os.path.basename(__file__)
InitCode = Callable[[nn.Linear], object]


def _meta_linear() -> nn.Linear:
    with torch.device("meta"):
        return nn.Linear(16, 32)


def _in_thread(target: Callable[[], object], swallow: bool = True) -> None:
    """``target`` run in a new thread, joined; its error swallowed there, as init code
    that catches everything would (else ``Thread.run`` prints and drops it)."""

    def run() -> None:
        try:
            target()
        except Exception:
            if not swallow:
                raise

    thread = threading.Thread(target=run, name="init-helper")
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the refused thread did not end"


def _refused(code: InitCode, thread: str, *needles: str) -> str:
    lin = _meta_linear()
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))
    message = str(raised.value)
    for needle in ("parameter 'weight'", f"in thread '{thread}", *needles):
        assert needle in message, message
    assert lin.weight.is_meta and lin.bias.is_meta  # refused before allocation
    return message


def test_a_thread_that_zeroes_a_parameter_is_refused_even_if_it_swallows() -> None:
    message = _refused(
        lambda lin: _in_thread(lambda: nn.init.zeros_(lin.weight)), "init-helper", HERE
    )
    assert "zero_" in message


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_plain_thread_whose_error_thread_run_drops_is_refused() -> None:
    def code(lin: nn.Linear) -> None:
        thread = threading.Thread(target=lambda: lin.weight.data.normal_(), name="plain")
        thread.start()
        thread.join()

    _refused(code, "plain", HERE)


def test_thread_pool_map_is_refused() -> None:
    def code(lin: nn.Linear) -> None:
        with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="pool") as pool:
            list(pool.map(lambda p: nn.init.normal_(p, std=0.02), [lin.weight]))

    _refused(code, "pool", HERE)


def test_a_pool_made_before_the_capture_is_refused() -> None:
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="early") as pool:
        pool.submit(lambda: None).result()  # its thread runs before the capture starts

        def code(lin: nn.Linear) -> None:
            pool.submit(lambda: nn.init.uniform_(lin.weight, -1, 1)).result()

        _refused(code, "early", HERE)


def test_asyncio_to_thread_is_refused() -> None:
    _refused(lambda lin: asyncio.run(asyncio.to_thread(nn.init.ones_, lin.weight)), "asyncio")


def test_asyncio_run_of_a_coroutine_awaiting_to_thread_is_refused() -> None:
    async def init(lin: nn.Linear) -> None:
        await asyncio.to_thread(lambda: lin.weight.data[0].fill_(1.0))

    _refused(lambda lin: asyncio.run(init(lin)), "asyncio", HERE)


def test_a_view_made_in_the_capturing_thread_is_refused_in_another() -> None:
    def code(lin: nn.Linear) -> None:
        rows = lin.weight.data[2:4]  # a view handed on to the thread
        _in_thread(lambda: rows.fill_(1.0))

    _refused(code, "init-helper", "fill_")


def test_with_torch_functions_disabled_the_dispatch_still_refuses() -> None:
    def fill(lin: nn.Linear) -> None:
        # (grad mode is per thread too: eager torch refuses an in-place write to a leaf
        # that requires grad outside no_grad, before any dispatch)
        with torch.no_grad(), torch._C.DisableTorchFunction():
            lin.weight.fill_(2.0)

    _refused(lambda lin: _in_thread(lambda: fill(lin)), "init-helper", "fill_")


def test_a_device_question_in_another_thread_is_refused() -> None:
    # The capturing thread's stand-in answers the run-time device; another's would say
    # meta, and a guard would skip its init code silently.
    def guarded(lin: nn.Linear) -> None:
        if not lin.weight.is_meta:
            nn.init.zeros_(lin.weight)

    _refused(lambda lin: _in_thread(lambda: guarded(lin)), "init-helper", "is_meta")


def test_a_buffer_written_in_another_thread_is_refused() -> None:
    with torch.device("meta"):
        model = nn.BatchNorm1d(4)
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.materialize(
            model, seed=SEED, init_fn=lambda: _in_thread(lambda: model.running_var.fill_(2.0))
        )
    assert "buffer 'running_var'" in str(raised.value) and "init-helper" in str(raised.value)
    assert model.running_var.is_meta


def test_reading_the_shape_in_another_thread_is_eagers() -> None:
    def code(lin: nn.Linear) -> None:
        shapes: list[torch.Size] = []
        _in_thread(lambda: shapes.append(lin.weight.shape), swallow=False)
        (rows, cols) = shapes[0]
        nn.init.constant_(lin.weight, float(rows * 100 + cols))

    lin = _meta_linear()
    shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))
    eager = nn.Linear(16, 32)
    with torch.no_grad():
        code(eager)
    assert torch.equal(lin.weight, eager.weight) and lin.weight[0, 0].item() == 3216.0


def test_after_the_capture_the_stand_ins_views_are_plain_again() -> None:
    # A view init code kept past the capture no longer refuses anything (no capture).
    kept: list[torch.Tensor] = []
    lin = _meta_linear()
    shardinit.capture_init(lin, lambda: kept.append(lin.weight.data))
    _in_thread(lambda: kept[0].zero_(), swallow=False)
    assert type(lin.weight) is nn.Parameter


def test_an_error_init_code_raises_after_a_refusal_is_the_refusal() -> None:
    def code(lin: nn.Linear) -> None:
        results: list[torch.Tensor] = []
        _in_thread(lambda: results.append(nn.init.zeros_(lin.weight)))
        results[0].sum()  # IndexError: the refused thread gave nothing back

    lin = _meta_linear()
    with pytest.raises(shardinit.UnsupportedInitOpError, match="in thread 'init-helper'") as raised:
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))
    assert isinstance(raised.value.__cause__, IndexError) and lin.weight.is_meta


def test_views_and_shapes_in_another_thread_are_harmless() -> None:
    def code(lin: nn.Linear) -> None:
        shapes: list[tuple[int, ...]] = []
        _in_thread(lambda: shapes.append(tuple(lin.weight.data[1:3].t().shape)), swallow=False)
        nn.init.constant_(lin.weight, float(sum(shapes[0])))

    lin = _meta_linear()
    shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))
    assert torch.equal(lin.weight, torch.full((32, 16), 18.0))


def test_the_capture_hands_back_plain_tensors() -> None:
    # The stand-ins' subclass stays inside the capture: the model's parameters and the
    # buffer values it keeps are plain torch tensors.
    with torch.device("meta"):
        model = nn.BatchNorm1d(3)
    captured = shardinit.capture_init(
        model, lambda: (model.running_mean.fill_(0.5), nn.init.ones_(model.weight))
    )
    value = captured.buffer_values["running_mean"]
    assert type(value) is torch.Tensor and torch.equal(value, torch.full((3,), 0.5))
    assert type(model.weight) is nn.Parameter and type(model.running_mean) is torch.Tensor
