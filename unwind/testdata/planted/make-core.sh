#!/bin/sh
# Rebuilds root (from root.S) and root.core, the kernel's core dump of it,
# for unwind's TestNoReturnCallBeforeEntry: a static program without a C
# library whose middle function's return address is the first byte of
# _start.
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
work=$(mktemp -d /tmp/unwind-planted.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -static -no-pie -nostdlib -Wl,--build-id -o "$here/root" "$here/root.S"
cp "$here/root" "$work/root"
cd "$work"
# An empty environment: the core holds the stack, environment included.
(ulimit -c unlimited; exec env -i ./root) || true
test -f core || { echo "make-core.sh: no core was written" >&2; exit 1; }
mv core "$here/root.core"
chmod 644 "$here/root.core"
