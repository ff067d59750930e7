package gostack

import (
	"fmt"
	"runtime"
	"strings"
)

// maxStack is the capture buffer size of the equivalence tests: larger than
// the deepest stack they build, so every capture is complete.
const maxStack = 4096

// captures holds, for one call site, what runtime.Callers, Callers and
// CallersFP+Expand returned for each skip value tried.
type captures struct {
	skip         int
	rt, fast, fp []uintptr
}

// captureAll captures the stack of its caller three ways for skips
// 0..maxSkip (capped at the depth of the stack), into buffers of size PCs. Logical frame 0 of every
// capture is the caller of captureAll: the PC stored for it is the return
// address of the call to captureAll, the same for all three.
//
//go:noinline
func captureAll(maxSkip, size int) []captures {
	var out []captures
	for skip := 0; skip <= maxSkip; skip++ {
		rt := make([]uintptr, size)
		fast := make([]uintptr, size)
		phys := make([]uintptr, maxStack)
		fp := make([]uintptr, size)
		// runtime.Callers: 0 is runtime.Callers, 1 captureAll.
		nrt := runtime.Callers(skip+2, rt)
		// Callers: 0 is Callers, 1 captureAll.
		nfast := Callers(skip+2, fast)
		// CallersFP: physical 0 is CallersFP, 1 captureAll; Expand
		// then skips captureAll plus skip logical frames.
		nphys := CallersFP(1, phys)
		nfp := Expand(fp, phys[:nphys], skip+1)
		out = append(out, captures{skip: skip, rt: rt[:nrt], fast: fast[:nfast], fp: fp[:nfp]})
		if nrt == 0 {
			break
		}
	}
	return out
}

type frameInfo struct {
	Function string
	File     string
	Line     int
}

func (f frameInfo) String() string { return fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line) }

func framesOf(pcs []uintptr) []frameInfo {
	var out []frameInfo
	if len(pcs) == 0 {
		return nil
	}
	fr := runtime.CallersFrames(pcs)
	for {
		f, more := fr.Next()
		out = append(out, frameInfo{f.Function, f.File, f.Line})
		if !more {
			break
		}
	}
	return out
}

// compareStacks reports the first difference between want (from
// runtime.Callers) and got, both as PCs and as frames.
func compareStacks(want, got []uintptr) error {
	wf, gf := framesOf(want), framesOf(got)
	for i := 0; i < len(wf) || i < len(gf); i++ {
		var w, g frameInfo
		if i < len(wf) {
			w = wf[i]
		}
		if i < len(gf) {
			g = gf[i]
		}
		if w != g {
			return fmt.Errorf("frame %d differs: runtime %v, got %v\nruntime stack:\n%s\ngot stack:\n%s",
				i, w, g, dumpFrames(wf), dumpFrames(gf))
		}
	}
	if len(want) != len(got) {
		return fmt.Errorf("%d PCs, runtime.Callers gave %d", len(got), len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			return fmt.Errorf("PC %d is %#x, runtime.Callers gave %#x", i, got[i], want[i])
		}
	}
	return nil
}

func dumpFrames(fs []frameInfo) string {
	var b strings.Builder
	for i, f := range fs {
		fmt.Fprintf(&b, "  %2d %v\n", i, f)
	}
	return b.String()
}

// checkCaptures compares every capture with runtime.Callers' and returns
// the first mismatch as an error (usable from any goroutine).
func checkCaptures(cs []captures) error {
	if len(cs) == 0 || len(cs[0].rt) == 0 {
		return fmt.Errorf("runtime.Callers captured nothing")
	}
	for _, c := range cs {
		if err := compareStacks(c.rt, c.fast); err != nil {
			return fmt.Errorf("Callers, skip %d: %v", c.skip, err)
		}
		if err := compareStacks(c.rt, c.fp); err != nil {
			return fmt.Errorf("CallersFP+Expand, skip %d: %v", c.skip, err)
		}
	}
	return nil
}

// here captures at its call site for the default range of skips and checks
// the result. Keep the skip range small for deep stacks: each skip is a
// full capture.
//
//go:noinline
func here(maxSkip int) error {
	return checkCaptures(captureAll(maxSkip, maxStack))
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
