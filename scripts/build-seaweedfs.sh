#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (an S3-compatible server) once, through the Go module proxy, into
# a cache outside the clone. Tests of checkpoints start `weed server -s3` on loopback with it.
# `go install module@version` refuses the module's replace directives, so the module is
# downloaded with `go mod download -json` and `go build ./weed` runs in a writable copy.
set -euo pipefail
version="${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"
cache="${GPUM_CACHE:-$HOME/.cache/gpu-market}/seaweedfs"
bin="$cache/weed-$version"
if [[ -x "$bin" ]]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "Go is required to build SeaweedFS (the S3 server the checkpoint tests use)" >&2; exit 1; }
mkdir -p "$cache"
export GOFLAGS=-mod=mod GOPATH="${GOPATH:-$cache/gopath}" GOMODCACHE="${GOMODCACHE:-$cache/gomodcache}"
work="$(mktemp -d "$cache/build.XXXXXX")"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
dir="$(go mod download -json "github.com/seaweedfs/seaweedfs@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$dir" src && chmod -R u+w src
(cd src && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" ./weed) >&2
mv "$bin.tmp" "$bin"
echo "$bin"
