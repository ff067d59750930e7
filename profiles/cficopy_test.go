package profiles

import (
	"testing"

	"github.com/rewindstack/rewind/elfobj"
	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/sframe"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// TestCFISameRefuses checks that only an all-CFI walk ending at an
// undefined return address, outside SFrame-described objects, is taken
// as the CFI-only method's walk, and only a leaf outside SFrame-described
// objects whose caller CFI found is taken as the SFrame-only walk.
func TestCFISameRefuses(t *testing.T) {
	plain := &target.Mapping{Module: &target.Module{File: &elfobj.File{}}}
	withSFrame := &target.Mapping{Module: &target.Module{File: &elfobj.File{SFrame: &elfobj.Section{}}}}
	walk := func(last *target.Mapping, methods ...unwind.Method) []unwind.Frame {
		var fs []unwind.Frame
		for i, m := range methods {
			fs = append(fs, unwind.Frame{PC: uint64(0x1000 + i), Method: m, Map: plain})
		}
		fs[len(fs)-1].Map = last
		return fs
	}
	ctx, cfi := unwind.MethodContext, unwind.MethodDWARF
	cases := []struct {
		name   string
		frames []unwind.Frame
		end    unwind.EndReason
		want   bool
	}{
		{"all CFI", walk(plain, ctx, cfi, cfi), unwind.EndRAUndefined, true},
		{"one frame", walk(plain, ctx), unwind.EndRAUndefined, true},
		{"frame pointers", walk(plain, ctx, unwind.MethodFP, cfi), unwind.EndRAUndefined, false},
		{"sframe", walk(plain, ctx, unwind.MethodSFrame, cfi), unwind.EndRAUndefined, false},
		{"signal", walk(plain, ctx, unwind.MethodSignal, cfi), unwind.EndRAUndefined, false},
		{"other end", walk(plain, ctx, cfi, cfi), unwind.EndOutermost, false},
		{"no info end", walk(plain, ctx, cfi), unwind.EndNoInfo, false},
		{"last in an SFrame object", walk(withSFrame, ctx, cfi, cfi), unwind.EndRAUndefined, false},
		{"last unmapped", walk(nil, ctx, cfi), unwind.EndRAUndefined, false},
		{"not from the context", walk(plain, cfi, cfi), unwind.EndRAUndefined, false},
		{"empty", nil, unwind.EndRAUndefined, false},
	}
	for _, c := range cases {
		if got := cfiSame(c.frames, c.end); got != c.want {
			t.Errorf("%s: cfiSame = %v, want %v", c.name, got, c.want)
		}
	}
	leaf := []struct {
		name   string
		frames []unwind.Frame
		want   bool
	}{
		{"caller by CFI", walk(plain, ctx, cfi), true},
		{"deeper walk, any end", walk(plain, ctx, cfi, unwind.MethodFP), true},
		{"leaf alone (a root, or no caller)", walk(plain, ctx), false},
		{"caller by frame pointers", walk(plain, ctx, unwind.MethodFP), false},
		{"caller by SFrame", walk(plain, ctx, unwind.MethodSFrame), false},
		{"leaf in an SFrame object", append(walk(withSFrame, ctx), walk(plain, cfi)...), false},
		{"leaf unmapped", append(walk(nil, ctx), walk(plain, cfi)...), false},
	}
	for _, c := range leaf {
		if got := sframeLeafOnly(c.frames); got != c.want {
			t.Errorf("%s: sframeLeafOnly = %v, want %v", c.name, got, c.want)
		}
	}
	auto, deep := unwind.NewAuto(), unwind.NewAuto()
	deep.MaxDepth = 5
	for _, c := range []struct {
		first, m *unwind.Unwinder
		want     copyKind
	}{
		{auto, unwind.NewDWARF(), copyCFI},
		{auto, unwind.NewSFrame(), copySFrameLeaf},
		{auto, unwind.NewFP(), copyNone},
		{deep, unwind.NewDWARF(), copyNone},
		{unwind.NewDWARF(), unwind.NewSFrame(), copyNone},
	} {
		if got := copyKindOf(c.first, c.m); got != c.want {
			t.Errorf("copyKindOf(%v, %v) = %d, want %d", c.first.Steppers, c.m.Steppers, got, c.want)
		}
	}
	if !isAutoChain(unwind.NewAuto()) || isAutoChain(unwind.NewDWARF()) || isAutoChain(&unwind.Unwinder{Steppers: []unwind.Stepper{unwind.SFrame{Source: func(*target.Module) (*sframe.Section, error) { return nil, nil }}, unwind.CFITable{}, unwind.GoPCLN{}, unwind.FramePointers{}}}) {
		t.Error("isAutoChain is wrong")
	}
	if !isCFIOnly(unwind.NewDWARF()) || isCFIOnly(unwind.NewAuto()) || isCFIOnly(unwind.NewFP()) {
		t.Error("isCFIOnly is wrong")
	}
}

// TestStackExtent bounds the bytes fetched ahead of a walk.
func TestStackExtent(t *testing.T) {
	for _, fs := range [][]unwind.Frame{nil, {{SP: 100}}, {{SP: 100}, {SP: 50}}, {{SP: 100}, {SP: 300}}, {{SP: 0}, {SP: 1 << 40}}} {
		n := stackExtent(fs)
		if n < 0 || n > maxPrefetch+256 {
			t.Errorf("stackExtent(%v) = %d", fs, n)
		}
	}
	if n := stackExtent([]unwind.Frame{{SP: 100}, {SP: 300}}); n != 200+256 {
		t.Errorf("stackExtent = %d, want 456", n)
	}
}

// TestSampleOfNoTask checks that a sample the kernel took in no task (pid
// and tid -1) is -1's, named ":-1" as perf script names it.
func TestSampleOfNoTask(t *testing.T) {
	c := NewCollector(regs.AMD64)
	s := &perfdata.Sample{SampleIDFields: perfdata.SampleIDFields{PID: 0xffffffff, TID: 0xffffffff, Time: 1},
		Misc: perfdata.MiscKernel, IP: 0xffffffff81000000, Period: 1}
	s.Attr = &perfdata.Attr{}
	c.Add(&perfdata.Record{Type: perfdata.RecordSample, ID: s.SampleIDFields, Sample: s})
	p := Build(c, Options{Methods: []Method{{Name: "auto", Unwinder: unwind.NewAuto()}}})
	if len(p.Stacks) != 1 {
		t.Fatalf("%d stacks", len(p.Stacks))
	}
	if st := p.Stacks[0]; st.PID != -1 || st.TID != -1 || st.Comm != ":-1" {
		t.Errorf("pid %d tid %d comm %q, want -1 -1 \":-1\"", st.PID, st.TID, st.Comm)
	}
}
