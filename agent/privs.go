package agent

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KeptCapabilities are the capabilities the agent needs once its events
// are open: reading other users' /proc/PID/maps (CAP_SYS_PTRACE), opening
// their mapped files (CAP_DAC_READ_SEARCH) and kernel symbol addresses
// (CAP_SYSLOG).
var KeptCapabilities = []int{unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH, unix.CAP_SYSLOG}

// DropPrivileges reduces every thread of the process to the capabilities
// in keep (effective, permitted; nothing inheritable) and sets
// no_new_privs, so that nothing it executes regains any. The perf events
// already open keep working. It needs a Go build without cgo
// (CGO_ENABLED=0): with cgo the runtime cannot change every thread's
// credentials, and DropPrivileges returns an error saying so; the systemd
// unit (contrib/rewind-agent.service) bounds the capabilities either way.
func DropPrivileges(keep []int) error {
	var mask [2]uint32
	for _, c := range keep {
		if c >= 0 && c < 64 {
			mask[c/32] |= 1 << (c % 32)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for i := range data {
		data[i].Effective &= mask[i]
		data[i].Permitted &= mask[i]
		data[i].Inheritable = 0
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		if errno == syscall.ENOTSUP {
			return fmt.Errorf("capabilities are not dropped in-process: this build uses cgo (build rewind with CGO_ENABLED=0, or run it under contrib/rewind-agent.service)")
		}
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", errno)
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	return nil
}
