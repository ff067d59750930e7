#!/bin/sh
# Rebuilds spin (from spin.c) and perf.data, perf's recording of it with
# DWARF call graphs, for the profiles example: a static program without a
# C library, so the recording names one file and is small (about 16 KB).
# The file names in spin's DWARF are relative to this directory.
#
# Usage: sh make-perfdata.sh    (from any directory; needs gcc for x86-64,
# perf, and perf_event_open permission for user-space sampling)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/profiles-spin.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O1 -g -static -no-pie -nostdlib -fno-omit-frame-pointer -Wl,--build-id \
	-fdebug-prefix-map="$here"=. -o "$here/spin" "$here/spin.c"
cp "$here/spin" "$work/spin"
cd "$work"
# User space only (no kernel frames, which would need this kernel's
# symbols), an empty environment (the stack copies hold the top of the
# stack), 1 KB of stack per sample.
perf record -q -e cpu-clock:u -F 50 --call-graph dwarf,1024 -o perf.data env -i ./spin
mv perf.data "$here/perf.data"
chmod 644 "$here/perf.data"
