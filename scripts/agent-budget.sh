#!/usr/bin/env bash
# The budget of `rewind agent` and `rewind record` (issues 18 and 29), with
# stacks unwound in the kernel (--unwind-in kernel: a BPF program walks and
# counts them) beside stack copies unwound in user space (--unwind-in
# user), in interleaved runs; medians are printed, with each target of
# issue 29 item 6 marked met or missed.
#
#   scripts/agent-budget.sh [PAIRS] [SECONDS] [HZ]    # default 3 60 19
#
# What an operator pays for an agent, measured apart:
#
#   start-up   wall seconds from exec to the agent's "ready" line (programs
#              loaded and attached, events open) and the agent's CPU
#              seconds (utime+stime) by then;
#   steady     over SECONDS after a warm-up of BUDGET_WARMUP periods
#              (default 1): the agent's CPU (utime+stime from
#              /proc/PID/stat, sampled when the warm-up's last period line
#              appears and again at the last one) as a share of one core;
#              the BPF programs' run time over the same periods (the
#              kernel's BPF statistics, which the agent turns on and
#              prints on each period line: that work runs in the sampled
#              tasks' context and is charged to them, not to the agent);
#              and their sum. In user mode the kernel's own cost of
#              copying each sample's user stack into the ring buffer is
#              charged to the sampled tasks too and is NOT visible here:
#              the user-mode sum is a lower bound;
#   memory     peak RSS (VmHWM) at the end;
#   lost       records lost, summed over every period line;
#   churn      (kernel mode) what the host's new processes cost over the
#              steady window, from the period lines: processes described
#              and files whose rows were loaded per minute, and the wall
#              time of that work as a share of the window (an upper bound
#              of its CPU: on a loaded host it includes waiting for a core).
#              A fleet host with long-lived services has little; the
#              development machine, where other sessions compile and run
#              test binaries all the time, described 8 a second.
#
# record -F 999 "overhead": the CPU of the rewind process for the whole
# run (start-up and the profile's writing included: record is one
# command; time(1) counts the recorded command, rewind's child, in it, so
# the command's own CPU seconds, which it prints, are taken off) plus, in kernel mode, the BPF programs' run time, as a share of
# the recorded command's duration, beside user mode's rewind CPU. The
# recorded command does a fixed amount of work (cpu -w), and its own CPU
# seconds are printed beside a bare run of it: that difference includes
# what the kernel charges to it (the BPF walks, or the stack copies), a
# noisy figure on a loaded machine. Target: kernel ≤ half of user, taken
# as the median of the per-pair ratios.
#
# Scenarios (BUDGET_ONLY, comma-separated; default agent,offcpu,record):
#   agent   system-wide agent at HZ, the CPU-bound fixture on every core
#   many    the same with 500 more (sleeping) processes
#   pid     agent -p of the CPU-bound fixture only (both ways): the
#           per-period cost without the host's churn of new processes
#   nosym   agent --no-symbolize, both ways
#   perf    perf record -a --call-graph dwarf at HZ, as a reference
#   offcpu  agent --off-cpu over 20 processes each blocking 500 times a
#           second, beside the CPU-bound fixture
#   record  rewind record -F 999 of the CPU-bound fixture (2 threads)
# BUDGET_PERIOD is the agent's period in seconds (default 10).
# BUDGET_BASE=REV also builds rewind at git revision REV and measures its
# kernel-mode off-CPU agent in the same pairs (a before/after of a change).
#
# Every timed run should hold the machine alone: run the script under
# flock (flock /work/wt/bench.lock scripts/agent-budget.sh ...). Each
# agent run takes start-up + (BUDGET_WARMUP + SECONDS/BUDGET_PERIOD)
# periods. Needs root, gcc, perf (for "perf" only) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
secs=${2:-60}
hz=${3:-19}
period=${BUDGET_PERIOD:-10}
warm=${BUDGET_WARMUP:-1}
only=",${BUDGET_ONLY:-agent,offcpu,record},"
nper=$((warm + (secs + period - 1) / period))
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
want() { [[ $only == *,$1,* ]]; }

go build -o "$tmp/rewind" ./cmd/rewind
if [ -n "${BUDGET_BASE:-}" ]; then
	mkdir "$tmp/base"
	git archive "$BUDGET_BASE" | tar -x -C "$tmp/base"
	(cd "$tmp/base" && go build -o "$tmp/rewind.base" ./cmd/rewind)
fi
gcc -O2 -g -pthread -o "$tmp/cpu" internal/testutil/perftest/csrc/cpu.c
gcc -O2 -g -fomit-frame-pointer -o "$tmp/sleeper" agent/testdata/sleeper.c
gcc -O2 -g -fomit-frame-pointer -o "$tmp/block" bpfunwind/testdata/block.c
ncpu=$(nproc)
tck=$(getconf CLK_TCK)
now() { date +%s.%N; }
# cpu PID: utime+stime of a process (all its threads, live and gone), seconds.
cpu() { awk -v t="$tck" '{sub(/^.*\) /, ""); print ($12 + $13) / t}' "/proc/$1/stat"; }
# The waits below start no process: a system-wide agent describes every
# new process, and a poll with grep and sleep every 20 ms made the script
# itself the host's largest source of them (about 30 a second). A line is
# matched with read on a descriptor kept open on the file, and the pause
# between tries is a read that times out on a FIFO nobody writes to.
mkfifo "$tmp/idle"
exec {idle}<>"$tmp/idle"
nap() { read -r -t "$1" -u "$idle" _ || true; }
waitfor() { # FILE PATTERN PID: wait until FILE has a line matching PATTERN
	local fd line part=
	until [ -e "$1" ]; do nap 0.02; done
	exec {fd}<"$1"
	while :; do
		while IFS= read -r -u "$fd" line; do
			line=$part$line part=
			[[ $line == *"$2"* ]] && { exec {fd}<&-; return; }
		done
		part=$part$line # a line not finished yet
		kill -0 "$3" 2>/dev/null || { exec {fd}<&-; echo "exited before \"$2\":" >&2; cat "$1" >&2; exit 1; }
		nap 0.05
	done
}

# measure_agent NAME CMD...: runs an agent (without -d) for the warm-up
# and the measured periods, then interrupts it; appends to $tmp/res.NAME
# "start_cpu_s start_wall_s rewind% bpf% sum% rss_mb lost".
measure_agent() {
	local name=$1; shift
	local err=$tmp/err.$name pidf=$tmp/pid.$name
	rm -f "$pidf"
	local t0; t0=$(now)
	/usr/bin/time -f "%U %S %M" -o "$tmp/time.$name" sh -c 'echo $$ >"$0"; exec "$@"' "$pidf" "$@" >/dev/null 2>"$err" &
	local tpid=$!
	until [ -s "$pidf" ]; do nap 0.01; done
	local pid; pid=$(cat "$pidf")
	waitfor "$err" "rewind agent: ready after" "$pid"
	local tr cr; tr=$(now); cr=$(cpu "$pid")
	waitfor "$err" "rewind agent: period $warm (" "$pid"
	local t1 c1; t1=$(now); c1=$(cpu "$pid")
	waitfor "$err" "rewind agent: period $nper (" "$pid"
	local t2 c2; t2=$(now); c2=$(cpu "$pid")
	local hwm; hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
	kill -INT "$pid"
	wait "$tpid" || { cat "$err" >&2; exit 1; }
	python3 - "$err" "$warm" "$nper" "$t0" "$tr" "$cr" "$t1" "$c1" "$t2" "$c2" "$hwm" >>"$tmp/res.$name" <<'PY'
import re, sys
err, warm, nper = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0, tr, cr, t1, c1, t2, c2, hwm = map(float, sys.argv[4:])
bpf = lost = procs = files = work = 0.0
for line in open(err):
    lost += sum(int(n) for n in re.findall(r"\((\d+) lost\)", line))
    m = re.match(r"rewind agent: period (\d+) ", line)
    if m and warm < int(m.group(1)) <= nper:
        b = re.search(r"BPF programs ([0-9.]+) ms", line)
        bpf += float(b.group(1)) / 1e3 if b else 0
        # The host's churn: processes described and files loaded (kernel mode).
        d = re.search(r"described (\d+) processes \((\d+) ms;.*loaded (\d+) files' rows \((\d+) ms\)", line)
        if d:
            procs += int(d.group(1)); files += int(d.group(3)); work += (int(d.group(2)) + int(d.group(4))) / 1e3
w = t2 - t1
own, kern = 100 * (c2 - c1) / w, 100 * bpf / w
print(f"{cr:.3f} {tr - t0:.3f} {own:.3f} {kern:.3f} {own + kern:.3f} {hwm / 1024:.1f} {lost:.0f} {60 * procs / w:.0f} {60 * files / w:.0f} {100 * work / w:.3f}")
PY
}

# measure_perf NAME: perf record -a for SECONDS: "0 0 cpu% 0 cpu% rss_mb 0".
measure_perf() {
	/usr/bin/time -f "%U %S %M" -o "$tmp/time.perf" perf record -a -F "$hz" --call-graph dwarf -o "$tmp/perf.data" -- sleep "$secs" >/dev/null 2>"$tmp/err.perf"
	read -r u s m < <(tail -1 "$tmp/time.perf")
	python3 -c "c = 100 * ($u + $s) / $secs; print(f'0 0 {c:.3f} 0 {c:.3f} {$m / 1024:.1f} 0 0 0 0')" >>"$tmp/res.$1"
}

report() { # TITLE (LABEL NAME)...
	python3 - "$tmp" "$@" <<'PY'
import statistics, sys
tmp, title, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{title}")
print(f"  {'':36s} {'start CPU s':>11s} {'to ready s':>10s} {'rewind %':>9s} {'BPF %':>7s} {'sum %':>7s} {'RSS MB':>7s} {'lost':>8s}"
      f" {'procs/min':>9s} {'files/min':>9s} {'churn %':>7s}")
for label, name in zip(rest[::2], rest[1::2]):
    rows = [list(map(float, l.split())) for l in open(f"{tmp}/res.{name}") if l.strip()]
    med = [statistics.median(r[i] for r in rows) for i in range(10)]
    print(f"  {label:36s} {med[0]:11.2f} {med[1]:10.2f} {med[2]:9.3f} {med[3]:7.3f} {med[4]:7.3f} {med[5]:7.0f} {med[6]:8.0f}"
          f" {med[7]:9.0f} {med[8]:9.0f} {med[9]:7.3f}")
    for r in rows:
        print(f"  {'':38s}run: " + " ".join(f"{x:g}" for x in r))
PY
}

verdict() { # TEXT OK: one line per target
	if [ "$2" = 1 ]; then echo "  target: $1: met"; else echo "  target: $1: MISSED"; fi
}
med() { # NAME COLUMN: the median of a column (1-based) of a result file
	python3 -c "import statistics,sys; print(statistics.median(float(l.split()[$2-1]) for l in open('$tmp/res.$1') if l.strip()))"
}
le() { python3 -c "print(int($1 <= $2))"; }

agent_pairs() { # TITLE EXTRA-ARGS...
	local title=$1; shift
	local k
	for k in kagent uagent knosym unosym perf; do : >"$tmp/res.$k"; done
	for i in $(seq "$pairs"); do
		for in in kernel user; do
			REWIND_CACHE_DIR="$tmp/cache" measure_agent "${in:0:1}agent" "$tmp/rewind" agent --unwind-in $in -F "$hz" --period "${period}s" --out-dir "$tmp/out" "$@"
			if want nosym; then
				REWIND_CACHE_DIR="$tmp/cache" measure_agent "${in:0:1}nosym" "$tmp/rewind" agent --unwind-in $in -F "$hz" --period "${period}s" --out-dir "$tmp/out" --no-symbolize "$@"
			fi
		done
		if want perf; then measure_perf perf; fi
	done
	set -- "agent --unwind-in kernel" kagent "agent --unwind-in user" uagent
	want nosym && set -- "$@" "  ... --no-symbolize, kernel" knosym "  ... --no-symbolize, user" unosym
	want perf && set -- "$@" "perf record -a --call-graph dwarf" perf
	report "$title" "$@"
}

# A service runs with warm caches (unwind tables, symbol indexes): warm them.
REWIND_CACHE_DIR="$tmp/cache" "$tmp/rewind" agent -F "$hz" -d 5s --out-dir "$tmp/out" 2>/dev/null
"$tmp/cpu" 100000 "$ncpu" &
pids+=($!)
echo "rewind budget: $pairs pair(s), ${secs}s measured after $warm warm-up period(s) of ${period}s, ${hz} Hz; $(uptime)"

if want agent || want nosym || want perf; then
	agent_pairs "system-wide agent, CPU-bound fixture on $ncpu cores, ${hz} Hz"
	verdict "agent at ${hz} Hz ≤ 0.5% of one core (kernel, rewind + BPF, steady)" "$(le "$(med kagent 5)" 0.5)"
fi
if want pid; then
	agent_pairs "agent -p of the CPU-bound fixture only, ${hz} Hz" -p "${pids[0]}"
fi
if want many; then
	for i in $(seq 500); do "$tmp/sleeper" 1000 & pids+=($!); done
	sleep 1
	agent_pairs "the same with 500 more processes"
	for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; done
	pids=("${pids[0]}")
fi
if want offcpu; then
	bpids=()
	for i in $(seq 20); do "$tmp/block" >/dev/null & bpids+=($!); done
	pids+=("${bpids[@]}")
	sleep 1
	: >"$tmp/res.koff"; : >"$tmp/res.uoff"; : >"$tmp/res.boff"
	base=()
	for i in $(seq "$pairs"); do
		REWIND_CACHE_DIR="$tmp/cache" measure_agent koff "$tmp/rewind" agent --unwind-in kernel --off-cpu -F "$hz" --period "${period}s" --out-dir "$tmp/out"
		if [ -n "${BUDGET_BASE:-}" ]; then
			REWIND_CACHE_DIR="$tmp/cache" measure_agent boff "$tmp/rewind.base" agent --unwind-in kernel --off-cpu -F "$hz" --period "${period}s" --out-dir "$tmp/out"
			base=("  ... kernel, at $BUDGET_BASE" boff)
		fi
		REWIND_CACHE_DIR="$tmp/cache" measure_agent uoff "$tmp/rewind" agent --unwind-in user --off-cpu -F "$hz" --period "${period}s" --out-dir "$tmp/out"
	done
	report "agent --off-cpu: 20 processes blocking 500 times a second each, beside the CPU-bound fixture, ${hz} Hz" \
		"agent --off-cpu --unwind-in kernel" koff "${base[@]}" "agent --off-cpu --unwind-in user" uoff
	verdict "off-CPU: 0 records lost (kernel)" "$(le "$(med koff 7)" 0)"
	verdict "off-CPU ≤ 3% of one core (kernel, rewind + BPF, steady)" "$(le "$(med koff 5)" 3)"
	verdict "off-CPU ≤ 150 MB RSS (kernel)" "$(le "$(med koff 6)" 150)"
	kill "${bpids[@]}" 2>/dev/null || true
fi
if want record; then
	kill "${pids[0]}" 2>/dev/null || true # the command recorded is the only CPU-bound one
	# Rounds of the fixture's work for about SECONDS of CPU per thread.
	read -r w c < <("$tmp/cpu" -w 2000 1)
	rounds=$(python3 -c "print(max(100, int(2000 * $secs / max($c / 2, 1e-3))))")
	: >"$tmp/res.krec"; : >"$tmp/res.urec"; : >"$tmp/res.bare"
	for i in $(seq "$pairs"); do
		"$tmp/cpu" -w "$rounds" 1 >>"$tmp/res.bare"
		for in in kernel user; do
			REWIND_CACHE_DIR="$tmp/cache" /usr/bin/time -f "%U %S %M %e" -o "$tmp/time.rec" "$tmp/rewind" record --unwind-in $in -q -F 999 \
				-o "$tmp/$in.folded" -- "$tmp/cpu" -w "$rounds" 1 >"$tmp/work.rec" 2>"$tmp/err.rec" || { cat "$tmp/err.rec" >&2; exit 1; }
			read -r u s m e < <(tail -1 "$tmp/time.rec")
			read -r ww wc < <(tail -1 "$tmp/work.rec")
			bpf=$({ grep -o 'BPF unwinder ran [0-9]* times, [0-9.]* ms' "$tmp/err.rec" || true; } | awk '{s+=$6} END {print s/1000+0}')
			lost=$({ grep -o '[0-9]* lost' "$tmp/err.rec" || true; } | awk '{s+=$1} END {print s+0}')
			# rewind% bpf% sum% (of the command's wall time), RSS, lost, the command's wall and CPU.
			# time(1) counts the recorded command (rewind's child) in rewind's CPU: the
			# command's own CPU, as it prints it, is taken off.
			python3 -c "r = max($u+$s-$wc, 0); print(f'{100*r/$ww:.3f} {100*$bpf/$ww:.3f} {100*(r+$bpf)/$ww:.3f} {$m/1024:.1f} $lost $ww $wc')" >>"$tmp/res.${in:0:1}rec"
		done
	done
	python3 - "$tmp" "$rounds" <<'PY'
import statistics, sys
tmp, rounds = sys.argv[1], sys.argv[2]
rd = lambda n: [list(map(float, l.split())) for l in open(f"{tmp}/res.{n}") if l.strip()]
k, u, b = rd("krec"), rd("urec"), rd("bare")
print(f"rewind record -F 999 of the CPU-bound fixture (2 threads, cpu -w {rounds} 1)")
print(f"  {'':32s} {'rewind %':>9s} {'BPF %':>7s} {'sum %':>7s} {'RSS MB':>7s} {'lost':>7s} {'cmd wall s':>10s} {'cmd CPU s':>9s}")
for label, rows in (("record --unwind-in kernel", k), ("record --unwind-in user", u)):
    m = [statistics.median(r[i] for r in rows) for i in range(7)]
    print(f"  {label:32s} {m[0]:9.3f} {m[1]:7.3f} {m[2]:7.3f} {m[3]:7.0f} {m[4]:7.0f} {m[5]:10.2f} {m[6]:9.2f}")
print(f"  {'bare command':32s} {'':9s} {'':7s} {'':7s} {'':7s} {'':7s} {statistics.median(r[0] for r in b):10.2f} {statistics.median(r[1] for r in b):9.2f}")
ratios = [kr[2] / ur[2] for kr, ur in zip(k, u) if ur[2] > 0]
r = statistics.median(ratios)
print(f"  kernel/user overhead, median of pairs: {r:.2f} {[round(x, 2) for x in ratios]}")
print(f"  target: record -F 999 overhead (kernel: rewind + BPF) ≤ half of user's (rewind): {'met' if r <= 0.5 else 'MISSED'}")
PY
fi
echo "done; $(uptime)"
