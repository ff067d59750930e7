#!/usr/bin/env bash
# Compares a warm `rewind dump PID` between the rewind of a git revision
# (default: main) and the working tree, as medians of interleaved runs,
# each binary with its own warm cache.
#
#   scripts/dump-ab.sh [REV] [RUNS]                 # e.g. scripts/dump-ab.sh main 30
#   scripts/dump-ab.sh --goroutines [REV] [RUNS]    # default 31 runs
#
# Threads (the default): the wall time of the whole dump; the target is a
# 9-thread C program blocked in pause(), built with gcc.
#
# --goroutines: the pause of `rewind dump PID --goroutines --stats` (the
# target's stop time, from the first PTRACE_INTERRUPT to the last
# PTRACE_DETACH, as --stats prints it) on a Go program with 761 goroutines
# parked on channel receives (goroutines/testdata/parked "bench N"), built
# plain and with -ldflags='-s -w' (stripped), each in two states: "fresh",
# run with GOGC=off so that no collection has seen its goroutines parked
# (as in a program that started them less than 2 minutes before), and
# "collected", after two runtime.GC calls. Each row: medians of the pause
# and of the whole dump's wall time for both binaries; below the rows, the
# medians of the working tree's pause steps (its --stats "pause steps" and
# goroutine read lines). The target's threads are listed, with the least
# any Go program can do for a dump of them (scripts/floor pause: seize,
# stop, read the registers, detach, nothing read), run after each pair.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=threads
if [ "${1:-}" = --goroutines ]; then
	mode=goroutines
	shift
fi
rev=${1:-main}
runs=${2:-}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	git worktree remove --force "$tmp/src" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

git worktree add -q --detach "$tmp/src" "$rev"
(cd "$tmp/src" && go build -o "$tmp/rewind-base" ./cmd/rewind)
go build -o "$tmp/rewind-new" ./cmd/rewind

if [ "$mode" = goroutines ]; then
	runs=${runs:-31}
	go build -o "$tmp/parked" ./goroutines/testdata/parked
	go build -ldflags='-s -w' -o "$tmp/parked-stripped" ./goroutines/testdata/parked
	go build -o "$tmp/floor" ./scripts/floor
	targets=()
	for bin in parked parked-stripped; do
		for state in fresh collected; do
			name=$bin-$state
			mkfifo "$tmp/$name.in"
			# 754 parked + main + the runtime's 6 = 761; a collection
			# adds its 2 mark workers.
			if [ "$state" = fresh ]; then
				GOGC=off "$tmp/$bin" bench 754 <"$tmp/$name.in" >"$tmp/$name.out" 2>&1 &
			else
				"$tmp/$bin" bench 752 <"$tmp/$name.in" >"$tmp/$name.out" 2>&1 &
			fi
			p=$!
			pids+=("$p")
			disown "$p"
			# Held open: the program ends when its stdin does.
			eval "exec {fd}>\"$tmp/$name.in\""
			until grep -q ready "$tmp/$name.out"; do sleep 0.05; done
			if [ "$state" = collected ]; then
				echo gc >&"$fd"
				until grep -q '^ok' "$tmp/$name.out"; do sleep 0.05; done
			fi
			targets+=("$name=$p")
		done
	done
	python3 - "$tmp" "$runs" "$rev" "${targets[@]}" <<'PY'
import os, re, statistics, subprocess, sys, time
tmp, runs, rev, targets = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
bins = {"base": tmp + "/rewind-base", "new": tmp + "/rewind-new"}
num = r"([0-9.]+)"

def dump(b, pid, cache):
    env = dict(os.environ, REWIND_CACHE_DIR=cache)
    t = time.perf_counter()
    p = subprocess.run([b, "dump", pid, "--goroutines", "--stats"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{b} dump {pid} --goroutines: exit {p.returncode}:\n{p.stderr}")
    wall = (time.perf_counter() - t) * 1000
    m = re.search(r"pause " + num + " ms", p.stderr)
    n = re.search(r"(\d+) goroutines", p.stderr)
    return float(m.group(1)), wall, int(n.group(1)) if n else 0, p.stderr

def steps(stderr):
    """The working tree's pause steps and goroutine read, name -> ms."""
    out = {}
    m = re.search(r"pause steps \(ms\): (.*?)(;|$)", stderr, re.M)
    if m:
        for part in m.group(1).split(", "):
            k, _, v = part.rpartition(" ")
            out[k] = float(v)
    m = re.search(r"(\d+) of \d+ threads left asleep", stderr)
    out["threads left asleep"] = int(m.group(1)) if m else 0
    m = re.search(r"goroutines read \(ms\): " + num + r": list " + num + ", gs " + num +
                  ", stacks " + num + ", labels " + num, stderr)
    if m:
        for k, v in zip(("read", "read: list", "read: gs", "read: stacks", "read: labels"), m.groups()):
            out[k] = float(v)
    return out

def floor(pid):
    out = subprocess.run([tmp + "/floor", "pause", pid], check=True, capture_output=True, text=True).stdout
    return int(out.split()[0]) / 1000

med = statistics.median
print(f"rewind dump PID --goroutines --stats, {runs} interleaved runs per row after 2 warm-up runs; "
      f"load average {open('/proc/loadavg').read().split()[0]} at the start, {os.cpu_count()} CPUs")
print(f"{'target':28} {'goroutines':>10} {'threads':>7} {'pause ' + rev:>14} {'pause tree':>11} {'ratio':>6} "
      f"{'dump ' + rev:>12} {'dump tree':>10}")
allsteps = {}
for t in targets:
    name, pid = t.split("=")
    pause = {k: [] for k in bins}
    wall = {k: [] for k in bins}
    st, fl, count = [], [], 0
    for i in range(runs + 2):
        order = list(bins.items()) if i % 2 == 0 else list(bins.items())[::-1]
        for k, b in order:
            p, w, n, err = dump(b, pid, f"{tmp}/cache-{k}")
            if i >= 2:  # the first two runs fill the caches
                pause[k].append(p)
                wall[k].append(w)
                if k == "new":
                    st.append(steps(err))
                    count = n
        if i >= 2:
            fl.append(floor(pid))
    threads = len(os.listdir(f"/proc/{pid}/task"))
    b, n = med(pause["base"]), med(pause["new"])
    print(f"{name:28} {count:>10} {threads:>7} {b:>11.2f} ms {n:>8.2f} ms {n / b:>6.3f} "
          f"{med(wall['base']):>9.1f} ms {med(wall['new']):>7.1f} ms")
    allsteps[name] = (st, med(fl))
print()
print("working tree, medians of its --stats steps (ms); floor: the pause of scripts/floor pause PID (stop and resume, nothing read)")
for name, (st, fl) in allsteps.items():
    keys = []
    for s in st:
        keys += [k for k in s if k not in keys]
    parts = [f"{k} {med([s.get(k, 0) for s in st]):.3f}" for k in keys]
    print(f"  {name}: " + ", ".join(parts) + f"; floor {fl:.3f}")
PY
	exit 0
fi

runs=${runs:-30}
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
pids+=("$pid")
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
