#!/usr/bin/env bash
# Runs the gostack tests for linux/arm64 under qemu-user on an amd64 host:
# the equivalence tests with runtime.Callers, then again with inlining
# disabled (-gcflags=all=-l). Installs qemu-user with apt-get if missing.
#
#   scripts/gostack-arm64.sh            # tests
#   scripts/gostack-arm64.sh -bench     # also the benchmarks (slow, emulated)
#
# The race detector is not run for arm64: it needs cgo and an aarch64 C
# toolchain for the cross build; run `go test -race ./gostack` on amd64.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v qemu-aarch64 >/dev/null; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq qemu-user
fi

export GOARCH=arm64 CGO_ENABLED=0
start=$(date +%s)
echo "gostack arm64 (qemu-aarch64): default build" >&2
go test -count=1 -exec qemu-aarch64 ./gostack
echo "gostack arm64 (qemu-aarch64): -gcflags=all=-l" >&2
go test -count=1 -exec qemu-aarch64 -gcflags=all=-l ./gostack
if [ "${1:-}" = "-bench" ]; then
	go test -exec qemu-aarch64 -run '^$' -bench . -benchtime 2000x ./gostack
fi
echo "gostack arm64: done in $(( $(date +%s) - start )) s" >&2
