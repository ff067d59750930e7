#!/usr/bin/env bash
# The cost of the Lua runtime in a dump (issue 41 item 6): a luajit
# process with N suspended coroutines (default 10000), each parked in
# coroutine.yield three Lua calls deep, its main thread parked in io.read,
# dumped by `rewind dump PID` and `rewind dump --no-lua PID` in turn
# (interleaved, warm cache), and the same with --fibers (which lists each
# coroutine); prints the medians of each's wall time and the ratios (the
# target: at most 2).
#
#   scripts/bench-lua.sh [N] [RUNS]     # e.g. scripts/bench-lua.sh 10000 21
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
runs=${2:-21}
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/rewind" ./cmd/rewind
cat >"$tmp/coroutines.lua" <<'LUA'
local n = tonumber(arg[1])
local function leaf(i) coroutine.yield(i) end
local function mid(i) leaf(i) end
local cos = {}
for i = 1, n do
  local co = coroutine.create(function(i) mid(i) end)
  coroutine.resume(co, i)
  cos[i] = co
end
print("ready") io.stdout:flush()
io.read()
LUA
mkfifo "$tmp/in"
luajit "$tmp/coroutines.lua" "$n" <"$tmp/in" >"$tmp/out" 2>&1 &
pid=$!
disown "$pid"
exec {fd}>"$tmp/in" # held open: io.read waits
until grep -q ready "$tmp/out"; do sleep 0.05; done
python3 - "$tmp/rewind" "$pid" "$runs" "$n" <<'PY'
import statistics, subprocess, sys, time
rewind, pid, runs, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cmds = {"": [rewind, "dump", pid], "--no-lua": [rewind, "dump", "--no-lua", pid],
        "--fibers": [rewind, "dump", "--fibers", pid], "--fibers --no-lua": [rewind, "dump", "--fibers", "--no-lua", pid]}
times = {k: [] for k in cmds}
fibers = {}
for k, c in cmds.items():  # warm the cache, and count what each shows
    out = subprocess.run(c, capture_output=True, text=True, check=True).stdout
    fibers[k] = out.count("fiber coroutine")
for _ in range(runs):
    for k, c in cmds.items():
        t = time.perf_counter()
        subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times[k].append(time.perf_counter() - t)
m = {k: statistics.median(v) * 1000 for k, v in times.items()}
print(f"luajit, {n} suspended coroutines; medians of {runs} interleaved runs")
for k in cmds:
    print(f"  {'rewind dump ' + k + (' ' if k else '') + 'PID':40s} {m[k]:8.1f} ms  ({fibers[k]} coroutines listed)")
print(f"  ratio, plain:     {m[''] / m['--no-lua']:.2f}")
print(f"  ratio, --fibers:  {m['--fibers'] / m['--fibers --no-lua']:.2f}")
PY
