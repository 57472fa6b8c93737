# shardinit developer entry points. Every target sets up what it needs (idempotent):
#   make demo   - the main job (creates .venv, installs deps, builds, runs the demo)
#   make test   - cargo test + pytest (fast profile)
#   make test-oracle - torch's whole OpInfo database through the capture
#   make test-zoo312 - megatron-core 0.19.2 on Python 3.12 (skipped, saying why, without one)
#   make lint   - fmt, clippy, ruff, mypy, stubtest
#   make bench  - benchmarks against torch (prints ratios measured in the same run)
#   make mutants - mutation testing within MUTANTS_MINUTES (slow; tests/mutants/REPORT.md)

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUILD_STAMP := $(VENV)/.shardinit-built
RUST_SOURCES := $(shell find rust benches -name '*.rs' -o -name Cargo.toml) Cargo.toml

# The set-up in layers, one requirements file (and one stamp) each; a target installs
# only the layers it needs:
#   core    requirements-core.txt: torch, numpy, maturin, the test tools  (every target)
#   clients requirements-clients*.txt: transformers, torchtitan, the trainers, timm,
#           diffusers, peft, open_clip, litgpt, OLMo-core          (make test, test-zoo)
#   zoo     requirements-zoo*.txt: megatron-core, DeepSpeed                (make test-zoo)
#   lint    requirements-lint.txt: ruff, mypy                                  (make lint)
#   bench   requirements-bench.txt: matplotlib                                (make bench)
#   py312   requirements-py312.txt: megatron-core 0.19.2, in .venv-py312 on Python 3.12,
#           over the core file                                           (make test-zoo312)
# A `-nodeps` file holds packages whose declared dependencies would replace pins (see its
# comments): they go in with --no-deps, and DeepSpeed's sdist without build isolation
# (its setup.py imports torch). Every later layer is installed with the core file as a
# constraint, so that no layer moves torch or numpy.
CORE := $(VENV)/.layer-core
CLIENTS := $(VENV)/.layer-clients
ZOO := $(VENV)/.layer-zoo
LINT_TOOLS := $(VENV)/.layer-lint
BENCH_TOOLS := $(VENV)/.layer-bench
# uv installs the layers: it downloads in parallel, so torch and its CUDA wheels (about
# 3 GB) go in in about 35 s on a cold cache where pip took minutes; it writes no .pyc up
# front (Python writes them for the modules that are imported, when they are imported).
# pip only bootstraps uv itself, at the version pinned here. UV_NATIVE_TLS: the system's
# certificates, as pip uses them.
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
INSTALL := $(UV) pip install --python $(PY)
export UV_NATIVE_TLS := 1

export VIRTUAL_ENV := $(CURDIR)/$(VENV)
# Python writes the bytecode of what it imports into the venv (and tests/), so that the
# ~40 rank processes and subprocesses of a test run read torch's and transformers' modules
# compiled once instead of compiling them again each (an environment that sets
# PYTHONDONTWRITEBYTECODE, as this project's machines do, costs make test's pytest about
# 170 s of CPU more: measured 364 s against 195 s on a fresh clone, 2026-12-01).
unexport PYTHONDONTWRITEBYTECODE
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup demo test test-deps test-rust test-python test-slow test-oracle test-wheel test-zoo test-zoo312 zoo312-run test-ecosystem test-processes msrv fuzz quality lint bench mutants wheel clean

setup: $(BUILD_STAMP)

# uv has a target of its own, so that a venv made before it was used gets it too.
$(UV):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q uv==$(UV_VERSION)

$(CORE): $(UV) requirements-core.txt
	$(INSTALL) -r requirements-core.txt
	touch $@

$(CLIENTS): $(CORE) requirements-clients.txt requirements-clients-nodeps.txt
	$(INSTALL) -c requirements-core.txt -r requirements-clients.txt
	$(INSTALL) --no-deps -r requirements-clients-nodeps.txt
	touch $@

$(ZOO): $(CLIENTS) requirements-zoo.txt requirements-zoo-nodeps.txt
	$(INSTALL) -c requirements-core.txt -r requirements-zoo.txt
	$(INSTALL) --no-deps --no-build-isolation -r requirements-zoo-nodeps.txt
	touch $@

$(LINT_TOOLS): $(CORE) requirements-lint.txt
	$(INSTALL) -c requirements-core.txt -r requirements-lint.txt
	touch $@

$(BENCH_TOOLS): $(CORE) requirements-bench.txt
	$(INSTALL) -c requirements-core.txt -r requirements-bench.txt
	touch $@

# The extension, with the release profile (thin LTO, one codegen unit: the speed users
# get, which the demo and the benchmarks report).
$(BUILD_STAMP): $(CORE) $(RUST_SOURCES) pyproject.toml
	$(VENV)/bin/maturin develop --release
	touch $@

demo: setup
	$(PY) -m shardinit demo

# test-rust needs no Python (below), so it builds and runs beside the whole Python side
# (uv's set-up, the extension, then pytest): two jobs, each one's output printed when it
# ends. pytest keeps about one core busy, so the Rust test build that outlasts the set-up
# takes the other one instead of holding pytest back (a fresh clone's make test on 2
# cores: 8:09 with pytest after both, measured 2026-12-06).
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target test-rust test-python

test-deps: setup $(CLIENTS)

# The Rust tests share no build with the extension, on purpose: they need debug
# assertions and overflow checks (the counter and offset arithmetic relies on them), which
# the release profile leaves out, and building every test binary with thin LTO and one
# codegen unit would cost more than the few crates both use (sha2, rayon, half and the
# core itself; pyo3 is only the extension's, proptest only the tests'). So the test
# profile (Cargo.toml) is opt-level 2 without full debug info. They need no Python either:
# `cargo test` builds the default members only, the core and the glue, whose lib has
# `test = false`, so pyo3 and its build script are not built, and test-rust runs before
# (or, with -j, while) the venv is set up. The criterion benchmarks (rust/bench) are no
# default member: `make bench` runs them and `make lint` checks them.
test-rust:
	cargo test

test-python: test-deps
	$(PY) -m pytest -q

test-slow: test-deps
	HYPOTHESIS_PROFILE=slow $(PY) -m pytest -q --runslow
	FUZZ_CASES=200000 cargo test --release --manifest-path fuzz/Cargo.toml
	cargo test -p shardinit-core --release --lib -- --ignored exhaustive

# The release wheel built by maturin, installed into a fresh venv (minutes: its own step).
test-wheel: setup
	$(PY) -m pytest -q --runwheel -m wheel

# Every ecosystem setup (timm, diffusers, peft, OLMo-core, open_clip, litgpt) under FSDP2 at
# worlds 1-3 (tests/clients/test_ecosystem.py; make test runs them all at world 1 and one
# at worlds 1-3): each rank imports the libraries, minutes on 2 cores.
test-ecosystem: test-deps
	$(PY) -m pytest -q --runeco -m ecosystem

# torch's whole OpInfo database through the capture, three shapes of init code per sample
# (tests/capture/test_capture_oracle.py; make test runs a fixed sample). With
# SHARDINIT_ORACLE_TABLE=path it writes the table of docs/capturing-init.md.
test-oracle: test-deps
	$(PY) -m pytest -q --runoracle -m oracle tests/capture/test_capture_oracle.py

# The examples, the two-world demo and the seed-checkpoint faults, each in fresh Python
# processes that import torch and transformers (tests marked processes: ~70 s).
test-processes: test-deps
	$(PY) -m pytest -q --runprocesses -m processes

# Megatron-core and DeepSpeed ZeRO-3 on gloo CPU (DeepSpeed builds one CPU op with g++ and
# ninja on first use, cached in ~/.cache/torch_extensions).
test-zoo: setup $(ZOO)
	DS_ACCELERATOR=cpu $(PY) -m pytest -q --runzoo -m zoo

# megatron-core 0.19.2 (requirements-py312.txt) in a venv of its own on Python 3.12: its
# only wheel is cp312, and this venv is Debian bookworm's 3.11 (bookworm has no 3.12), which
# gets 0.16.1. The interpreter: the first that runs of python3.12 on PATH and the 3.12s in
# pyenv's versions directory, newest first (a pyenv shim on PATH may not run); without one
# the target says so in one line and succeeds (make test does not depend on it). That venv
# reads shardinit from python/: the abi3 extension `setup` builds loads on 3.12 as it is.
# It runs tests/zoo/test_megatron.py (docs/megatron-deepspeed.md).
PY312_VENV := .venv-py312
PY312_LAYER := $(PY312_VENV)/.layer-py312
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions

test-zoo312:
	@python312=; \
	for candidate in $$(command -v python3.12) $$(ls -d $(PYENV_VERSIONS)/3.12.*/bin/python3.12 2>/dev/null | sort -rV); do \
		python312=$$("$$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12); print(sys.executable)' 2>/dev/null) && break; \
	done; \
	if [ -z "$$python312" ]; then \
		echo "test-zoo312: skipped: no Python 3.12 (python3.12 on PATH, or $(PYENV_VERSIONS)/3.12.*), which megatron-core 0.19.2's only wheel (cp312) needs"; \
	else \
		$(MAKE) --no-print-directory PY312_PYTHON=$$python312 zoo312-run; \
	fi

$(PY312_LAYER): $(UV) requirements-core.txt requirements-py312.txt
	test -x $(PY312_VENV)/bin/python || $(UV) venv --python $(PY312_PYTHON) $(PY312_VENV)
	$(UV) pip install --python $(PY312_VENV)/bin/python -r requirements-core.txt
	$(UV) pip install --python $(PY312_VENV)/bin/python -c requirements-core.txt -r requirements-py312.txt
	touch $@

zoo312-run: setup $(PY312_LAYER)
	PYTHONPATH=$(CURDIR)/python $(PY312_VENV)/bin/python -m pytest -q --runzoo -m zoo tests/zoo/test_megatron.py

# The library crates built with the Rust release that Cargo.toml's rust-version names.
# pyo3's build script needs a Python interpreter, not the venv: the one that makes it.
msrv:
	PYO3_PYTHON=$$(command -v $(PYTHON)) tools/check_msrv.sh

fuzz:
	tools/fuzz.sh 300

quality: setup
	tools/run_dieharder.sh

lint: setup $(LINT_TOOLS)
	cargo fmt --all --check
	cargo fmt --check --manifest-path fuzz/Cargo.toml  # its own crate, outside the workspace
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests benches examples
	$(VENV)/bin/ruff format --check python tests benches examples
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest shardinit._core

bench: setup $(BENCH_TOOLS)
	cargo bench -p shardinit-bench
	$(PY) benches/compare_torch.py

# Mutation testing (tools/mutants.py, which maps each module to its subject's tests from
# the layout): a sample of Python mutants drawn from every module of python/shardinit,
# each run under the tests that run its line, then one shard of cargo-mutants over every
# file of rust/core/src, within MUTANTS_MINUTES in all; MUTANTS_ONLY (paths) narrows
# both. The survivors and their triage (tests/mutants/TRIAGE.md) go to
# tests/mutants/REPORT.md, and an untriaged survivor fails the target. Vary the shard
# and the seed between runs to cover more.
MUTANTS_MINUTES ?= 30
MUTANTS_SHARD ?= 0/100
MUTANTS_SEED ?= 0
MUTANTS_PYTHON_SAMPLE ?= 20
MUTANTS_ONLY ?=
mutants: test-deps
	command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
	$(PY) tools/mutants.py --minutes $(MUTANTS_MINUTES) --rust-shard $(MUTANTS_SHARD) \
		--seed $(MUTANTS_SEED) --python-sample $(MUTANTS_PYTHON_SAMPLE) \
		$(foreach path,$(MUTANTS_ONLY),--only $(path))

wheel: $(CORE)
	$(VENV)/bin/maturin build --release --out dist

clean:
	rm -rf target dist $(VENV)
