#!/usr/bin/env bash
# Loads the BPF programs on an older kernel than this machine's (issue 29
# item 8): boots Debian 12's Linux 6.1 in qemu (TCG: no KVM needed) with
# an initramfs holding the bpfunwind test binary and a small init
# (internal/vminit), which runs the tests that load and attach the
# programs and need no compiler or target process:
#
#   TestLoadsOnThisKernel  the agent's and record's map sizes, as the
#                          kernel allocates them and all preallocated
#                          (the path of kernels before 6.1), attached
#   TestVerifierHeadroom   the verifier's instruction counts
#   TestLoadErrorVerifier  a refusal's one-line message
#
#   scripts/verify-old-kernel.sh [DEB-PACKAGE]   # default linux-image-6.1.0-55-amd64
#
# The kernel package is fetched with `apt-get download` (not installed)
# into ~/.cache/rewind/kernels/ and reused from there. The boot takes a
# minute or two under TCG; VERIFY_TIMEOUT (seconds, default 900) bounds it.
# Exits 0 when the console shows "VMINIT PASS". Not part of `go test`.
set -euo pipefail
pkg=${1:-linux-image-6.1.0-55-amd64}
cd "$(dirname "$0")/.."
command -v qemu-system-x86_64 >/dev/null || { echo "needs qemu-system-x86_64" >&2; exit 2; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rewind/kernels
mkdir -p "$cache"
deb=$(ls "$cache"/"${pkg}"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
	(cd "$cache" && apt-get download "$pkg")
	deb=$(ls "$cache"/"${pkg}"_*.deb | head -1)
fi
kdir=$cache/${pkg}
vmlinuz=$(ls "$kdir"/boot/vmlinuz-* 2>/dev/null | head -1 || true)
if [ -z "$vmlinuz" ]; then
	rm -rf "$kdir.tmp"
	dpkg-deb -x "$deb" "$kdir.tmp"
	mkdir -p "$kdir/boot"
	cp "$kdir.tmp"/boot/vmlinuz-* "$kdir.tmp"/boot/config-* "$kdir/boot/"
	rm -rf "$kdir.tmp"
	vmlinuz=$(ls "$kdir"/boot/vmlinuz-* | head -1)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/verify-old-kernel.XXXXXX")
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=0 go test -c -o "$work/bpfunwind.test" ./bpfunwind
CGO_ENABLED=0 go build -o "$work/init" ./internal/vminit
printf '%s\n' -test.v -test.count=1 -test.run 'LoadsOnThisKernel|VerifierHeadroom|LoadErrorVerifier' >"$work/args"
go run ./internal/vminit/mkinitramfs "$work/initramfs" init="$work/init" test="$work/bpfunwind.test" test.args="$work/args"

echo "booting $(basename "$vmlinuz") from $(basename "$deb") under qemu (TCG)"
start=$(date +%s)
set +e
timeout "${VERIFY_TIMEOUT:-900}" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1G \
	-kernel "$vmlinuz" -initrd "$work/initramfs" \
	-append 'console=ttyS0 panic=-1 quiet' -nographic -no-reboot </dev/null >"$work/console" 2>&1
rc=$?
set -e
end=$(date +%s)
# the firmware's terminal escapes and carriage returns left out
tr -d '\r' <"$work/console" | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g; s/\x1bc//g' | grep -v '^\s*$' | sed -n '/VMINIT kernel/,$p'
echo "qemu exit $rc after $((end - start)) s"
if grep -q '^VMINIT PASS' <(tr -d '\r' <"$work/console"); then
	exit 0
fi
echo "--- console (last 60 lines) ---"
tr -d '\r' <"$work/console" | tail -60
exit 1
