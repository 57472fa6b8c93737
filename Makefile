# shardinit developer entry points. Every target sets up what it needs (idempotent):
#   make demo   - the main job (creates .venv, installs deps, builds, runs the demo)
#   make test   - cargo test + pytest (fast profile)
#   make lint   - fmt, clippy, ruff, mypy, stubtest
#   make bench  - benchmarks against torch (prints ratios measured in the same run)

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-installed
BUILD_STAMP := $(VENV)/.shardinit-built
RUST_SOURCES := $(shell find rust -name '*.rs' -o -name Cargo.toml) Cargo.toml
PY_SOURCES := $(shell find python -name '*.py' -o -name '*.pyi' -o -name py.typed)

export VIRTUAL_ENV := $(CURDIR)/$(VENV)
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup demo test test-rust test-python test-slow test-wheel test-zoo msrv fuzz quality lint bench wheel clean

setup: $(BUILD_STAMP)

# Two files: requirements-nodeps.txt holds packages whose declared dependencies would
# replace pins of requirements-dev.txt (see its comments); they go in without them, and
# without build isolation (DeepSpeed's setup.py imports torch).
$(DEPS_STAMP): requirements-dev.txt requirements-nodeps.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements-dev.txt
	$(PY) -m pip install --no-deps --no-build-isolation -r requirements-nodeps.txt
	touch $@

$(BUILD_STAMP): $(DEPS_STAMP) $(RUST_SOURCES) pyproject.toml
	$(VENV)/bin/maturin develop --release
	touch $@

demo: setup
	$(PY) -m shardinit demo

test: test-rust test-python

# cargo needs the venv too: pyo3's build script runs $(VIRTUAL_ENV)/bin/python.
test-rust: $(DEPS_STAMP)
	cargo test --workspace --all-targets

test-python: setup
	$(PY) -m pytest -q

test-slow: setup
	HYPOTHESIS_PROFILE=slow $(PY) -m pytest -q --runslow
	FUZZ_CASES=200000 cargo test --release --manifest-path fuzz/Cargo.toml
	cargo test -p shardinit-core --release --lib -- --ignored exhaustive

# The release wheel built by maturin, installed into a fresh venv (minutes: its own step).
test-wheel: setup
	$(PY) -m pytest -q --runwheel -m wheel

# Megatron-core and DeepSpeed ZeRO-3 on gloo CPU (DeepSpeed builds one CPU op with g++ and
# ninja on first use, cached in ~/.cache/torch_extensions).
test-zoo: setup
	DS_ACCELERATOR=cpu $(PY) -m pytest -q --runzoo -m zoo

# The library crates built with the Rust release that Cargo.toml's rust-version names.
msrv: $(DEPS_STAMP)
	tools/check_msrv.sh

fuzz:
	tools/fuzz.sh 300

quality: setup
	tools/run_dieharder.sh

lint: setup
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests benches examples
	$(VENV)/bin/ruff format --check python tests benches examples
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest shardinit._core

bench: setup
	$(PY) benches/compare_torch.py

wheel: $(DEPS_STAMP)
	$(VENV)/bin/maturin build --release --out dist

clean:
	rm -rf target dist $(VENV)
