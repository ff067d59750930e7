package regs

import (
	"encoding/binary"
	"math/bits"
)

// perf_event_open's register sets (PERF_SAMPLE_REGS_USER): the registers
// a sample carries are named by bits of a mask in perf's own numbering,
// and their values follow in bit order.

// perf's amd64 register numbering (arch/x86/include/uapi/asm/perf_h)
// mapped to DWARF numbers; -1 for registers unwinding does not use.
var amd64PerfToDWARF = [...]int{
	0:  AMD64RAX,
	1:  AMD64RBX,
	2:  AMD64RCX,
	3:  AMD64RDX,
	4:  AMD64RSI,
	5:  AMD64RDI,
	6:  AMD64RBP,
	7:  AMD64RSP,
	8:  AMD64RIP,
	9:  -1,                                                       // flags
	10: -1,                                                       // cs
	11: -1,                                                       // ss
	12: -1,                                                       // ds
	13: -1,                                                       // es
	14: -1,                                                       // fs
	15: -1,                                                       // gs
	16: 8, 17: 9, 18: 10, 19: 11, 20: 12, 21: 13, 22: 14, 23: 15, // r8..r15
}

// PerfUserMask returns the sample_regs_user mask rewind asks for on arch:
// the general registers, stack pointer and PC, which is all a CFI or SFrame
// walk can need.
func PerfUserMask(arch Arch) uint64 {
	switch arch {
	case AMD64:
		return 0x1ff | 0xff<<16 // ax..ip, r8..r15
	case ARM64:
		return 1<<33 - 1 // x0..x30, sp, pc (perf numbers them as DWARF does)
	}
	return 0
}

// FromPerf converts a sample's REGS_USER values, taken with mask, into a
// DWARF-numbered register set for arch. ok is false when the sample has no
// user registers or the architecture is not supported.
func FromPerf(arch Arch, mask uint64, values []uint64) (r Regs, ok bool) {
	raw := make([]byte, 8*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint64(raw[8*i:], v)
	}
	return FromPerfRaw(arch, mask, raw)
}

// FromPerfRaw is FromPerf for the values as a record holds them: 8 bytes
// each, little-endian.
func FromPerfRaw(arch Arch, mask uint64, raw []byte) (r Regs, ok bool) {
	r = New(arch)
	if len(raw) != 8*bits.OnesCount64(mask) || len(raw) == 0 {
		return r, false
	}
	i := 0
	for m := mask; m != 0; m &= m - 1 {
		bit := bits.TrailingZeros64(m)
		v := binary.LittleEndian.Uint64(raw[i:])
		i += 8
		switch arch {
		case AMD64:
			if bit < len(amd64PerfToDWARF) && amd64PerfToDWARF[bit] >= 0 {
				r.Set(amd64PerfToDWARF[bit], v)
			}
		case ARM64:
			r.Set(bit, v)
		default:
			return r, false
		}
	}
	_, hasPC := r.PC()
	_, hasSP := r.SP()
	return r, hasPC && hasSP
}

// PCSPFromPerfRaw returns the PC and stack pointer of the values as a
// record holds them (see FromPerfRaw), without converting the others; ok
// is what FromPerfRaw's would be.
func PCSPFromPerfRaw(arch Arch, mask uint64, raw []byte) (pc, sp uint64, ok bool) {
	if len(raw) != 8*bits.OnesCount64(mask) || len(raw) == 0 {
		return 0, 0, false
	}
	var pcBit, spBit uint
	switch arch {
	case AMD64:
		pcBit, spBit = 8, 7 // PERF_REG_X86_IP, PERF_REG_X86_SP
	case ARM64:
		pcBit, spBit = 32, 31 // PERF_REG_ARM64_PC, PERF_REG_ARM64_SP
	default:
		return 0, 0, false
	}
	if mask&(1<<pcBit) == 0 || mask&(1<<spBit) == 0 {
		return 0, 0, false
	}
	at := func(bit uint) uint64 {
		return binary.LittleEndian.Uint64(raw[8*bits.OnesCount64(mask&(1<<bit-1)):])
	}
	return at(pcBit), at(spBit), true
}
