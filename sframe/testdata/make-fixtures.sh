#!/bin/sh
# Rebuilds the SFrame v2 and v3 fixtures under sframe/testdata and the
# readelf --sframe dumps they are compared with.
#
# Debian bookworm's binutils (2.40) only emit SFrame version 1, so the
# fixtures come from newer binutils taken, unpacked and never installed,
# from Debian's own archive:
#   v2/: trixie  binutils 2.44-3              (as --gsframe emits SFrame v2)
#   v3/: sid     binutils 2.47.50.20261021-1  (as --gsframe emits SFrame v3)
# with the exact packages below (the cross binutils for aarch64 and s390x
# too; trixie's 2.44 cannot emit s390x SFrame, which came in 2.45). Their
# binaries need a newer glibc than bookworm's 2.36, so each suite's libc6 is
# unpacked as well and the tools run through its dynamic loader.
#
# The assembler inputs in src/ are committed: funcs-*.s were compiled from
# src/funcs.c by Debian bookworm's gcc 12.2.0 (gcc, aarch64-linux-gnu-gcc
# with -mbranch-protection=pac-ret, s390x-linux-gnu-gcc) at -O0 and -O2;
# pass --regen-asm to compile them again. special-x86_64.s is hand written.
#
# Usage: sh make-fixtures.sh [--regen-asm]    (from any directory; needs
# apt-get, dpkg-deb and network access to the Debian archive)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-$(mktemp -d /tmp/sframe-fixtures.XXXXXX)}
mirror=${MIRROR:-http://deb.debian.org/debian}

trixie_pkgs="binutils-x86-64-linux-gnu=2.44-3 binutils-aarch64-linux-gnu=2.44-3
 binutils-s390x-linux-gnu=2.44-3 binutils-common=2.44-3 libbinutils=2.44-3
 libctf0=2.44-3 libctf-nobfd0=2.44-3 libsframe1=2.44-3 libjansson4=2.14-2+b3
 libzstd1=1.5.7+dfsg-1 zlib1g=1:1.3.dfsg+really1.3.1-1+b1 libc6=2.41-12+deb13u4"
sid_pkgs="binutils-x86-64-linux-gnu=2.47.50.20261021-1
 binutils-aarch64-linux-gnu=2.47.50.20261021-1
 binutils-s390x-linux-gnu=2.47.50.20261021-1 binutils-common=2.47.50.20261021-1
 libbinutils=2.47.50.20261021-1 libctf0=2.47.50.20261021-1
 libctf-nobfd0=2.47.50.20261021-1 libsframe3=2.47.50.20261021-1
 libjansson4=2.15.1-1 libzstd1=1.5.7+dfsg-4 zlib1g=1:1.3.dfsg+really1.3.2-4
 libc6=2.43-7"

if [ "${1:-}" = --regen-asm ]; then
	cd "$here/src"
	for o in O0 O2; do
		gcc -$o -S funcs.c -o funcs-x86_64-$o.s
		aarch64-linux-gnu-gcc -$o -mbranch-protection=pac-ret -S funcs.c -o funcs-aarch64-$o.s
		s390x-linux-gnu-gcc -$o -S funcs.c -o funcs-s390x-$o.s
	done
fi

# A private apt configuration: the host's sources and state are untouched.
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
cat >"$work/apt/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main
EOF
apt_opts="-o Dir::Etc::sourcelist=$work/apt/sources.list -o Dir::Etc::sourceparts=-
 -o Dir::State::Lists=$work/apt/lists -o Dir::Cache=$work/apt/cache"
# shellcheck disable=SC2086
apt-get $apt_opts update >/dev/null

# tools SUITE PACKAGES: download and unpack, and write wrappers
# $work/SUITE/bin/ARCH-TOOL that run through the suite's own ld.so.
tools() {
	suite=$1
	shift
	mkdir -p "$work/$suite/debs" "$work/$suite/root" "$work/$suite/bin"
	# shellcheck disable=SC2086
	(cd "$work/$suite/debs" && apt-get $apt_opts download "$@" >/dev/null 2>&1)
	for d in "$work/$suite"/debs/*.deb; do dpkg-deb -x "$d" "$work/$suite/root"; done
	root=$work/$suite/root
	for a in x86_64 aarch64 s390x; do
		for t in as ld readelf; do
			cat >"$work/$suite/bin/$a-$t" <<EOF
#!/bin/sh
exec $root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path $root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu $root/usr/bin/$a-linux-gnu-$t "\$@"
EOF
			chmod +x "$work/$suite/bin/$a-$t"
		done
	done
}
# shellcheck disable=SC2086
tools trixie $trixie_pkgs
# shellcheck disable=SC2086
tools sid $sid_pkgs

# build SUITE DIR ARCHES: assemble every input, link a shared library per
# architecture (its PLT gets a PCMASK FDE) and record readelf's dumps.
build() {
	suite=$1 dir=$here/$2 arches=$3
	bin=$work/$suite/bin
	rm -rf "$dir"
	mkdir -p "$dir"
	{
		echo "# made by make-fixtures.sh with Debian $suite binutils:"
		"$bin/x86_64-readelf" --version | head -n 1
	} >"$dir/VERSION"
	for a in $arches; do
		for s in "$here"/src/funcs-$a-*.s "$here"/src/special-$a.s; do
			[ -f "$s" ] || continue
			base=$(basename "$s" .s)
			"$bin/$a-as" --gsframe -o "$dir/$base.o" "$s" 2>/dev/null
			"$bin/$a-readelf" --sframe "$dir/$base.o" >"$dir/$base.o.txt"
		done
		"$bin/$a-ld" -shared -z noseparate-code -z max-page-size=4096 \
			-o "$dir/libfuncs-$a.so" "$dir/funcs-$a-O2.o"
		"$bin/$a-readelf" --sframe "$dir/libfuncs-$a.so" >"$dir/libfuncs-$a.so.txt"
		if [ -f "$dir/special-$a.o" ]; then
			"$bin/$a-ld" -shared -z noseparate-code -z max-page-size=4096 \
				-o "$dir/libspecial-$a.so" "$dir/special-$a.o"
			"$bin/$a-readelf" --sframe "$dir/libspecial-$a.so" >"$dir/libspecial-$a.so.txt"
		fi
	done
}
build trixie v2 "x86_64 aarch64"
build sid v3 "x86_64 aarch64 s390x"
echo "fixtures written to $here/v2 and $here/v3 (work files in $work)"
