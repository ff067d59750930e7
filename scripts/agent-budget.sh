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
# Every rewind run is made twice, --unwind-in kernel (stacks walked and
# counted by the BPF unwinder; its programs' CPU time, which the kernel
# charges to the sampled tasks, is added from the kernel's BPF statistics
# that rewind prints) and --unwind-in user (stack copies), interleaved.
# Then (issue 29) off-CPU: 20 processes each blocking 500 times a second
# beside the CPU-bound one, agent --off-cpu both ways with the records
# lost; and rewind record -F 999 of the CPU-bound fixture both ways.
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

measure() { # NAME CMD...: prints "cpu_percent_of_one_core rss_mb lost"
	local name=$1; shift
	/usr/bin/time -f "%U %S %M" -o "$tmp/time.$name" "$@" >/dev/null 2>"$tmp/err.$name" || { cat "$tmp/err.$name" >&2; exit 1; }
	read -r u s m < <(tail -1 "$tmp/time.$name")
	# The BPF programs' time (charged to the tasks they sampled).
	bpf=$({ grep -o 'BPF unwinder ran [0-9]* times, [0-9.]* ms' "$tmp/err.$name" || true; } | awk '{s+=$6} END {print s/1000+0}')
	# Records lost: the agent's period lines "(N lost)", record's "N lost".
	lost=$({ grep -o '([0-9]* lost)\|[0-9]* lost' "$tmp/err.$name" || true; } | tr -dc '0-9\n' | awk '{s+=$1} END {print s+0}')
	python3 -c "print(f'{100*($u+$s+$bpf)/$secs:.3f} {$m/1024:.1f} {$lost}')"
}

run_pairs() { # LABEL
	local label=$1
	: > "$tmp/res.agent"; : > "$tmp/res.nosym"; : > "$tmp/res.perf"
	: > "$tmp/res.kagent"; : > "$tmp/res.knosym"
	for i in $(seq "$pairs"); do
		for in in kernel user; do
			k=; [ $in = kernel ] && k=k
			REWIND_CACHE_DIR="$tmp/cache" measure agent "$tmp/rewind" agent --unwind-in $in -F "$hz" --period 10s -d "${secs}s" --out-dir "$tmp/out" >> "$tmp/res.${k}agent"
			REWIND_CACHE_DIR="$tmp/cache" measure nosym "$tmp/rewind" agent --unwind-in $in -F "$hz" --period 10s -d "${secs}s" --out-dir "$tmp/out" --no-symbolize >> "$tmp/res.${k}nosym"
		done
		measure perf perf record -a -F "$hz" --call-graph dwarf -o "$tmp/perf.data" -- sleep "$secs" >> "$tmp/res.perf"
	done
	report "$label" "rewind agent --unwind-in kernel" "$tmp/res.kagent" "rewind agent --unwind-in user" "$tmp/res.agent" \
		"  ... --no-symbolize, kernel" "$tmp/res.knosym" "  ... --no-symbolize, user" "$tmp/res.nosym" \
		"perf record -a --call-graph dwarf" "$tmp/res.perf"
}

report() { # LABEL (NAME FILE)...
	python3 - "$@" <<'PY'
import statistics, sys
label, rest = sys.argv[1], sys.argv[2:]
print(f"{label} (medians of interleaved runs):")
for name, path in zip(rest[::2], rest[1::2]):
    rows = [list(map(float, l.split())) for l in open(path) if l.strip()]
    cpu, rss, lost = (statistics.median(r[i] for r in rows) for i in range(3))
    print(f"  {name:34s} {cpu:6.2f}% of one core, {rss:5.0f} MB RSS, {lost:8.0f} lost   runs (cpu%, MB, lost): {[tuple(r) for r in rows]}")
PY
}

off_pairs() { # LABEL: agent --off-cpu both ways
	: > "$tmp/res.koff"; : > "$tmp/res.uoff"
	for i in $(seq "$pairs"); do
		REWIND_CACHE_DIR="$tmp/cache" measure koff "$tmp/rewind" agent --unwind-in kernel --off-cpu -F "$hz" --period 10s -d "${secs}s" --out-dir "$tmp/out" >> "$tmp/res.koff"
		REWIND_CACHE_DIR="$tmp/cache" measure uoff "$tmp/rewind" agent --unwind-in user --off-cpu -F "$hz" --period 10s -d "${secs}s" --out-dir "$tmp/out" >> "$tmp/res.uoff"
	done
	report "$1" "agent --off-cpu --unwind-in kernel" "$tmp/res.koff" "agent --off-cpu --unwind-in user" "$tmp/res.uoff"
}

record_pairs() { # LABEL: rewind record -F 999 of the CPU-bound fixture both ways
	: > "$tmp/res.krec"; : > "$tmp/res.urec"
	for i in $(seq "$pairs"); do
		REWIND_CACHE_DIR="$tmp/cache" measure krec "$tmp/rewind" record --unwind-in kernel -q -F 999 -d "${secs}" -o "$tmp/k.folded" -- "$tmp/cpu" 100000 1 >> "$tmp/res.krec"
		REWIND_CACHE_DIR="$tmp/cache" measure urec "$tmp/rewind" record --unwind-in user -q -F 999 -d "${secs}" -o "$tmp/u.folded" -- "$tmp/cpu" 100000 1 >> "$tmp/res.urec"
	done
	report "$1" "record -F 999 --unwind-in kernel" "$tmp/res.krec" "record -F 999 --unwind-in user" "$tmp/res.urec"
}

# A service runs with warm caches (unwind tables, symbol indexes): warm them.
REWIND_CACHE_DIR="$tmp/cache" "$tmp/rewind" agent -F "$hz" -d 5s --out-dir "$tmp/out" 2>/dev/null
if [ "${BUDGET_ONLY:-}" != offcpu ]; then
run_pairs "CPU-bound workload on $ncpu cores, ${hz} Hz, ${secs}s"
for i in $(seq 500); do "$tmp/sleeper" 0.5 & pids+=($!); done
sleep 1
run_pairs "same with 500 more processes"
kill "${pids[@]:1}" 2>/dev/null || true
pids=("${pids[0]}")
record_pairs "rewind record -F 999 of one CPU-bound process for ${secs}s (CPU of rewind plus its BPF programs)"
fi
gcc -O2 -g -fomit-frame-pointer -o "$tmp/block" bpfunwind/testdata/block.c
for i in $(seq 20); do "$tmp/block" >/dev/null & pids+=($!); done
sleep 1
off_pairs "off-CPU: 20 processes blocking 500 times a second each, beside the CPU-bound one, ${secs}s"
