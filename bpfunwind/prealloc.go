package bpfunwind

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Linux before 6.1 refuses hash maps allocated on use (BPF_F_NO_PREALLOC)
// in perf_event programs, and warns about them in tracepoint programs:
// the kernel's BPF memory allocator that made them safe there came in 6.1.
// The process, interpreter and stack maps are such maps here, sized for a
// host but filled as processes come; on older kernels they are
// preallocated, each capped at preallocCap bytes of keys and values.
const preallocCap = 16 << 20

// forcePrealloc makes Load preallocate on any kernel (tests).
var forcePrealloc bool

// kernelBefore reports whether the running kernel's release is older
// than major.minor (false when it cannot tell).
func kernelBefore(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	maj, rest, _ := strings.Cut(rel, ".")
	min, _, _ := strings.Cut(rest, ".")
	min, _, _ = strings.Cut(min, "-")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if err1 != nil || err2 != nil {
		return false
	}
	return a < major || a == major && b < minor
}

// preallocate turns the spec's hash maps allocated on use into
// preallocated ones of at most preallocCap bytes each, and returns a note
// naming the maps it made smaller.
func preallocate(spec *ebpf.CollectionSpec) string {
	var smaller []string
	for name, m := range spec.Maps {
		if m.Type != ebpf.Hash || m.Flags&unix.BPF_F_NO_PREALLOC == 0 {
			continue
		}
		m.Flags &^= unix.BPF_F_NO_PREALLOC
		if lim := uint32(preallocCap / max(m.KeySize+m.ValueSize, 1)); m.MaxEntries > lim {
			m.MaxEntries = lim
			smaller = append(smaller, fmt.Sprintf("%s %d", name, lim))
		}
	}
	if len(smaller) == 0 {
		return ""
	}
	return "Linux before 6.1: BPF hash maps preallocated and smaller (" + strings.Join(smaller, ", ") + " entries)"
}
