#!/bin/sh
# Rebuilds the fixtures of the SFrame generator's readelf check
# (sframe/gen_fixture_test.go):
#
#   input-ARCH.so      a shared library made, WITHOUT --gsframe, from the
#                      committed assembler files ../src/special-x86_64.s and
#                      ../src/funcs-ARCH-O2.s by Debian bookworm's binutils
#                      2.40 (as, ld; the aarch64 cross tools for aarch64);
#   gen-vN-ARCH.so     input-ARCH.so with the .sframe section that
#                      `rewind sframe gen --version N` adds;
#   gen-vN-ARCH.so.txt `readelf --sframe` of it by the binutils release that
#                      produced SFrame version N: 2.40 (bookworm, the system
#                      readelf) for v1, 2.44 (trixie) for v2, 2.47 (sid) for
#                      v3.
#
# The trixie and sid readelf are the unpacked ones ../make-fixtures.sh sets
# up: run it once (or its tools() part) with WORK=DIR and pass the same DIR
# here. Every readelf run must be silent on stderr, and readelf -lSW must
# accept each generated file too.
#
# Usage: WORK=DIR sh make-gen-fixtures.sh   (from any directory)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${WORK:?set WORK to the directory make-fixtures.sh used}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

readelf_for() { # VERSION ARCH
	case $1 in
	1) if [ "$2" = x86_64 ]; then echo readelf; else echo aarch64-linux-gnu-readelf; fi ;;
	2) echo "$work/trixie/bin/$2-readelf" ;;
	3) echo "$work/sid/bin/$2-readelf" ;;
	esac
}

# checked READELF ARGS...: run readelf, fail on anything on stderr.
checked() {
	"$@" 2>"$tmp/err"
	if [ -s "$tmp/err" ]; then
		echo "$*:" >&2
		cat "$tmp/err" >&2
		exit 1
	fi
}

(cd "$root" && go build -o "$tmp/rewind" ./cmd/rewind)

as -o "$tmp/special.o" "$here/../src/special-x86_64.s"
as -o "$tmp/funcs-x86_64.o" "$here/../src/funcs-x86_64-O2.s"
ld -shared -z noseparate-code -z max-page-size=4096 -o "$here/input-x86_64.so" "$tmp/special.o" "$tmp/funcs-x86_64.o"
aarch64-linux-gnu-as -o "$tmp/funcs-aarch64.o" "$here/../src/funcs-aarch64-O2.s"
aarch64-linux-gnu-ld -shared -z noseparate-code -z max-page-size=4096 -o "$here/input-aarch64.so" "$tmp/funcs-aarch64.o"

for a in x86_64 aarch64; do
	for v in 1 2 3; do
		out=$here/gen-v$v-$a.so
		"$tmp/rewind" sframe gen --version $v -o "$out" "$here/input-$a.so" >/dev/null
		re=$(readelf_for $v $a)
		checked "$re" -lSW "$out" >/dev/null
		checked "$re" --sframe "$out" >"$out.txt"
	done
done
{
	echo "# made by make-gen-fixtures.sh; readelf versions:"
	for v in 1 2 3; do "$(readelf_for $v x86_64)" --version | head -n 1; done
} >"$here/VERSION"
echo "fixtures written to $here"
