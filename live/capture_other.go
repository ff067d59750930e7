//go:build !linux

package live

import (
	"fmt"
	"os"
	"runtime"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/target"
)

// Capture needs ptrace and /proc: it is implemented on Linux only.
func Capture(pid int, opt Options) (*Snapshot, error) {
	return nil, fmt.Errorf("live: %w on %s", ErrUnsupported, runtime.GOOS)
}

// WithStopped needs ptrace and /proc: it is implemented on Linux only.
func WithStopped(pid int, opt Options, fn func(s *Snapshot) error) error {
	return fmt.Errorf("live: %w on %s", ErrUnsupported, runtime.GOOS)
}

// ProcMemory reads a live process's memory (Linux only).
type ProcMemory struct{ pid int }

// NewProcMemory returns a reader of process pid's memory.
func NewProcMemory(pid int) *ProcMemory { return &ProcMemory{pid: pid} }

// ReadMemory fails: live memory is readable on Linux only.
func (m *ProcMemory) ReadMemory(addr uint64, p []byte) error {
	return &target.MemoryError{Addr: addr, Err: ErrUnsupported}
}

// Close does nothing.
func (m *ProcMemory) Close() error { return nil }

// OpenObject opens path (Linux has more ways: see its documentation).
func (s *Snapshot) OpenObject(path string) (*elfobj.File, error) { return elfobj.Open(path) }

// OpenMapped opens path (Linux has more ways: see its documentation).
func OpenMapped(pid int, maps []target.Mapping, path string) (*elfobj.File, error) {
	return elfobj.Open(path)
}

func readFile(path string, buf []byte) ([]byte, error) { return os.ReadFile(path) }
