package unwind

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/rewindstack/rewind/regs"
)

// Signal trampolines: the code a signal handler returns to, which asks the
// kernel to restore the interrupted context (rt_sigreturn).
var (
	// amd64 glibc __restore_rt: mov $15, %rax; syscall.
	sigreturnAMD64 = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}
	// arm64 vdso __kernel_rt_sigreturn: mov x8, #139; svc #0.
	sigreturnARM64 = []byte{0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4}
)

// isSignalTrampoline reports whether the frame's PC is the start of a
// rt_sigreturn trampoline, by its code bytes. Results are cached per module
// address, so a walk reads code at most once per distinct return address.
func isSignalTrampoline(c *Cursor) bool {
	pc, ok := c.get(c.Regs.Arch.PC())
	if !ok {
		return false
	}
	if c.info == nil {
		return hasSigreturnCode(c, pc, true)
	}
	cache := &c.info.sig
	key := pc - c.Map.Bias
	if is, seen := cache.m.Load(key); seen {
		return is.(bool)
	}
	is := hasSigreturnCode(c, pc, false)
	cache.m.Store(key, is)
	return is
}

// sigCache remembers, per module address, whether a return address is a
// signal trampoline. It was a map copied on every write, which readers
// loaded without locking: a large program's distinct return addresses
// made those copies quadratic, 34 MB of the 398 MB rewind report
// allocated for a 318 MB system-wide recording. A sync.Map's reads do not
// lock either once its entries are promoted.
type sigCache struct {
	m sync.Map // uint64 -> bool
}

// hasSigreturnCode reads the code at pc. Code read for a module's cache
// is not tracked for a Memo: the cached answer, not this memory, is what
// later walks use.
func hasSigreturnCode(c *Cursor, pc uint64, tracked bool) bool {
	want := sigreturnAMD64
	if c.Regs.Arch == regs.ARM64 {
		want = sigreturnARM64
	}
	b := c.mem.buf[:len(want)]
	if tracked {
		return c.mem.read(pc, b) == nil && bytes.Equal(b, want)
	}
	return c.mem.mem.ReadMemory(pc, b) == nil && bytes.Equal(b, want)
}

// restoreSignalFrame continues from the registers the kernel saved when the
// signal arrived. When the handler has returned into the trampoline, the
// stack pointer points at the ucontext_t of the rt_sigframe.
func restoreSignalFrame(c *Cursor) error {
	if c.Regs.Arch != regs.AMD64 {
		return fmt.Errorf("%w: signal frames on %s are not supported yet", ErrNoInfo, c.Regs.Arch)
	}
	sp, ok := c.get(c.Regs.Arch.SP())
	if !ok {
		return fmt.Errorf("%w: stack pointer in a signal frame", ErrRegister)
	}
	// The ucontext_t of the rt_sigframe (its layout: package regs).
	var buf [len(regs.AMD64Gregs) * 8]byte
	addr := sp + regs.AMD64UContextGregs
	if err := c.mem.read(addr, buf[:]); err != nil {
		return asMemoryError(addr, err)
	}
	*c.Caller = regs.New(regs.AMD64)
	for i, n := range regs.AMD64Gregs {
		c.Caller.Set(n, binary.LittleEndian.Uint64(buf[i*8:]))
	}
	c.CallerExact = true
	return nil
}
