#!/usr/bin/env bash
# Samples per second and the share of samples named from a JIT's perf map,
# for rewind record (--unwind-in kernel and user) beside perf record -g on
# the same workload (issue 40 item 6), in interleaved runs; medians are
# printed.
#
#   scripts/jit-numbers.sh [RUNS] [SECONDS] [HZ]    # default 3 4 499
#
# Workloads, each a fresh process per run (run as root):
#   node   node --perf-basic-prof --interpreted-frames-native-stack, spinning
#          in jsHot <- jsMid <- jsTop; named: the leaf user frame is JS:*
#          or JS:~ (V8's optimized and interpreted functions);
#   java   java -XX:+PreserveFramePointer spinning in Spin.hot <- mid <- top,
#          its perf map written by jcmd Compiler.perfmap once warm, then
#          recorded with -p for SECONDS; named: the leaf user frame is one
#          of the map's Java methods.
# perf's share comes from perf report --no-children --sort sym (the leaf
# symbol of each sample); rewind's from its folded output's leaf user
# frame.
set -euo pipefail
RUNS=${1:-3} SECS=${2:-4} HZ=${3:-499}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
ls /tmp/perf-*.map >"$work/maps-before" 2>/dev/null || true
# The runtimes leave their perf maps behind: those of this run go.
cleanup() {
	pkill -f "$work" 2>/dev/null || true
	for m in /tmp/perf-*.map; do
		[ -e "$m" ] && ! grep -qxF "$m" "$work/maps-before" && rm -f "$m"
	done
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/rewind" ./cmd/rewind

cat > "$work/app.js" <<EOF
function jsHot(n) { let s = 0; for (let i = 0; i < n; i++) s += Math.sqrt(i ^ n); return s; }
function jsMid(n) { return jsHot(n) + 1; }
function jsTop(n) { return jsMid(n) * 2; }
const end = Date.now() + ${SECS}000;
let t = 0;
while (Date.now() < end) t += jsTop(1e5);
EOF
cat > "$work/Spin.java" <<'EOF'
public class Spin {
    static double hot(int n) { double s = 0; for (int i = 0; i < n; i++) s += Math.sqrt(i ^ n); return s; }
    static double mid(int n) { return hot(n) + 1; }
    static double top(int n) { return mid(n) * 2; }
    public static void main(String[] a) { double t = 0; for (;;) t += top(10000); }
}
EOF
javac -J-XX:-UsePerfData -d "$work" "$work/Spin.java"

# folded_stats FILE SECONDS: samples/s and the named share of the leaf
# user frames.
folded_stats() {
	awk -v secs="$2" '{
		n = $NF; $NF = ""; k = split($0, f, ";"); leaf = ""
		for (i = k; i > 1; i--) if (f[i] !~ /_\[k\] *$/) { leaf = f[i]; break }
		t += n
		if (leaf ~ /^(JS:[*~]|double Spin\.|void Spin\.)/) named += n
	} END { printf "%.1f %.1f\n", t / secs, t ? 100 * named / t : 0 }' "$1"
}

# perf_stats DATA SECONDS
perf_stats() {
	local total
	total=$(perf script -i "$1" -F tid 2>/dev/null | wc -l) # (one line a sample: no callchain without ip)
	perf report -i "$1" --no-children --sort sym --stdio 2>/dev/null | awk -v secs="$2" -v total="${total:-0}" '
		/^ *[0-9.]+%/ { p = $1; sub(/%/, "", p); line = $0; sub(/^ *[0-9.]+% +\[[^]]*\] +/, "", line)
			if (line ~ /^(JS:[*~]|double Spin\.|void Spin\.)/) named += p }
		END { printf "%.1f %.1f\n", total / secs, named }'
}

run_node() { # TOOL OUT
	case $1 in
	perf) perf record -q -F "$HZ" -g -o "$2" -- node --perf-basic-prof --interpreted-frames-native-stack --logfile="$work/v8.log" "$work/app.js" >/dev/null 2>&1 ;;
	*) "$work/rewind" record --unwind-in "$1" -F "$HZ" -o "$2" -- node --perf-basic-prof --interpreted-frames-native-stack --logfile="$work/v8.log" "$work/app.js" >/dev/null 2>&1 ;;
	esac
}

run_java() { # TOOL OUT
	java -XX:+PreserveFramePointer -XX:-UsePerfData -cp "$work" Spin >/dev/null 2>&1 &
	local pid=$!
	sleep 6
	jcmd -J-XX:-UsePerfData "$pid" Compiler.perfmap >/dev/null
	case $1 in
	perf) perf record -q -F "$HZ" -g -p "$pid" -o "$2" -- sleep "$SECS" >/dev/null 2>&1 ;;
	*) "$work/rewind" record --unwind-in "$1" -p "$pid" -d "$SECS" -F "$HZ" -o "$2" >/dev/null 2>&1 ;;
	esac
	jcmd -J-XX:-UsePerfData "$pid" Compiler.perfmap >/dev/null # (perf report reads the map now)
	echo "$pid" >"$2.pid"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for wl in node java; do
	for r in $(seq "$RUNS"); do
		for tool in kernel user perf; do
			out="$work/$wl-$tool-$r"
			if [ "$tool" = perf ]; then
				"run_$wl" perf "$out.data"
				perf_stats "$out.data" "$SECS" >"$out.stats"
			else
				"run_$wl" "$tool" "$out.folded"
				folded_stats "$out.folded" "$SECS" >"$out.stats"
			fi
			[ -f "$out.data.pid" ] && kill "$(cat "$out.data.pid")" 2>/dev/null || true
			[ -f "$out.folded.pid" ] && kill "$(cat "$out.folded.pid")" 2>/dev/null || true
			wait 2>/dev/null || true
		done
	done
	for tool in kernel user perf; do
		rate=$(cat "$work/$wl-$tool-"*.stats | awk '{ print $1 }' | median)
		named=$(cat "$work/$wl-$tool-"*.stats | awk '{ print $2 }' | median)
		printf '%-5s %-7s %8s samples/s  %5s%% named   (median of %d runs of %d s at %d Hz)\n' "$wl" "$tool" "$rate" "$named" "$RUNS" "$SECS" "$HZ"
	done
done
