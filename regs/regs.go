// Package regs describes machine register sets for unwinding: which
// architectures rewind knows, how their registers are numbered (DWARF
// numbering, so CFI rules index them directly), and a compact register set
// that remembers which values are known.
//
// amd64 is implemented end to end; arm64 numbering and roles are defined here
// so every consumer (CFI, SFrame, frame pointers, snapshot sources) is written
// against both from the start.
package regs

import (
	"fmt"
	"math/bits"
)

// Arch is a machine architecture.
type Arch uint8

// Supported architectures.
const (
	Unknown Arch = iota
	AMD64
	ARM64
)

// MaxRegs is the number of DWARF register numbers a Regs can hold
// (0..MaxRegs-1). It covers the amd64 general registers plus the return
// address column (0..16) and the arm64 general registers, SP and PC (0..32).
// Vector registers are not tracked: unwinding never needs them.
const MaxRegs = 33

// DWARF register numbers for amd64 (System V psABI, figure 3.36).
const (
	AMD64RAX = 0
	AMD64RDX = 1
	AMD64RCX = 2
	AMD64RBX = 3
	AMD64RSI = 4
	AMD64RDI = 5
	AMD64RBP = 6
	AMD64RSP = 7
	AMD64R8  = 8
	AMD64R15 = 15
	// AMD64RIP is the return address column; rewind also stores the current
	// PC there.
	AMD64RIP = 16
)

// DWARF register numbers for arm64 (AADWARF64).
const (
	ARM64X0  = 0
	ARM64X29 = 29 // frame pointer
	ARM64X30 = 30 // link register, the return address column
	ARM64SP  = 31
	ARM64PC  = 32
)

// String returns the architecture's Go-style name.
func (a Arch) String() string {
	switch a {
	case AMD64:
		return "amd64"
	case ARM64:
		return "arm64"
	}
	return fmt.Sprintf("arch(%d)", uint8(a))
}

// PtrSize is the size of an address in bytes.
func (a Arch) PtrSize() int { return 8 }

// PC is the DWARF number under which a Regs stores the program counter.
func (a Arch) PC() int {
	if a == ARM64 {
		return ARM64PC
	}
	return AMD64RIP
}

// SP is the DWARF number of the stack pointer.
func (a Arch) SP() int {
	if a == ARM64 {
		return ARM64SP
	}
	return AMD64RSP
}

// FP is the DWARF number of the frame pointer register.
func (a Arch) FP() int {
	if a == ARM64 {
		return ARM64X29
	}
	return AMD64RBP
}

// RA is the DWARF return address column. On amd64 it is a pseudo register
// (the return address lives on the stack); on arm64 it is the link register.
func (a Arch) RA() int {
	if a == ARM64 {
		return ARM64X30
	}
	return AMD64RIP
}

// NumRegs is the number of DWARF registers a Regs holds for this architecture.
func (a Arch) NumRegs() int {
	if a == ARM64 {
		return 33
	}
	return 17
}

// CalleeSaved reports whether DWARF register r is preserved across calls by
// the platform ABI (so it keeps its value in a caller frame unless the callee
// saved and restored it).
func (a Arch) CalleeSaved(r int) bool {
	switch a {
	case AMD64:
		switch r {
		case AMD64RBX, AMD64RBP, AMD64RSP, 12, 13, 14, 15:
			return true
		}
	case ARM64:
		return (r >= 19 && r <= 29) || r == ARM64SP
	}
	return false
}

var amd64Names = [...]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}

// RegName returns the conventional name of DWARF register r ("rbp", "x29").
func (a Arch) RegName(r int) string {
	switch a {
	case AMD64:
		if r >= 0 && r < len(amd64Names) {
			return amd64Names[r]
		}
	case ARM64:
		switch {
		case r >= 0 && r <= 28:
			return fmt.Sprintf("x%d", r)
		case r == 29:
			return "fp"
		case r == 30:
			return "lr"
		case r == 31:
			return "sp"
		case r == 32:
			return "pc"
		}
	}
	return fmt.Sprintf("r%d", r)
}

// Regs is a register set indexed by DWARF register number. Each value is
// either known or unknown; reading an unknown register reports ok=false.
// The zero value is an empty set with Arch Unknown.
type Regs struct {
	Arch  Arch
	vals  [MaxRegs]uint64
	valid uint64
}

// New returns an empty register set for arch.
func New(arch Arch) Regs { return Regs{Arch: arch} }

// Get returns register r and whether its value is known.
func (r *Regs) Get(n int) (uint64, bool) {
	if n < 0 || n >= MaxRegs || r.valid&(1<<uint(n)) == 0 {
		return 0, false
	}
	return r.vals[n], true
}

// Set stores a known value for register n. Out-of-range numbers are ignored.
func (r *Regs) Set(n int, v uint64) {
	if n < 0 || n >= MaxRegs {
		return
	}
	r.vals[n] = v
	r.valid |= 1 << uint(n)
}

// Clear marks register n unknown.
func (r *Regs) Clear(n int) {
	if n < 0 || n >= MaxRegs {
		return
	}
	r.valid &^= 1 << uint(n)
}

// Has reports whether register n is known.
func (r *Regs) Has(n int) bool {
	return n >= 0 && n < MaxRegs && r.valid&(1<<uint(n)) != 0
}

// KeepOnly marks unknown every register not in mask (bit n = register n).
func (r *Regs) KeepOnly(mask uint64) { r.valid &= mask }

// EqualIn reports whether r and o are of the same architecture and, of
// the registers in mask (bit n: register n), know the same ones with the
// same values (unknown registers' stale values do not count).
func (r *Regs) EqualIn(o *Regs, mask uint64) bool {
	if r.Arch != o.Arch || r.valid&mask != o.valid&mask {
		return false
	}
	for v := r.valid & mask; v != 0; v &= v - 1 {
		if n := bits.TrailingZeros64(v); r.vals[n] != o.vals[n] {
			return false
		}
	}
	return true
}

// PC returns the program counter.
func (r *Regs) PC() (uint64, bool) { return r.Get(r.Arch.PC()) }

// SP returns the stack pointer.
func (r *Regs) SP() (uint64, bool) { return r.Get(r.Arch.SP()) }

// FP returns the frame pointer register.
func (r *Regs) FP() (uint64, bool) { return r.Get(r.Arch.FP()) }

// String lists the known registers, for debugging and error messages.
func (r *Regs) String() string {
	s := r.Arch.String() + "{"
	first := true
	for n := 0; n < r.Arch.NumRegs(); n++ {
		if v, ok := r.Get(n); ok {
			if !first {
				s += " "
			}
			first = false
			s += fmt.Sprintf("%s=%#x", r.Arch.RegName(n), v)
		}
	}
	return s + "}"
}
