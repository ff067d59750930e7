package live

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rewindstack/rewind/target"
)

// TestProcMemory reads this process's memory both ways (process_vm_readv,
// and pread on /proc/PID/mem as when process_vm_readv is refused): whole
// reads, a read that runs into an unmapped page (the error names its
// first byte), and an unmapped address. They differ on PROT_NONE memory:
// process_vm_readv honours the protection, /proc/PID/mem reads through it
// as ptrace(PTRACE_PEEKDATA) does.
func TestProcMemory(t *testing.T) {
	const page = 4096
	mem, err := unix.Mmap(-1, 0, 3*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		mem[i] = byte(i * 3)
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	// Page 0 PROT_NONE, page 1 readable, page 2 unmapped.
	unix.Mprotect(mem[:page], unix.PROT_NONE)
	// (unix.Munmap only takes whole mappings it made.)
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(base+2*page), page, 0); e != 0 {
		t.Fatal(e)
	}
	defer unix.Syscall(unix.SYS_MUNMAP, uintptr(base), 2*page, 0)

	for _, fallback := range []bool{false, true} {
		m := NewProcMemory(unix.Getpid())
		m.fallback.Store(fallback)
		buf := make([]byte, 300)
		if err := m.ReadMemory(base+2*page-300, buf); err != nil || !bytes.Equal(buf, mem[2*page-300:2*page]) {
			t.Errorf("fallback %v: read: %v", fallback, err)
		}
		err := m.ReadMemory(base+2*page-100, buf)
		var me *target.MemoryError
		if !errors.As(err, &me) || me.Addr != base+2*page {
			t.Errorf("fallback %v: read across into an unmapped page: %v, want a MemoryError at %#x", fallback, err, base+2*page)
		}
		err = m.ReadMemory(base+page-100, buf)
		if fallback && err != nil {
			t.Errorf("/proc/PID/mem: read from PROT_NONE on: %v, want it read", err)
		}
		if !fallback && (!errors.As(err, &me) || me.Addr != base+page-100) {
			t.Errorf("process_vm_readv: read from PROT_NONE on: %v, want a MemoryError at %#x", err, base+page-100)
		}
		if err := m.ReadMemory(8, buf[:8]); !errors.As(err, &me) || me.Addr != 8 {
			t.Errorf("fallback %v: read at 8: %v", fallback, err)
		}
		if err := m.ReadMemory(^uint64(0)-3, buf[:8]); !errors.As(err, &me) {
			t.Errorf("fallback %v: wrapping read: %v", fallback, err)
		}
		if err := m.ReadMemory(base, nil); err != nil {
			t.Errorf("fallback %v: empty read: %v", fallback, err)
		}
		m.Close()
	}
}
