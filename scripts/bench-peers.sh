#!/usr/bin/env bash
# rewind beside the tools people already use, in one run on one machine:
# one table of side-by-side ratios, each the median of interleaved pairs
# (the two commands alternate which goes first; nothing is warmed for one
# side only: every command runs once, untimed, before its pairs).
#
#   scripts/bench-peers.sh [PAIRS]     # default 15; needs root (ptrace, perf)
#
# Rows: dump of a live 17-thread C program vs eu-stack (plain and -s -i)
# and gdb; the same dump with an empty cache (cold, its --stats phases
# beside); the least any Go program can do for that dump (start, stop
# and resume the threads: scripts/floor) vs eu-stack; a core vs eu-stack
# --core; report vs perf script on a perf record --call-graph dwarf file
# (back to back, and 3 s apart), and on a system-wide recording of at
# least 300 MB (made once, cached under ~/.cache/rewind/bench-peers)
# and, beside it, the least any Go program can do for it (start and copy
# the file with pread);
# record's CPU use vs perf record's at the same rate; unwind table build
# vs readelf --debug-dump=frames on libc; gostack.Callers and CallersFP
# vs runtime.Callers; software shadow stacks and their stack IDs vs the
# plain frame-pointer loop (and a hash-table look-up of its PCs), in
# gostack's table and in scripts/shadowcheck. It installs what it needs
# as .ci/run does (skipped when offline) and finishes in a few minutes on
# 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-15}
root=$PWD
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

need=()
command -v gcc >/dev/null || need+=(gcc)
command -v gdb >/dev/null || need+=(gdb)
command -v eu-stack >/dev/null || need+=(elfutils)
command -v readelf >/dev/null || need+=(binutils)
command -v perf >/dev/null || need+=(linux-perf)
dpkg -s libc6-dbg >/dev/null 2>&1 || need+=(libc6-dbg)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}" >&2
	{ DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } >/dev/null 2>&1 ||
		echo "could not install ${need[*]}: their rows are skipped" >&2
fi
have() { command -v "$1" >/dev/null; }

echo "rewind bench-peers, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), kernel $(uname -r), $(go version | cut -d' ' -f3)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $pairs pairs per row unless noted; rewind built with CGO_ENABLED=0 (README: install)"
echo

# Built as the README's install line builds it (a static binary).
CGO_ENABLED=0 go build -o "$tmp/rewind" ./cmd/rewind
# The least a Go program can do for a dump or a report (scripts/floor):
# its rows say what the machine leaves for the work itself.
CGO_ENABLED=0 go build -o "$tmp/floor" ./scripts/floor
csrc=internal/testutil/fixture/csrc
gcc -O2 -g -pthread -I"$csrc" -o "$tmp/threads" "$csrc/threads.c" "$csrc/libfix.c"
gcc -O2 -g -pthread -fomit-frame-pointer -o "$tmp/cpu" internal/testutil/perftest/csrc/cpu.c
libc=$(gcc -print-file-name=libc.so.6)
libc=$(readlink -f "$libc")

"$tmp/threads" >/dev/null 2>&1 &
tpid=$!
disown "$tpid" # no "Killed" line when the cleanup ends it
pids+=("$tpid")
sleep 0.5
export REWIND_CACHE_DIR=$tmp/cache

# pair NAME PAIRS CMD_A -- CMD_B: prints "NAME a_ms b_ms ratio(b/a)" from
# medians of interleaved runs (ratio of each pair, then the median). With
# GAP=S in the environment every run starts S seconds after the one
# before, as commands typed by hand do. With FRESH=VAR every run of CMD_A
# gets a new empty directory in the environment variable VAR, made before
# its clock starts and removed after it stops; with STATS=1 the medians of
# CMD_A's --stats phase times over 7 more runs follow the row.
pair() {
	python3 - "$@" <<'PY'
import os, re, shutil, statistics, subprocess, sys, tempfile, time
gap = float(os.environ.get("GAP", "0"))
fresh = os.environ.get("FRESH", "")
name, n = sys.argv[1], int(sys.argv[2])
rest = sys.argv[3:]
cut = rest.index("--")
a, b = rest[:cut], rest[cut+1:]
def run(c, stats=False):
    time.sleep(gap)
    env, d = None, None
    if fresh and c is a:
        d = tempfile.mkdtemp()
        env = dict(os.environ, **{fresh: d})
    s = time.perf_counter()
    r = subprocess.run(c + (["--stats"] if stats else []), stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE if stats else subprocess.DEVNULL, env=env)
    t = time.perf_counter() - s
    if d:
        shutil.rmtree(d)
    if r.returncode not in (0, 1):
        sys.exit(f"{' '.join(c)}: exit {r.returncode}")
    return r.stderr.decode() if stats else t
run(a); run(b)
ta, tb, rs = [], [], []
for i in range(n):
    if i % 2:
        y = run(b); x = run(a)
    else:
        x = run(a); y = run(b)
    ta.append(x); tb.append(y); rs.append(y / x)
print(f"{name:<44} {statistics.median(ta)*1e3:9.2f} {statistics.median(tb)*1e3:10.2f} {statistics.median(rs):8.2f}x")
if os.environ.get("STATS") == "1":
    ph = {}
    for _ in range(7):
        line = next((l for l in run(a, True).splitlines() if " total " in l), "")
        for k, v in re.findall(r"(\w+) ([0-9.]+) ms", line):
            ph.setdefault(k, []).append(float(v))
    print("    --stats medians, ms: " + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in ph.items()))
PY
}

printf '%-44s %9s %10s %9s\n' "what (rewind vs peer)" "rewind ms" "peer ms" "peer/rw"
rw="$tmp/rewind"
if have eu-stack; then
	pair "dump PID vs eu-stack -p" "$pairs" "$rw" dump "$tpid" -- eu-stack -p "$tpid"
	pair "dump PID vs eu-stack -s -i -p" "$pairs" "$rw" dump "$tpid" -- eu-stack -s -i -p "$tpid"
	# Cold: a new empty REWIND_CACHE_DIR for every run of rewind (first
	# dump ever), made and removed outside the timed run; where the time
	# goes follows (scripts/bench-dump-cold.sh has cold and warm alone).
	FRESH=REWIND_CACHE_DIR STATS=1 pair "dump, empty cache, vs eu-stack -p" "$pairs" "$rw" dump "$tpid" -- eu-stack -p "$tpid"
	# Go's start-up and the threads' stop and resume, nothing else.
	pair "floor: Go stop/resume only, vs eu-stack -p" "$pairs" "$tmp/floor" dump "$tpid" -- eu-stack -p "$tpid"
fi
if have gdb; then
	pair "dump PID vs gdb -batch thread apply all bt" 5 "$rw" dump "$tpid" -- gdb -nx -batch -p "$tpid" -ex "thread apply all bt"
fi
if have gcore && have eu-stack; then
	gcore -o "$tmp/core" "$tpid" >/dev/null 2>&1 || true
	core=$(ls "$tmp"/core.* 2>/dev/null | head -1)
	if [ -n "$core" ]; then
		pair "dump --core vs eu-stack --core" "$pairs" "$rw" dump --core "$core" -- eu-stack --core "$core" -e "$tmp/threads"
	fi
fi
if have perf && perf record -q -o "$tmp/probe.data" -- true >/dev/null 2>&1; then
	perf record -q -e cpu-clock -F 999 --call-graph dwarf -o "$tmp/perf.data" -- "$tmp/cpu" 4 2 >/dev/null 2>&1
	(cd "$tmp" && pair "report perf.data vs perf script" "$pairs" "$rw" report "$tmp/perf.data" -- perf script -i "$tmp/perf.data")
	# On a VM that hands freed memory back to its host, a command run
	# seconds after the last one can pay for fresh memory that back-to-back
	# runs do not: the same pair, 3 s apart.
	(cd "$tmp" && GAP=3 pair "report vs perf script, runs 3 s apart" 7 "$rw" report "$tmp/perf.data" -- perf script -i "$tmp/perf.data")
	# A system-wide recording of at least 300 MB: perf record -a for 20 s
	# beside the CPU-bound program without frame pointers (on a busy
	# machine, with whatever else ran). It is made once and cached with
	# the program it sampled (the profile names that program's frames),
	# keyed by the program's source; perf script takes seconds a run, so
	# the row has 5 pairs. rewind's --stats phases follow the row.
	sw=${XDG_CACHE_HOME:-$HOME/.cache}/rewind/bench-peers/sw-$(sha256sum internal/testutil/perftest/csrc/cpu.c | cut -c1-16)
	if [ ! -s "$sw/perf.data" ] || [ "$(stat -c %s "$sw/perf.data")" -lt 300000000 ]; then
		mkdir -p "$sw"
		gcc -O2 -g -pthread -fomit-frame-pointer -o "$sw/cpu" internal/testutil/perftest/csrc/cpu.c
		"$sw/cpu" 23 2 >/dev/null 2>&1 &
		swpid=$!
		pids+=("$swpid")
		sleep 0.5
		perf record -q -a -F 999 --call-graph dwarf -o "$sw/perf.data.tmp" -- sleep 20 >/dev/null 2>&1 &&
			mv "$sw/perf.data.tmp" "$sw/perf.data"
		wait "$swpid" 2>/dev/null || true
	fi
	if [ -s "$sw/perf.data" ]; then
		swmb=$(($(stat -c %s "$sw/perf.data") / 1000000))
		(cd "$tmp" && pair "report ${swmb} MB system-wide vs perf script" 5 "$rw" report -q -o "$tmp/sw.pb.gz" "$sw/perf.data" -- perf script -i "$sw/perf.data")
		# Go's start-up and the file's copy, nothing decoded.
		pair "floor: Go pread of ${swmb} MB only, vs perf script" 5 "$tmp/floor" read "$sw/perf.data" -- perf script -i "$sw/perf.data"
		/usr/bin/time -f "%M" -o "$tmp/sw.rss" "$rw" report -q --stats -o "$tmp/sw.pb.gz" "$sw/perf.data" 2>&1 |
			sed -n -E 's/^rewind: (read .* ms|[0-9]+ samples were unwound .*)$/  rewind report --stats: \1/p'
		echo "  peak RSS of that run (anonymous and the file's pages): $(($(tail -1 "$tmp/sw.rss") / 1024)) MB"
	fi
	# Recording overhead: CPU time of the profiler alone, attached to a
	# running CPU-bound program for 5 s at 999 Hz; perf record does not
	# unwind (perf report does that later), rewind record does.
	"$tmp/cpu" 1000 2 >/dev/null 2>&1 &
	cpid=$!
	disown "$cpid"
	pids+=("$cpid")
	cpu() { /usr/bin/time -f "%U %S" -o "$tmp/t" "$@" >/dev/null 2>&1 || true; awk '{printf "%.1f", ($1+$2)/5*100}' "$tmp/t"; }
	r1=$(cpu "$rw" record -q -F 999 -p "$cpid" -d 5s -o "$tmp/rec.folded")
	p1=$(cpu perf record -q -e cpu-clock -F 999 --call-graph dwarf -p "$cpid" -o "$tmp/rec.data" -- sleep 5)
	r2=$(cpu "$rw" record -q -F 999 -p "$cpid" -d 5s -o "$tmp/rec.folded")
	p2=$(cpu perf record -q -e cpu-clock -F 999 --call-graph dwarf -p "$cpid" -o "$tmp/rec.data" -- sleep 5)
	kill -9 "$cpid" 2>/dev/null || true
	printf '%-44s %8s%% %9s%%   (CPU of one core, 2 runs each: rewind %s%% %s%%, perf %s%% %s%%)\n' \
		"record -F 999 vs perf record --call-graph dwarf" \
		"$(python3 -c "print(f'{($r1+$r2)/2:.1f}')")" "$(python3 -c "print(f'{($p1+$p2)/2:.1f}')")" "$r1" "$r2" "$p1" "$p2"
fi
if have readelf; then
	pair "table libc vs readelf --debug-dump=frames" 9 "$rw" table "$libc" -- readelf --debug-dump=frames "$libc"
fi
echo

echo "gostack vs runtime.Callers (x = runtime.Callers' time / ours; go test ./gostack -bench Ratio):"
go test ./gostack -run '^$' -bench 'Ratio/plain/depth=(8|32|128)$' -count 3 2>/dev/null |
	awk '/^BenchmarkRatio/ {
		d=$1; sub(/.*depth=/, "", d); sub(/-[0-9]+$/, "", d)
		for (i = 2; i < NF; i++) { if ($(i+1) == "x-fast") f[d] = f[d] " " $i; if ($(i+1) == "x-fp") p[d] = p[d] " " $i }
	}
	END { for (d in f) printf "  depth %-4s Callers %s   CallersFP %s   (3 runs each)\n", d, f[d], p[d] }' | sort -k2 -n
echo

echo "software shadow stacks (gostack.ShadowCallers) vs the plain frame-pointer walk, thread CPU per capture:"
if go run ./cmd/rewind goshadow overlay -o "$tmp/overlay" >/dev/null 2>&1; then
	go test -overlay="$tmp/overlay/overlay.json" -tags rewind_shadow ./gostack \
		-run ShadowBenchTable -v -shadowtable -shadowrounds 5 -test.benchtime=100ms 2>&1 |
		awk '/case: median/ || /^ *depth/ || /^ +[0-9]+ +[0-9.]+ / { sub(/^ +/, "  "); print }'
	echo "stack IDs (gostack.ShadowStackID) vs the plain loop plus a hash-table look-up of its PCs, as the execution tracer does:"
	go test -overlay="$tmp/overlay/overlay.json" -tags rewind_shadow ./gostack \
		-run ShadowBenchTable -v -shadowtable -shadowid -shadowrounds 5 -test.benchtime=100ms 2>&1 |
		awk '/case, stack IDs/ || /^ *depth/ || /^ +[0-9]+ +[0-9.]+ / { sub(/^ +/, "  "); print }'
	echo "the same, checked independently (scripts/shadowcheck: a loop and a Go map of its own, wall clock):"
	go run -overlay="$tmp/overlay/overlay.json" -tags rewind_shadow ./scripts/shadowcheck -pairs 5 2>&1 | sed 's/^/  /'
else
	echo "  (the overlay could not be written for this Go; skipped)"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
