#!/usr/bin/env bash
# Compares the wall time of a warm `rewind dump PID` between the rewind of
# a git revision (default: main) and the working tree, as medians of
# interleaved runs, each binary with its own warm cache.
#
#   scripts/dump-ab.sh [REV] [RUNS]      # e.g. scripts/dump-ab.sh main 30
#
# The target is a 9-thread C program blocked in pause(), built with gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-main}
runs=${2:-30}
tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; git worktree remove --force "$tmp/src" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

git worktree add -q --detach "$tmp/src" "$rev"
(cd "$tmp/src" && go build -o "$tmp/rewind-base" ./cmd/rewind)
go build -o "$tmp/rewind-new" ./cmd/rewind
cat > "$tmp/t.c" <<'C'
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *run(void *a) { (void)a; for (;;) pause(); return 0; }
int main(void) {
	pthread_t t;
	for (int i = 0; i < 8; i++) pthread_create(&t, 0, run, 0);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}
C
gcc -O2 -g -pthread -o "$tmp/t" "$tmp/t.c"
"$tmp/t" > "$tmp/t.out" &
pid=$!
until grep -q ready "$tmp/t.out"; do sleep 0.05; done

python3 - "$tmp" "$pid" "$runs" "$rev" <<'PY'
import os, statistics, subprocess, sys, time
tmp, pid, runs, rev = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
bins = {"base": tmp + "/rewind-base", "new": tmp + "/rewind-new"}
times = {k: [] for k in bins}
for i in range(runs + 2):
    for k, b in bins.items():
        env = dict(os.environ, REWIND_CACHE_DIR=tmp + "/cache-" + k)
        t = time.perf_counter()
        subprocess.run([b, "dump", pid], stdout=subprocess.DEVNULL, env=env, check=True)
        if i >= 2:  # the first two runs fill the caches
            times[k].append((time.perf_counter() - t) * 1000)
b, n = statistics.median(times["base"]), statistics.median(times["new"])
print(f"warm dump, median of {runs} interleaved runs: {rev} {b:.2f} ms, working tree {n:.2f} ms ({n / b:.3f}x)")
PY
