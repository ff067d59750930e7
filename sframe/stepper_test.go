package sframe_test

import (
	"encoding/binary"
	"fmt"
	"github.com/rewindstack/rewind/target"
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwind"
)

// words is target memory made of 8-byte words.
type words map[uint64]uint64

func (m words) ReadMemory(addr uint64, p []byte) error {
	for i := 0; i < len(p); i += 8 {
		v, ok := m[addr+uint64(i)]
		if !ok {
			return fmt.Errorf("no memory at %#x", addr+uint64(i))
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		copy(p[i:], b[:])
	}
	return nil
}

// TestStepperV3: the stepper on the committed v3 library (PC-relative FDE
// starts) mapped at a load bias: a frame-pointer row, an outermost
// function, a signal trampoline, a DRAP function (flexible FDE: the CFA is
// loaded from rbp-8 and rbp is saved at rbp+0) and an RA kept in r11.
func TestStepperV3(t *testing.T) {
	f, err := elfobj.Open("testdata/v3/libspecial-x86_64.so")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sym := func(name string) uint64 {
		a, ok := f.SymbolByName(name)
		if !ok {
			t.Fatalf("no symbol %s", name)
		}
		return a
	}
	const bias, stack, ra = 0x7f0000000000, 0x7ffe0000, 0x400000
	objs := &target.Objects{}
	mod := objs.AddFile("libspecial", f)
	space := target.NewAddressSpace([]target.Mapping{{Start: bias, End: bias + 0x10000, Path: "libspecial", Module: mod, Bias: bias}}, nil)
	u := &unwind.Unwinder{Steppers: []unwind.Stepper{unwind.SFrame{}}}
	walk := func(pc uint64, set map[int]uint64, mem words) unwind.Stack {
		r := regs.New(regs.AMD64)
		r.Set(regs.AMD64RIP, pc)
		for n, v := range set {
			r.Set(n, v)
		}
		return u.Walk(r, mem, space)
	}
	check := func(name string, st unwind.Stack, end unwind.EndReason, frames int) {
		t.Helper()
		if st.End != end || len(st.Frames) != frames {
			t.Errorf("%s: %d frames, end %s (%s), want %d frames, end %s: %+v", name, len(st.Frames), st.End, st.Detail, frames, end, st.Frames)
		}
		for i := 1; i < len(st.Frames); i++ {
			if st.Frames[i].Method != unwind.MethodSFrame {
				t.Errorf("%s: frame %d from %s", name, i, st.Frames[i].Method)
			}
		}
	}

	st := walk(bias+sym("plain")+4, map[int]uint64{regs.AMD64RBP: stack, regs.AMD64RSP: stack - 8},
		words{stack: 0x1111, stack + 8: ra})
	check("plain", st, unwind.EndNoInfo, 2)
	if len(st.Frames) == 2 && (st.Frames[1].PC != ra || st.Frames[1].SP != stack+16) {
		t.Errorf("plain: caller %+v", st.Frames[1])
	}

	st = walk(bias+sym("start")+1, map[int]uint64{regs.AMD64RSP: stack}, words{})
	check("start", st, unwind.EndRAUndefined, 1)

	st = walk(bias+sym("trampoline"), map[int]uint64{regs.AMD64RSP: stack}, words{})
	check("trampoline", st, unwind.EndNoInfo, 1)

	const cfa = stack + 0x100
	st = walk(bias+sym("drap")+0x13, map[int]uint64{regs.AMD64RBP: stack, regs.AMD64RSP: stack - 16},
		words{stack - 8: cfa, cfa - 8: ra, stack: 0x2222})
	check("drap", st, unwind.EndNoInfo, 2)
	if len(st.Frames) == 2 && (st.Frames[1].PC != ra || st.Frames[1].SP != cfa) {
		t.Errorf("drap: caller %+v", st.Frames[1])
	}

	st = walk(bias+sym("rareg")+2, map[int]uint64{regs.AMD64RSP: stack, 11: ra}, words{})
	check("rareg", st, unwind.EndNoInfo, 2)
	if len(st.Frames) == 2 && (st.Frames[1].PC != ra || st.Frames[1].SP != stack) {
		t.Errorf("rareg: caller %+v", st.Frames[1])
	}
}
