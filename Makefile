# One entry point for everything. `make demo` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# Cold Rust builds are long: keep the build cache outside the clone.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/gpu-market/target
# Anchor's IDL builder runs `cargo +$RUSTUP_TOOLCHAIN`; pin it so nothing is downloaded.
export RUSTUP_TOOLCHAIN ?= stable

VENV := .venv
PY := $(VENV)/bin/python
LOCALNET := $(CARGO_TARGET_DIR)/debug/gpum-localnet

.PHONY: all setup venv localnet containers browser postgres js-deps seaweedfs test test-rust test-py idl idl-check demo lint clean

all: test

setup: venv localnet

# Python: one venv with the SDK/CLI, worker and validator installed editable, and the
# validator's Rust fast path (validator/fastpath) built by pip + maturin (needs cargo).
venv: $(VENV)/.installed
$(VENV)/.installed: clients/py/pyproject.toml worker/pyproject.toml validator/pyproject.toml requirements-dev.txt \
		validator/fastpath/pyproject.toml validator/fastpath/Cargo.toml validator/fastpath/Cargo.lock \
		$(wildcard validator/fastpath/src/*.rs)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt -e clients/py -e worker -e validator
	$(VENV)/bin/pip install -q ./validator/fastpath
	touch $@

localnet:
	cargo build -p gpum-localnet

# Workloads run in real containers: Debian's podman with runc (crun fails on hybrid cgroups)
# and a static busybox for the local test image (no registry, no network); a job's /scratch
# is an ext4 image with a hard quota (mkfs.ext4 from e2fsprogs).
containers:
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
	    || ! dpkg -s busybox-static >/dev/null 2>&1 || ! command -v mkfs.ext4 >/dev/null; then \
	  echo "installing podman, runc, busybox-static and e2fsprogs (Debian packages)"; \
	  apt-get update -q && apt-get install -y -q podman runc busybox-static e2fsprogs; \
	fi

# The committed IDL, regenerated with Anchor's idl-build (no SBF toolchain needed).
idl:
	cargo run -q -p gpum-idl -- programs/gpu_market > idl/gpu_market.json.tmp
	mv idl/gpu_market.json.tmp idl/gpu_market.json

idl-check:
	mkdir -p $(CARGO_TARGET_DIR)
	cargo run -q -p gpum-idl -- programs/gpu_market > $(CARGO_TARGET_DIR)/gpu_market.idl.json
	@diff -u idl/gpu_market.json $(CARGO_TARGET_DIR)/gpu_market.idl.json \
	  || { echo "idl/gpu_market.json is stale: run 'make idl' and commit it"; exit 1; }

test-rust:
	cargo test --workspace

# The dashboard tests load every page in a real headless Chromium (Debian's package).
browser:
	@if ! command -v chromium >/dev/null; then \
	  echo "installing chromium (Debian package)"; \
	  apt-get update -q && apt-get install -y -q chromium; \
	fi

# The validator's PostgreSQL store tests start a throwaway server with Debian's binaries.
postgres:
	@if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then \
	  echo "installing postgresql (Debian package)"; \
	  apt-get update -q && apt-get install -y -q postgresql; \
	fi

# The official Solana JS stack (web3.js, Anchor TS) for the JS-client test, pinned by the lock.
js-deps: tests/js/node_modules/.installed
tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The checkpoint tests keep checkpoints in a real S3-compatible server: SeaweedFS's `weed`,
# built once with Go into ~/.cache/gpu-market/seaweedfs (the script prints its path).
seaweedfs:
	scripts/build-seaweedfs.sh >/dev/null

test-py: venv localnet containers browser postgres js-deps seaweedfs
	GPUM_LOCALNET_BIN=$(LOCALNET) GPUM_WEED_BIN="$$(scripts/build-seaweedfs.sh)" $(PY) -m pytest

test: idl-check test-rust test-py

demo: venv localnet containers seaweedfs
	GPUM_LOCALNET_BIN=$(LOCALNET) GPUM_WEED_BIN="$$(scripts/build-seaweedfs.sh)" $(PY) -m gpu_market.demo

lint: venv
	$(VENV)/bin/ruff check clients/py worker validator tests bench
	cargo clippy --workspace --all-targets

clean:
	rm -rf $(VENV) $(CARGO_TARGET_DIR)
