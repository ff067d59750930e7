#!/usr/bin/env bash
# How long reading a process stalls it, measured from inside (issue 42
# item 3): the target (scripts/stall/stall.c, built here with gcc) has N
# threads blocked for ever on a condition variable and 2 sleepers that
# loop on nanosleep(200 us) and record how late each wake-up is. Each
# command below runs against it with the target told to forget its
# lateness just before and asked for the largest since just after (once
# both sleepers have woken twice more): that is the stall the command
# caused, plus what the machine adds anyway.
#
#   scripts/stall-numbers.sh [RUNS] [N...]     # default 9 runs, N = 16 2000
#
#   no-op        rewind --version: the floor, starting and ending a process
#   dump         rewind dump PID (blocked threads read in place, not stopped)
#   dump --stop  rewind dump --stop PID (every thread stopped, as gdb does)
#   eu-stack     eu-stack -p PID
#   gdb          gdb -batch -p PID -ex 'thread apply all bt'
#
# Per N and command: the median, least and most of RUNS runs' largest
# lateness, the median's excess over the no-op's, and for rewind the
# median pause --stats printed. Runs are interleaved (each round runs
# every command once, in an order rotated round to round) after one
# warm-up round that fills rewind's cache. Then one goroutine dump
# (rewind dump --goroutines --json --stats) of goroutines/testdata/parked
# with 761 goroutines whose threads are idle: its pause and whether it
# stopped any thread. Needs root (ptrace and BPF), gcc, eu-stack, gdb.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-9}
shift || true
ns=("$@")
[ ${#ns[@]} -gt 0 ] || ns=(16 2000)
tmp=$(mktemp -d)
cleanup() {
	# The targets the Python part started (it may have exited early).
	if [ -f "$tmp/pids" ]; then
		while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$tmp/pids"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/rewind" ./cmd/rewind
gcc -O2 -g -pthread -o "$tmp/stall" scripts/stall/stall.c
go build -o "$tmp/parked" ./goroutines/testdata/parked

python3 - "$tmp" "$runs" "${ns[@]}" <<'PY'
import json, os, re, statistics, subprocess, sys, time
tmp, runs, ns = sys.argv[1], int(sys.argv[2]), [int(n) for n in sys.argv[3:]]
rw = tmp + "/rewind"
env = dict(os.environ, REWIND_CACHE_DIR=tmp + "/cache")
cmds = [
    ("no-op", lambda pid: [rw, "--version"]),
    ("dump", lambda pid: [rw, "dump", "--stats", pid]),
    ("dump --stop", lambda pid: [rw, "dump", "--stop", "--stats", pid]),
    ("eu-stack", lambda pid: ["eu-stack", "-p", pid]),
    ("gdb", lambda pid: ["gdb", "-batch", "-p", pid, "-ex", "thread apply all bt"]),
]

class Target:
    def __init__(self, args):
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            sys.exit(f"{args}: printed {line!r}, not ready")
        self.pid = str(self.p.pid)
        open(tmp + "/pids", "a").write(self.pid + "\n")

    def ask(self, q):
        self.p.stdin.write(q + "\n")
        return self.p.stdout.readline().strip()

    def end(self):
        self.p.kill()
        self.p.wait()

def pause_ms(stderr):
    m = re.search(r"pause ([0-9.]+) ms", stderr)
    return float(m.group(1)) if m else None

def measure(tg, argv):
    if tg.ask("m") != "ok":
        sys.exit("target did not answer m")
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    late = int(tg.ask("g")) / 1e6
    if p.returncode != 0:
        sys.exit(f"{argv}: exit {p.returncode}:\n{p.stderr[-2000:]}")
    return late, pause_ms(p.stderr)

def idle(tg, n=9):
    """Largest lateness of 50 ms with nothing run, median of n."""
    out = []
    for _ in range(n):
        tg.ask("m")
        time.sleep(0.05)
        out.append(int(tg.ask("g")) / 1e6)
    return statistics.median(out)

med = statistics.median
load = open("/proc/loadavg").read().split()[:3]
print(f"target's largest wake-up lateness (ms) during each command; {runs} interleaved runs after 1 warm-up round; "
      f"load {' '.join(load)} at the start, {os.cpu_count()} CPUs, kernel {os.uname().release}")
for n in ns:
    tg = Target([tmp + "/stall", str(n)])
    lat = {name: [] for name, _ in cmds}
    pause = {name: [] for name, _ in cmds}
    base = idle(tg)
    for r in range(runs + 1):
        k = r % len(cmds)
        for name, argv in cmds[k:] + cmds[:k]:
            l, ps = measure(tg, argv(tg.pid))
            if r > 0:
                lat[name].append(l)
                if ps is not None:
                    pause[name].append(ps)
    threads = len(os.listdir(f"/proc/{tg.pid}/task"))
    tg.end()
    floor = med(lat["no-op"])
    print(f"\nN = {n} blocked threads ({threads} threads in all); idle, 50 ms with nothing run: {base:.2f} ms")
    print(f"{'command':14} {'median':>8} {'least':>8} {'most':>8} {'excess':>8} {'rewind pause':>13}")
    for name, _ in cmds:
        xs = lat[name]
        ps = f"{med(pause[name]):.2f} ms" if pause[name] else ""
        print(f"{name:14} {med(xs):8.2f} {min(xs):8.2f} {max(xs):8.2f} {med(xs) - floor:8.2f} {ps:>13}")

# A goroutine dump of a Go program whose threads are idle: 754 parked
# goroutines + main + the runtime's = 761.
gp = subprocess.Popen([tmp + "/parked", "bench", "754"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                      env=dict(os.environ, GOGC="off"))
open(tmp + "/pids", "a").write(str(gp.pid) + "\n")
while gp.stdout.readline().strip() != "ready":
    pass
pauses, stopped_runs, count = [], 0, 0
for r in range(runs + 1):
    p = subprocess.run([rw, "dump", "--goroutines", "--json", "--stats", str(gp.pid)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"goroutine dump: exit {p.returncode}:\n{p.stderr[-2000:]}")
    rep = json.loads(p.stdout)
    count = len(rep["goroutines"])
    if r > 0:
        pauses.append(rep.get("pause_us", 0) / 1000)
        if "no thread stopped" not in p.stderr:
            stopped_runs += 1
threads = len(os.listdir(f"/proc/{gp.pid}/task"))
gp.kill()
gp.wait()
print(f"\nrewind dump --goroutines --json --stats, {count} goroutines on {threads} idle threads, {runs} runs: "
      f"pause median {med(pauses):.2f} ms (most {max(pauses):.2f}); runs that stopped a thread: {stopped_runs}")
PY
