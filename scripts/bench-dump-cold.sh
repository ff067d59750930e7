#!/usr/bin/env bash
# The first dump on a machine against eu-stack (issue 30, item 3): the
# wall time of `rewind dump PID` with an empty cache directory (cold: a
# fresh REWIND_CACHE_DIR for every run) and with a filled one (warm),
# each beside plain `eu-stack -p PID` on the 17-thread fixture that
# scripts/bench-peers.sh dumps. Medians of interleaved pairs (the two
# commands alternate which goes first; every command runs once, untimed,
# before its pairs), then the median --stats phase times of extra cold
# and warm runs, which say where a cold run's time goes.
#
#   scripts/bench-dump-cold.sh [PAIRS] [REWIND]   # default 21, a fresh build
#
# Targets: cold ≤ 1.0x eu-stack's wall, warm ≤ 0.5x. Needs root (ptrace),
# gcc, eu-stack (elfutils) and libc6-dbg (file:line in libc).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-21}
tmp=$(mktemp -d)
tpid=
cleanup() {
	[ -n "$tpid" ] && kill -9 "$tpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

for t in gcc eu-stack python3; do
	command -v "$t" >/dev/null || { echo "$t is needed (eu-stack: apt-get install elfutils)" >&2; exit 2; }
done
dpkg -s libc6-dbg >/dev/null 2>&1 || echo "libc6-dbg is not installed: no file:line in libc, so a cold run reads no DWARF of it" >&2

rw=${2:-}
if [ -z "$rw" ]; then
	CGO_ENABLED=0 go build -o "$tmp/rewind" ./cmd/rewind # as README's install line builds it
	rw=$tmp/rewind
fi
csrc=internal/testutil/fixture/csrc
gcc -O2 -g -pthread -I"$csrc" -o "$tmp/threads" "$csrc/threads.c" "$csrc/libfix.c"
"$tmp/threads" >/dev/null 2>&1 &
tpid=$!
disown "$tpid"
until [ "$(ls /proc/$tpid/task 2>/dev/null | wc -l)" -ge 17 ]; do sleep 0.05; done

echo "rewind dump, cold and warm, vs eu-stack -p: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "machine: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), kernel $(uname -r); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$rw" "$tpid" "$pairs" "$tmp" <<'PY'
import os, re, shutil, statistics, subprocess, sys, time
rw, pid, n, tmp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
warmdir = os.path.join(tmp, "warm")
count = [0]
def cold_env():
    # A fresh, empty directory for every cold run (made before the clock
    # starts, removed after it stops).
    count[0] += 1
    d = os.path.join(tmp, f"cold{count[0]}")
    os.mkdir(d)
    return dict(os.environ, REWIND_CACHE_DIR=d), d
def run(cmd, env=None):
    s = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    t = time.perf_counter() - s
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.decode()[-500:]}")
    return t, r.stderr.decode()
def rewind(cold, stats=False):
    cmd = [rw, "dump", pid] + (["--stats"] if stats else [])
    if cold:
        env, d = cold_env()
        t, err = run(cmd, env)
        shutil.rmtree(d)
        return t, err
    return run(cmd, dict(os.environ, REWIND_CACHE_DIR=warmdir))
eu = ["eu-stack", "-p", pid]
def pairs(cold):
    rewind(cold); run(eu)
    ta, tb, rs = [], [], []
    for i in range(n):
        if i % 2:
            y, _ = run(eu); x, _ = rewind(cold)
        else:
            x, _ = rewind(cold); y, _ = run(eu)
        ta.append(x); tb.append(y); rs.append(x / y)
    return statistics.median(ta), statistics.median(tb), statistics.median(rs)
# The file:line and inlined frames are there, or the comparison is void.
out = subprocess.run([rw, "dump", pid], capture_output=True, text=True,
                     env=cold_env()[0]).stdout
if not re.search(r"\.c:\d+", out) or "[inlined]" not in out:
    sys.exit("rewind dump printed no file:line or no inlined frame:\n" + out[:2000])
cold = pairs(True)
warm = pairs(False)
print(f"{'what':<36} {'rewind ms':>9} {'eu-stack ms':>11} {'rewind/eu':>9}  target")
print(f"{'dump, empty cache, vs eu-stack -p':<36} {cold[0]*1e3:9.2f} {cold[1]*1e3:11.2f} {cold[2]:8.2f}x  <= 1.0x")
print(f"{'dump, warm cache, vs eu-stack -p':<36} {warm[0]*1e3:9.2f} {warm[1]*1e3:11.2f} {warm[2]:8.2f}x  <= 0.5x")
# Where the time goes: --stats of further runs (not timed above).
def phases(cold):
    got = {}
    for _ in range(max(5, n // 2)):
        _, err = rewind(cold, stats=True)
        line = next((l for l in err.splitlines() if " total " in l), "")
        for name, ms in re.findall(r"(\w+) ([0-9.]+) ms", line):
            got.setdefault(name, []).append(float(ms))
    return ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in got.items())
print(f"--stats, medians of {max(5, n // 2)} runs, ms: cold: {phases(True)}")
print(f"--stats, medians of {max(5, n // 2)} runs, ms: warm: {phases(False)}")
PY
