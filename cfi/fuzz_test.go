package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fuzzCtx is an ExprContext whose registers and memory are derived from a
// seed, so expressions can run without a process.
type fuzzCtx struct{ seed uint64 }

func (c fuzzCtx) Reg(n int) (uint64, bool) {
	if n%5 == 4 {
		return 0, false
	}
	return c.seed*uint64(n+1) + 0x7ff000, true
}

func (c fuzzCtx) ReadMemory(addr uint64, p []byte) error {
	if addr%7 == 3 {
		return errors.New("unmapped")
	}
	for i := range p {
		p[i] = byte(addr>>(i%8)) ^ byte(c.seed)
	}
	return nil
}

func FuzzParse(f *testing.F) {
	f.Add(kitchenSink(), false, false)
	a := newAsm()
	a.ehCIE(0x1b)
	f.Add(a.b, false, true)
	f.Fuzz(func(t *testing.T, data []byte, debug, ptr4 bool) {
		sec := &Section{Name: "fuzz", Data: data, Addr: 0x400000, ByteOrder: binary.LittleEndian, PtrSize: 8, TextAddr: 0x401000, DataAddr: 0x600000}
		if debug {
			sec.Kind = DebugFrame
		}
		if ptr4 {
			sec.PtrSize = 4
		}
		fdes, err := Parse(sec)
		checkFormatError(t, err)
		for _, fde := range fdes {
			if fde.Start >= fde.End || fde.CIE == nil {
				t.Fatalf("bad FDE %+v", fde)
			}
			// Rows tile [Start, End).
			next := fde.Start
			var first *Row
			err := fde.Rows(func(r *Row) error {
				if r.Start != next || r.End <= r.Start || r.End > fde.End {
					t.Fatalf("row [%#x,%#x) after %#x in FDE [%#x,%#x)", r.Start, r.End, next, fde.Start, fde.End)
				}
				next = r.End
				if first == nil {
					first = new(Row)
					*first = *r
				}
				// Expressions found in rules evaluate or fail
				// cleanly.
				if r.CFA.Kind == CFAExpression {
					_, _ = EvalExpr(r.CFA.Expr, fuzzCtx{r.Start}, sec.PtrSize)
				}
				for _, rule := range r.Regs {
					if rule.Kind == RuleExpression || rule.Kind == RuleValExpression {
						_, _ = EvalExpr(rule.Expr, fuzzCtx{r.Start}, sec.PtrSize, 0x7ff800)
					}
				}
				return nil
			})
			checkFormatError(t, err)
			if err == nil && next != fde.End {
				t.Fatalf("rows end at %#x, FDE at %#x", next, fde.End)
			}
			r, rerr := fde.RowAt(fde.Start)
			// RowAt stops at the row it wants, so it may miss
			// a later error, but never fails when Rows succeeds.
			if err == nil && rerr != nil {
				t.Fatalf("RowAt error %v, Rows succeeded", rerr)
			}
			if rerr == nil && first != nil && (r.Start != first.Start || r.End != first.End || r.CFA.Kind != first.CFA.Kind) {
				t.Fatalf("RowAt(Start) = [%#x,%#x), first row [%#x,%#x)", r.Start, r.End, first.Start, first.End)
			}
			g, err := FDEAt(sec, fde.Offset)
			if err != nil {
				t.Fatalf("FDEAt(%#x): %v", fde.Offset, err)
			}
			if g.Start != fde.Start || g.End != fde.End || g.CIE.Offset != fde.CIE.Offset {
				t.Fatalf("FDEAt(%#x) = %+v, Parse %+v", fde.Offset, g, fde)
			}
		}
		// FDEAt at arbitrary offsets fails cleanly.
		for _, off := range []uint64{0, uint64(len(data) / 2), uint64(len(data))} {
			_, err := FDEAt(sec, off)
			checkFormatError(t, err)
		}
	})
}

func checkFormatError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Section != "fuzz" {
		t.Fatalf("error %v (%T) is not a FormatError naming the section", err, err)
	}
}

func FuzzEvalExpr(f *testing.F) {
	f.Add([]byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}, uint64(0x401020))
	f.Add([]byte{0x76, 0x78, 0x06}, uint64(0x7ff0))
	f.Add([]byte{0x3a, 0x31, 0x1c, 0x12, 0x28, 0xfa, 0xff}, uint64(0))
	f.Fuzz(func(t *testing.T, expr []byte, seed uint64) {
		ctx := fuzzCtx{seed}
		v, err := EvalExpr(expr, ctx, 8, seed)
		if err != nil {
			var xe *ExprError
			if !errors.As(err, &xe) || xe.Offset < 0 || xe.Offset > len(expr) {
				t.Fatalf("error %v (%T)", err, err)
			}
		}
		if n, th, ok := MatchPLT(expr); ok {
			rsp, _ := ctx.Reg(7)
			rip, _ := ctx.Reg(16)
			want := rsp + uint64(n)
			if rip&15 >= uint64(th) {
				want += 8
			}
			got, err := EvalExpr(expr, ctx, 8)
			if err != nil || got != want {
				t.Fatalf("PLT expression %x: EvalExpr %#x %v, MatchPLT says %#x", expr, got, err, want)
			}
		}
		if reg, off, deref, ok := MatchBreg(expr); ok {
			r, known := ctx.Reg(int(reg))
			got, err := EvalExpr(expr, ctx, 8)
			switch {
			case !known:
				if err == nil {
					t.Fatalf("breg of unknown register evaluated")
				}
			case !deref && (err != nil || got != r+uint64(off)):
				t.Fatalf("breg %x: EvalExpr %#x %v, MatchBreg says %d%+d", expr, got, err, reg, off)
			}
		}
		_ = v
	})
}

func FuzzEhFrameHdr(f *testing.F) {
	f.Add([]byte{1, 0x1b, 0x03, 0x3b, 0xf8, 0x0f, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0}, uint64(0x8100))
	f.Fuzz(func(t *testing.T, data []byte, pc uint64) {
		h, err := ParseEhFrameHdr(data, 0x8000, binary.LittleEndian, "fuzz")
		if err != nil {
			checkFormatError(t, err)
			return
		}
		if h.FDECount < 0 || h.FDECount > len(data) {
			t.Fatalf("FDECount %d for %d bytes", h.FDECount, len(data))
		}
		addr, ok := h.Lookup(pc)
		if ok {
			// The entry found is the last one at or below pc
			// (when the table is sorted).
			found := false
			for i := 0; i < h.FDECount; i++ {
				p, a := h.Entry(i)
				if p <= pc && a == addr {
					found = true
				}
			}
			if !found {
				t.Fatalf("Lookup(%#x) = %#x, not an entry at or below pc", pc, addr)
			}
		}
	})
}

// TestWriteFuzzSeeds regenerates the committed seed corpus under
// testdata/fuzz from real compiler output when CFI_WRITE_SEEDS=1. The
// seeds are small: a gcc object's .eh_frame, a linked binary's .eh_frame,
// .eh_frame_hdr and .debug_frame, the every-opcode section, and the
// expressions found in them.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("CFI_WRITE_SEEDS") != "1" {
		t.Skip("set CFI_WRITE_SEEDS=1 to regenerate testdata/fuzz")
	}
	dir := t.TempDir()
	write := func(target, name string, args ...any) {
		s := "go test fuzz v1\n"
		for _, a := range args {
			switch v := a.(type) {
			case []byte:
				s += "[]byte(" + strconv.Quote(string(v)) + ")\n"
			case bool:
				s += fmt.Sprintf("bool(%v)\n", v)
			case uint64:
				s += fmt.Sprintf("uint64(%d)\n", v)
			}
		}
		p := filepath.Join("testdata", "fuzz", target, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exe := buildC(t, dir, "p", "-O2", "-fexceptions")
	dbg := buildC(t, dir, "pg", "-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-Wa,--gdwarf-cie-version=4")
	obj := buildC(t, dir, "p.o", "-O2", "-c")
	eh := mustSection(t, exe, ".eh_frame")
	write("FuzzParse", "gcc-exe-eh_frame", eh.Data, false, false)
	write("FuzzParse", "gcc-obj-eh_frame", mustSection(t, obj, ".eh_frame").Data, false, false)
	write("FuzzParse", "gcc-debug_frame-v4", mustSection(t, dbg, ".debug_frame").Data, true, false)
	write("FuzzParse", "every-opcode", kitchenSink(), false, false)
	hdr := mustSection(t, exe, ".eh_frame_hdr")
	if hdr.Addr != 0x8000 {
		// FuzzEhFrameHdr loads the header at 0x8000; the table is
		// datarel, so only eh_frame_ptr changes.
		t.Logf(".eh_frame_hdr at %#x", hdr.Addr)
	}
	write("FuzzEhFrameHdr", "gcc-exe", hdr.Data, uint64(0x8000+0x100))
	fdes, err := Parse(eh)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fdes {
		f.Rows(func(r *Row) error {
			if r.CFA.Kind == CFAExpression {
				write("FuzzEvalExpr", fmt.Sprintf("gcc-cfa-%d", n), r.CFA.Expr, uint64(0x401020+n))
				n++
			}
			return nil
		})
	}
}
