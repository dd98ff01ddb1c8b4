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

.PHONY: all setup venv localnet containers browser postgres js-deps js-client js-client-generate js-client-check rent-bundle rent-bundle-check seaweedfs torch ray test test-rust test-py idl idl-check demo demo-cluster lint clean

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
# is an ext4 image with a hard quota (mkfs.ext4 from e2fsprogs). A cluster node's mesh is
# WireGuard (wg from wireguard-tools, wireguard-go where the kernel has no module) with an
# nftables filter; without recommends, as wireguard-tools recommends a kernel image.
containers:
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
	    || ! dpkg -s busybox-static >/dev/null 2>&1 || ! command -v mkfs.ext4 >/dev/null; then \
	  echo "installing podman, runc, busybox-static and e2fsprogs (Debian packages)"; \
	  apt-get update -q && apt-get install -y -q podman runc busybox-static e2fsprogs; \
	fi
	@if ! command -v wg >/dev/null || ! command -v wireguard-go >/dev/null \
	    || ! command -v nft >/dev/null; then \
	  echo "installing wireguard-tools, wireguard-go and nftables (Debian packages)"; \
	  apt-get update -q && apt-get install -y -q --no-install-recommends wireguard-tools \
	    wireguard-go nftables; \
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

# The official Solana JS stack (web3.js, Anchor TS, kit) for the JS-client tests, pinned by the lock.
js-deps: tests/js/node_modules/.installed
tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The TypeScript client (clients/js): the code Codama generates from the IDL is committed
# (src/generated); `js-client` builds it with tsc into clients/js/dist, which the JS tests load.
JS_CLIENT_SRC := $(shell find clients/js/src -name '*.ts' 2>/dev/null)
js-client: clients/js/dist/.built
clients/js/node_modules/.installed: clients/js/package.json clients/js/package-lock.json
	cd clients/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@
clients/js/dist/.built: clients/js/node_modules/.installed clients/js/tsconfig.json $(JS_CLIENT_SRC) \
		$(wildcard clients/js/examples/*.ts)
	cd clients/js && node_modules/.bin/tsc -p tsconfig.json
	cd clients/js && node_modules/.bin/tsc -p examples/tsconfig.json  # the README's snippet type-checks
	touch $@

# Regenerates clients/js/src/generated from idl/gpu_market.json (after `make idl`).
js-client-generate: clients/js/node_modules/.installed
	cd clients/js && node scripts/generate.mjs

# Fails when the committed generated client is stale against the committed IDL.
js-client-check: clients/js/node_modules/.installed
	rm -rf $(CARGO_TARGET_DIR)/js-client-check
	mkdir -p $(CARGO_TARGET_DIR)/js-client-check
	cd clients/js && node scripts/generate.mjs $(CARGO_TARGET_DIR)/js-client-check/generated
	@diff -ru clients/js/src/generated $(CARGO_TARGET_DIR)/js-client-check/generated \
	  || { echo "clients/js/src/generated is stale: run 'make js-client-generate' and commit it"; exit 1; }

# The rent page's script: clients/js/web bundled by esbuild (pinned) into one committed file the
# validator node serves; `rent-bundle-check` fails when the committed bundle is stale.
RENT_BUNDLE := validator/gpum_validator/dashboard_assets/rent.js
RENT_ESBUILD := node_modules/.bin/esbuild web/rent.ts --bundle --format=iife --platform=browser \
  --target=es2022 --minify --legal-comments=none --charset=utf8 --log-level=warning \
  --banner:js='// Built by `make rent-bundle` from clients/js/web (esbuild); do not edit.'
rent-bundle: clients/js/node_modules/.installed
	cd clients/js && node_modules/.bin/tsc -p web/tsconfig.json
	cd clients/js && $(RENT_ESBUILD) --outfile=../../$(RENT_BUNDLE)

rent-bundle-check: clients/js/node_modules/.installed
	cd clients/js && node_modules/.bin/tsc -p web/tsconfig.json
	mkdir -p $(CARGO_TARGET_DIR)/rent-bundle-check
	cd clients/js && $(RENT_ESBUILD) --outfile=$(CARGO_TARGET_DIR)/rent-bundle-check/rent.js
	@cmp -s $(RENT_BUNDLE) $(CARGO_TARGET_DIR)/rent-bundle-check/rent.js \
	  || { echo "$(RENT_BUNDLE) is stale: run 'make rent-bundle' and commit it"; exit 1; }

# The checkpoint tests keep checkpoints in a real S3-compatible server: SeaweedFS's `weed`,
# built once with Go into ~/.cache/gpu-market/seaweedfs (the script prints its path).
seaweedfs:
	scripts/build-seaweedfs.sh >/dev/null

# Cluster node images are packed from this machine's files (gpu_market.cluster_demo_image): the
# torchrun one from Debian's python3-torch (a CPU build), the Ray one from the pinned ray wheel
# and its dependencies, downloaded once (hash-checked) into ~/.cache/gpu-market/ray.
torch:
	@dpkg -s python3-torch >/dev/null 2>&1 || { echo "installing python3-torch (Debian package)"; \
	  apt-get update -q && apt-get install -y -q --no-install-recommends python3-torch; }

ray: venv
	@$(PY) -m gpu_market.cluster_demo_image ray-site >/dev/null

test-py: venv localnet containers browser postgres js-deps js-client seaweedfs torch ray
	GPUM_LOCALNET_BIN=$(LOCALNET) GPUM_WEED_BIN="$$(scripts/build-seaweedfs.sh)" $(PY) -m pytest

test: idl-check js-client-check rent-bundle-check test-rust test-py

demo: venv localnet containers seaweedfs
	GPUM_LOCALNET_BIN=$(LOCALNET) GPUM_WEED_BIN="$$(scripts/build-seaweedfs.sh)" $(PY) -m gpu_market.demo

# A 2-node torchrun all-reduce over gloo across two providers' cluster mesh; the node image is
# built from this machine's Debian python3-torch (a CPU build), no registry.
demo-cluster: venv localnet containers torch
	GPUM_LOCALNET_BIN=$(LOCALNET) $(PY) -m gpu_market.cluster_demo

lint: venv
	$(VENV)/bin/ruff check clients/py worker validator tests bench
	cargo clippy --workspace --all-targets

clean:
	rm -rf $(VENV) $(CARGO_TARGET_DIR)
