#!/usr/bin/env bash
# The budget of `rewind agent` (issue 18) beside `perf record -a
# --call-graph dwarf` at the same rate: CPU time of the profiler as a share
# of one core, and its peak RSS, while the host runs a CPU-bound workload
# (the perftest fixture on every core) and, in the second scenario, 500
# more processes; the agent symbolizing on the host and with
# --no-symbolize. Runs are interleaved; medians are printed. The
# agent's CPU time includes its start (reading every process's mappings)
# and the unwinding and symbolization of every period; perf record's
# excludes the unwinding, which perf report does later.
#
#   scripts/agent-budget.sh [PAIRS] [SECONDS] [HZ]    # default 3 20 19
#
# Needs root (system-wide perf events), gcc and perf (linux-perf).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
secs=${2:-20}
hz=${3:-19}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

go build -o "$tmp/rewind" ./cmd/rewind
gcc -O2 -g -pthread -o "$tmp/cpu" internal/perftest/csrc/cpu.c
gcc -O2 -g -fomit-frame-pointer -o "$tmp/sleeper" agent/testdata/sleeper.c
ncpu=$(nproc)
"$tmp/cpu" 100000 "$ncpu" & pids+=($!)

measure() { # NAME CMD...: prints "cpu_percent_of_one_core rss_mb"
	local name=$1; shift
	/usr/bin/time -f "%U %S %M" -o "$tmp/time.$name" "$@" >/dev/null 2>"$tmp/err.$name" || { cat "$tmp/err.$name" >&2; exit 1; }
	read -r u s m < <(tail -1 "$tmp/time.$name")
	python3 -c "print(f'{100*($u+$s)/$secs:.3f} {$m/1024:.1f}')"
}

run_pairs() { # LABEL
	local label=$1
	: > "$tmp/res.agent"; : > "$tmp/res.nosym"; : > "$tmp/res.perf"
	for i in $(seq "$pairs"); do
		REWIND_CACHE_DIR="$tmp/cache" measure agent "$tmp/rewind" agent -F "$hz" --period 10s -d "${secs}s" --out-dir "$tmp/out" >> "$tmp/res.agent"
		REWIND_CACHE_DIR="$tmp/cache" measure nosym "$tmp/rewind" agent -F "$hz" --period 10s -d "${secs}s" --out-dir "$tmp/out" --no-symbolize >> "$tmp/res.nosym"
		measure perf perf record -a -F "$hz" --call-graph dwarf -o "$tmp/perf.data" -- sleep "$secs" >> "$tmp/res.perf"
	done
	python3 - "$label" "$tmp/res.agent" "$tmp/res.nosym" "$tmp/res.perf" <<'PY'
import statistics, sys
label = sys.argv[1]
def load(p):
    rows = [list(map(float, l.split())) for l in open(p) if l.strip()]
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows), rows
print(f"{label} (medians of interleaved runs):")
for name, path in (("rewind agent", sys.argv[2]), ("rewind agent --no-symbolize", sys.argv[3]),
                   ("perf record -a --call-graph dwarf", sys.argv[4])):
    cpu, rss, rows = load(path)
    print(f"  {name:34s} {cpu:5.2f}% of one core, {rss:5.0f} MB RSS   runs (cpu%, MB): {[(r[0], r[1]) for r in rows]}")
PY
}

# A service runs with warm caches (unwind tables, symbol indexes): warm them.
REWIND_CACHE_DIR="$tmp/cache" "$tmp/rewind" agent -F "$hz" -d 5s --out-dir "$tmp/out" 2>/dev/null
run_pairs "CPU-bound workload on $ncpu cores, ${hz} Hz, ${secs}s"
for i in $(seq 500); do "$tmp/sleeper" 0.5 & pids+=($!); done
sleep 1
run_pairs "same with 500 more processes"
