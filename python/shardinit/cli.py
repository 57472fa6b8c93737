"""The ``shardinit`` command line: ``demo``, ``plan``, ``fingerprint``.

Exit status: 0 success; 1 the check failed (fingerprints differ, a worker failed, an
``--expect`` mismatch); 2 bad arguments (one-line error and usage on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from .errors import ShardInitError
from .models import DEFAULT_MODEL, MODELS, describe

__all__ = ["run"]

_MAX_SEED = 2**64 - 1


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error, the usage, and exit status 2 (no traceback)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        first_line = message.strip().splitlines()[0] if message.strip() else "invalid usage"
        self.exit(2, f"{self.prog}: error: {first_line}\n")


def _seed(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seed must be an integer, got {text!r}") from None
    if not 0 <= value <= _MAX_SEED:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2^64), got {value}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _worlds(text: str) -> list[int]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected world sizes like 1,2,4, got {text!r}")
    worlds = [_positive(part) for part in parts]
    if len(set(worlds)) != len(worlds):
        raise argparse.ArgumentTypeError(f"world sizes repeat in {text!r}")
    return worlds


def _model_choice(text: str) -> str:
    if text not in MODELS:
        raise argparse.ArgumentTypeError(
            f"unknown model {text!r} (choose from {', '.join(MODELS)})"
        )
    return text


def _digest(text: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{16}", text):
        raise argparse.ArgumentTypeError(f"expected 16 lowercase hex digits, got {text!r}")
    return text


def _build_parser() -> tuple[_Parser, dict[str, _Parser]]:
    parser = _Parser(
        prog="shardinit",
        description="Deterministic, shard-local initialization of sharded torch models.",
    )
    commands = parser.add_subparsers(
        dest="command", metavar="{demo,plan,fingerprint}", parser_class=_Parser
    )
    commands.required = True
    models_help = f"built-in Llama-style config: {', '.join(MODELS)}"

    demo = commands.add_parser(
        "demo",
        help="FSDP2 on CPU processes at several world sizes: shardinit vs torch's own init",
        description="Materializes a built-in model with FSDP2 (gloo, CPU) at each world size "
        "with shardinit, compares fingerprints across world sizes, then shows torch's own "
        "path (reset_parameters on the shards) on the same model. Exit 0 only if shardinit's "
        "fingerprints agree.",
    )
    demo.add_argument("--model", type=_model_choice, default=DEFAULT_MODEL, help=models_help)
    demo.add_argument(
        "--worlds", type=_worlds, default=None, help="world sizes, default 1,2,4 (tp: tp,2*tp)"
    )
    demo.add_argument("--seed", type=_seed, default=0, help="seed in [0, 2^64), default 0")
    demo.add_argument("--tp", type=_positive, default=1, help="tensor-parallel degree")
    demo.add_argument("--no-torch", action="store_true", help="skip torch's own path")
    demo.add_argument("--timeout", type=_positive, default=600, help="seconds per world size")

    plan = commands.add_parser(
        "plan",
        help="per-rank regions, bytes and estimated peak memory; generates nothing",
        description="Per-rank local regions under FSDP2 (+TP), bytes per rank and estimated "
        "peak parameter memory per rank for each initialization strategy. No weights are "
        "generated.",
    )
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=_model_choice, help=models_help)
    source.add_argument(
        "--shapes",
        metavar="FILE",
        help='JSON file: {"name": [d0, d1, ...]} or {"name": {"shape": [...], "dtype": ...}}',
    )
    plan.add_argument("--world", type=_positive, required=True, help="number of ranks")
    plan.add_argument("--tp", type=_positive, default=1, help="tensor-parallel degree")
    plan.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16", "float64"),
        default="float32",
        help="parameter dtype (default float32)",
    )
    plan.add_argument("--all-ranks", action="store_true", help="list regions of every rank")

    fp = commands.add_parser(
        "fingerprint",
        help="fingerprints of a built-in model's shardinit initialization",
        description="Materializes a built-in model with shardinit (FSDP2 on --world CPU "
        "processes, or in this process for --world 1) and prints each parameter's "
        "layout-independent fingerprint and the model digest, combined across ranks "
        "without gathering.",
    )
    fp.add_argument("--model", type=_model_choice, default="tiny", help=models_help)
    fp.add_argument("--seed", type=_seed, default=0, help="seed in [0, 2^64), default 0")
    fp.add_argument("--world", type=_positive, default=1, help="number of ranks (default 1)")
    fp.add_argument("--tp", type=_positive, default=1, help="tensor-parallel degree")
    fp.add_argument("--json", action="store_true", help="print JSON")
    fp.add_argument(
        "--expect", type=_digest, help="exit 1 unless the model digest equals this value"
    )
    return parser, {"demo": demo, "plan": plan, "fingerprint": fp}


# ------------------------------------------------------------------------------ helpers


def _human(nbytes: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{int(nbytes)} B"


def _say(text: str = "") -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------- demo


def _run_world(
    model: str, world: int, seed: int, tp: int, torch_path: bool, timeout: float
) -> list[dict[str, Any]]:
    from ._launch import launch

    args = ["--model", model, "--seed", str(seed), "--tp", str(tp)]
    if torch_path:
        args.append("--torch-path")
    return launch(
        "shardinit._demo_worker",
        world,
        args,
        timeout=timeout,
        on_line=lambda line: _say(f"      rank 0: {line}"),
    )


def _copies(results: list[dict[str, Any]], names: list[str]) -> tuple[int, int]:
    """(params of ``names`` whose shards are identical on all ranks, params of ``names``
    with equal-shaped non-empty shards)."""
    comparable = identical = 0
    for name in names:
        entries = [r["torch_local"][name] for r in results]
        shapes = {tuple(e[0]) for e in entries}
        if len(shapes) != 1 or 0 in next(iter(shapes)):
            continue
        comparable += 1
        identical += len({e[1] for e in entries}) == 1
    return identical, comparable


def _demo(args: argparse.Namespace, parser: _Parser) -> int:
    from .fingerprint import model_digest

    tp: int = args.tp
    worlds: list[int] = args.worlds or ([1, 2, 4] if tp == 1 else [tp, 2 * tp])
    bad = [w for w in worlds if w % tp]
    if bad:
        parser.error(f"--tp {tp} must divide every world size, not {bad[0]}")
    torch_path = not args.no_torch
    started = time.perf_counter()
    layout = "FSDP2 fully_shard" + (f" on top of {tp}-way tensor parallelism" if tp > 1 else "")
    _say(f"shardinit demo: {describe(args.model)}")
    _say(
        f"  seed {args.seed}; {layout}; gloo process groups on CPU; world sizes "
        f"{', '.join(map(str, worlds))}"
    )
    _say("  every rank builds the model on the meta device and fills only its own shards\n")

    per_world: dict[int, list[dict[str, Any]]] = {}
    for step, world in enumerate(worlds, 1):
        _say(f"[{step}/{len(worlds)}] world {world}: starting {world} process(es)")
        t0 = time.perf_counter()
        try:
            results = _run_world(args.model, world, args.seed, tp, torch_path, args.timeout)
        except Exception as error:  # a worker failed: report it, do not crash
            _say(f"  FAILED: {error}")
            return 1
        per_world[world] = results
        seconds = max(r["seconds"] for r in results)
        peak = max(r["peak_rss"] for r in results)
        before = max(r["rss_before"] for r in results)
        generated = max(r["bytes"] for r in results)
        _say(
            f"      shardinit: {seconds:.2f} s, generated {_human(generated)}/rank, peak RSS "
            f"{_human(peak)}/rank ({_human(peak - before)} above the process before init); "
            f"{time.perf_counter() - t0:.1f} s with process start"
        )

    first = worlds[0]
    names = list(per_world[first][0]["fingerprints"])
    shapes = per_world[first][0]["shapes"]
    _say("\nshardinit fingerprints (fp1: sum over elements of a hash of (global index, bits)):")
    name_width = max(len(n) for n in names)
    shape_width = max(len("x".join(map(str, shapes[n]))) for n in names)
    header = f"  {'parameter':<{name_width}}  {'shape':>{shape_width}}"
    header += "".join(f"  {'world ' + str(w):<16}" for w in worlds)
    _say(header)
    differing: list[str] = []
    for name in names:
        row = [per_world[w][0]["fingerprints"].get(name, "missing") for w in worlds]
        if len(set(row)) != 1:
            differing.append(name)
        shape = "x".join(map(str, shapes[name]))
        line = f"  {name:<{name_width}}  {shape:>{shape_width}}"
        _say(line + "".join(f"  {digest:<16}" for digest in row))
    digests = [model_digest(per_world[w][0]["fingerprints"]) for w in worlds]
    _say(
        f"  {'model digest':<{name_width}}  {'':>{shape_width}}"
        + "".join(f"  {d:<16}" for d in digests)
    )
    agree = not differing and len(set(digests)) == 1
    if agree:
        _say(
            f"=> shardinit: all {len(names)} parameters identical across world sizes "
            f"{', '.join(map(str, worlds))}"
        )
    else:
        _say(f"=> shardinit: {len(differing)} parameter(s) DIFFER across world sizes")

    if torch_path:
        _say(
            "\ntorch's own path on the same model: torch.manual_seed(seed) on every rank, then "
            "reset_parameters() on the FSDP2 shards"
        )
        torch_digests = [model_digest(per_world[w][0]["torch_fingerprints"]) for w in worlds]
        # Constants (norm weights) are trivially equal on every rank: count random ones.
        random_names = [
            name
            for name in names
            if len({per_world[w][0]["torch_fingerprints"][name] for w in worlds}) != 1
        ] or names
        for world, digest in zip(worlds, torch_digests, strict=True):
            results = per_world[world]
            note = ""
            if world > 1:
                identical, comparable = _copies(results, random_names)
                note = (
                    f"; rank shards are exact copies of each other for {identical} of "
                    f"{comparable} randomly initialized parameters"
                )
            seconds = max(r["torch_seconds"] for r in results)
            _say(f"  world {world}: model digest {digest}, {seconds:.2f} s{note}")
        torch_differ = random_names if random_names is not names else []
        _say(
            f"=> torch: {len(torch_differ)} of {len(names)} parameters differ across world "
            "sizes (the ones that agree are constants such as norm weights)"
            if torch_differ
            else "=> torch: fingerprints agree across world sizes"
        )
        if any(w > 1 for w in worlds):
            _say(
                "   On a CPU mesh DTensor has no offset-based RNG: each rank runs the "
                "ordinary CPU generator on its local shard, so every rank writes the same "
                "values and the gathered weights repeat the first shard."
            )
    _say(f"\ntotal {time.perf_counter() - started:.1f} s")
    _say("PASS: shardinit's weights do not depend on the world size" if agree else "FAIL")
    return 0 if agree else 1


# --------------------------------------------------------------------------------- plan


def _plan(args: argparse.Namespace, parser: _Parser) -> int:
    import torch

    from ._plan import format_runs, load_shapes, make_plan
    from .models import param_shapes

    dtype = getattr(torch, args.dtype)
    try:
        if args.model is not None:
            shapes = {name: (shape, dtype) for name, shape in param_shapes(args.model).items()}
            title = describe(args.model)
        else:
            shapes = load_shapes(args.shapes, dtype)
            title = f"{args.shapes}: {len(shapes)} parameters"
        plan = make_plan(shapes, args.world, args.tp)
    except ShardInitError as error:
        parser.error(str(error))
    world, tp = args.world, args.tp
    mesh = "x".join(map(str, plan.mesh_shape))
    _say(f"shardinit plan: {title}")
    layout = "FSDP2 fully_shard" + (f" + {tp}-way TP (mesh dp x tp)" if tp > 1 else "")
    _say(f"  {layout} on {world} rank(s), mesh {mesh}; nothing is generated\n")

    # Group parameters with the same shape and layout: layers.{0..31} print once.
    groups: dict[tuple[str, tuple[int, ...], str], list[str]] = {}
    for param in plan.params:
        generic = re.sub(r"\.\d+\.", ".*.", param.name)
        groups.setdefault((generic, param.shape, str(param.placements)), []).append(param.name)
    by_name = {p.name: p for p in plan.params}
    ranks = list(range(world))
    if not args.all_ranks and world > 8:
        ranks = [0, 1, 2, world - 2, world - 1]
    _say("Local region of each rank (global index ranges per dim; ':' = whole dim):")
    for (generic, shape, placements), members in groups.items():
        label = generic if len(members) > 1 else members[0]
        count = f" x{len(members)}" if len(members) > 1 else ""
        param = by_name[members[0]]
        _say(f"  {label}{count}  {tuple(shape)}  {placements}")
        regions = [f"r{r} {format_runs(param.runs[r], shape)}" for r in ranks]
        if len(ranks) < world:
            regions.insert(3, "...")
        for start in range(0, len(regions), 4):
            _say("      " + "  ".join(regions[start : start + 4]))

    _say("\nBytes of parameters per rank:")
    for rank in ranks:
        _say(f"  rank {rank:>4}: {_human(plan.rank_bytes(rank))}")
    if len(ranks) < world:
        _say(f"  ({world - len(ranks)} more ranks; --all-ranks lists them)")
    _say(f"  whole model: {_human(plan.total_bytes())}")

    labels = {
        "fsdp1_cpu": "FSDP1, model built on CPU on every rank",
        "fsdp1_meta": "FSDP1, meta + param_init_fn per unit",
        "fsdp2": "FSDP2, meta + to_empty + reset_parameters",
        "shardinit_fsdp1": "FSDP1 + shardinit.fsdp1_param_init_fn",
        "shardinit": "FSDP2 + shardinit.materialize",
    }
    _say("\nEstimated peak parameter memory per rank during init (busiest rank; add the")
    _say("process baseline of an imported torch, ~0.5 GiB on CPU):")
    for key, value in plan.peak_estimates().items():
        text = _human(value) if value is not None else "n/a (FSDP1 with TP not modeled)"
        _say(f"  {labels[key]:<44} {text}")
    _say("  FSDP2's own values are not layout-independent: on a CPU mesh every rank draws the")
    _say("  same numbers; on CUDA they depend on the layout (docs/how-fsdp-initializes.md).")
    return 0


# -------------------------------------------------------------------------- fingerprint


def _fingerprint(args: argparse.Namespace, parser: _Parser) -> int:
    from .fingerprint import model_digest

    if args.world % args.tp:
        parser.error(f"--tp {args.tp} must divide --world {args.world}")
    if args.world == 1:
        from .fingerprint import fingerprint_model
        from .materialize import materialize
        from .models import build_model

        model = materialize(build_model(args.model), seed=args.seed)
        fingerprints = fingerprint_model(model)
        shapes = {name: list(p.shape) for name, p in model.named_parameters()}
    else:
        from ._launch import launch

        try:
            results = launch(
                "shardinit._demo_worker",
                args.world,
                ["--model", args.model, "--seed", str(args.seed), "--tp", str(args.tp)],
            )
        except Exception as error:  # a worker failed: report it, do not crash
            print(f"shardinit fingerprint: {error}", file=sys.stderr)
            return 1
        fingerprints = results[0]["fingerprints"]
        shapes = results[0]["shapes"]
    digest = model_digest(fingerprints)
    if args.json:
        _say(
            json.dumps(
                {
                    "model": args.model,
                    "seed": args.seed,
                    "world": args.world,
                    "tp": args.tp,
                    "format": "fp1",
                    "model_digest": digest,
                    "fingerprints": fingerprints,
                },
                indent=2,
            )
        )
    else:
        width = max(len(name) for name in fingerprints)
        _say(f"# {describe(args.model)}; seed {args.seed}; world {args.world}, tp {args.tp}")
        for name, value in fingerprints.items():
            shape = "x".join(map(str, shapes[name]))
            _say(f"{name:<{width}}  {value}  {shape}")
        _say(f"{'model digest':<{width}}  {digest}")
    if args.expect is not None and args.expect != digest:
        print(
            f"shardinit fingerprint: model digest {digest} != expected {args.expect}",
            file=sys.stderr,
        )
        return 1
    return 0


# ---------------------------------------------------------------------------------- run


def run(argv: Sequence[str]) -> int:
    """Runs the command line ``argv`` (without the program name).

    Args:
        argv: e.g. ``["demo", "--worlds", "1,2"]``.

    Returns:
        The exit status: 0 success, 1 a failed check, 2 bad arguments.
    """
    parser, subparsers = _build_parser()
    try:
        args = parser.parse_args(list(argv))
        subparser = subparsers[args.command]
        handler = {"demo": _demo, "plan": _plan, "fingerprint": _fingerprint}[args.command]
        return handler(args, subparser)
    except SystemExit as exit_:  # argparse's --help (0) and errors (2)
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except KeyboardInterrupt:
        print("shardinit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly (the Python docs' recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
