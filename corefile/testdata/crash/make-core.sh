#!/bin/sh
# Rebuilds crash (from crash.c) and crash.core, the kernel's core dump of
# it, for corefile's example: a static program without a C library, so the
# core is small (about 180 KB, mostly the stack's zero pages) and its
# stack is fixed. The file names in its DWARF are relative to this
# directory.
#
# Usage: sh make-core.sh    (from any directory; needs gcc for x86-64 and
# a kernel.core_pattern that writes a file named "core" in the current
# directory, as the default one does)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
case $(cat /proc/sys/kernel/core_pattern) in
core) ;;
*) echo "make-core.sh: kernel.core_pattern is '$(cat /proc/sys/kernel/core_pattern)', want 'core'" >&2; exit 1 ;;
esac
work=$(mktemp -d /tmp/corefile-crash.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -O1 -g -static -no-pie -nostdlib -fno-omit-frame-pointer -Wl,--build-id \
	-fdebug-prefix-map="$here"=. -o "$here/crash" "$here/crash.c"
cp "$here/crash" "$work/crash"
cd "$work"
# An empty environment: the core holds the stack, environment included.
(ulimit -c unlimited; exec env -i ./crash) || true
test -f core || { echo "make-core.sh: no core was written" >&2; exit 1; }
mv core "$here/crash.core"
chmod 644 "$here/crash.core"
