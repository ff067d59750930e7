package fibers_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/fibers"
	"github.com/rewindstack/rewind/internal/procmaps"
	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/live"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/stacks"
	"github.com/rewindstack/rewind/symbolize"
	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwind"
)

// adjacentFiber is one parked context a run of testdata/adjacent_*.c*
// reports: its spec, the function that switched away, and backtrace()'s
// return addresses of its callers.
type adjacentFiber struct {
	spec fibers.Spec
	fn   string
	ret  []uint64
}

// adjacentRun is a started testdata/adjacent_uc.c or adjacent_fc.cc: its
// parked contexts, its stale records and its stacks' mmap [lo, hi).
type adjacentRun struct {
	p      *fixture.Proc
	real   []adjacentFiber
	stale  []fibers.Spec
	lo, hi uint64
}

// buildAdjacent compiles src (C with gcc, C++ with g++ and boost.context)
// with flags.
func buildAdjacent(t *testing.T, src string, flags ...string) string {
	t.Helper()
	if live.HostArch != regs.AMD64 {
		t.Skipf("the scan reads x86-64 contexts (this is %s)", live.HostArch)
	}
	cc, libs := "gcc", []string{}
	if strings.HasSuffix(src, ".cc") {
		cc, libs = "g++", []string{"-lboost_context"}
		if _, err := os.Stat("/usr/include/boost/context/fiber.hpp"); err != nil {
			t.Skip("boost.context not installed (Debian: libboost-context-dev)")
		}
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip(cc + " not installed")
	}
	exe := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	args := append(append([]string{"-g", "-o", exe, src}, flags...), libs...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
	}
	return exe
}

// startAdjacent runs exe with its stacks laid out as layout says
// ("merged": one mapping; "guard": one per stack) and reads its report.
func startAdjacent(t *testing.T, exe, layout string) adjacentRun {
	t.Helper()
	r := adjacentRun{p: fixture.Start(t, exe, layout)}
	for _, line := range strings.Split(r.p.Stderr(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[0] == "fiber":
			a := adjacentFiber{spec: fibers.Spec{Kind: f[1], Addr: hex(t, f[2])}, fn: f[3]}
			for _, s := range f[4:] {
				a.ret = append(a.ret, hex(t, s))
			}
			r.real = append(r.real, a)
		case len(f) == 3 && f[0] == "stale":
			r.stale = append(r.stale, fibers.Spec{Kind: f[1], Addr: hex(t, f[2])})
		case len(f) == 3 && f[0] == "arena":
			r.lo, r.hi = hex(t, f[1]), hex(t, f[2])
		}
	}
	if len(r.real) < 9 || len(r.stale) == 0 || r.lo == 0 {
		t.Fatalf("fixture's report: %d fibers, %d stale records, arena %#x:\n%s", len(r.real), len(r.stale), r.lo, r.p.Stderr())
	}
	return r
}

func (r *adjacentRun) specs() []fibers.Spec {
	var out []fibers.Spec
	for _, a := range r.real {
		out = append(out, a.spec)
	}
	return out
}

// checkLayout: the stacks' mmap is one writable mapping ("merged") or one
// per stack ("guard"), and the process's thread runs on one of its stacks
// (fiber 7's), beside the parked ones.
func checkLayout(t *testing.T, r *adjacentRun, layout string, threadSP uint64) {
	t.Helper()
	maps, err := procmaps.Read(r.p.PID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range maps {
		if m.Start < r.hi && m.End > r.lo && strings.HasPrefix(m.Perms, "rw") {
			n++
		}
	}
	if (layout == "merged") != (n == 1) || n == 0 {
		t.Fatalf("%s layout: %d writable mappings over the stacks' mmap %#x-%#x", layout, n, r.lo, r.hi)
	}
	if threadSP < r.lo || threadSP >= r.hi {
		t.Fatalf("the thread's stack pointer %#x is not on the stacks' mmap %#x-%#x", threadSP, r.lo, r.hi)
	}
}

// TestScanAdjacentStacks: programs whose fiber stacks are adjacent slices
// of one mmap, ucontext (testdata/adjacent_uc.c) and boost.context
// (adjacent_fc.cc), with the process's thread running on one of those
// stacks and stale records of several kinds beside the parked fibers (see
// the sources): --fiber-scan's contexts, once walked and past
// Phantoms, are exactly the parked ones the program reports, with
// the stacks in one mapping and with a guard page splitting it into one
// per stack, at -O1 and at -O2 without frame pointers; each unwinds to
// the function that switched away, then to the return addresses
// backtrace() saw there, all of them. From a gcore core too (-O1, one
// mapping).
func TestScanAdjacentStacks(t *testing.T) {
	for _, src := range []string{"testdata/adjacent_uc.c", "testdata/adjacent_fc.cc"} {
		for _, flags := range [][]string{{"-O1"}, {"-O2", "-fomit-frame-pointer"}} {
			name := strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)) + strings.Join(flags, "")
			t.Run(name, func(t *testing.T) {
				exe := buildAdjacent(t, src, flags...)
				for _, layout := range []string{"merged", "guard"} {
					t.Run(layout, func(t *testing.T) {
						r := startAdjacent(t, exe, layout)
						found, _, err := fibers.ScanLive(r.p.PID, fibers.ScanLimits{})
						if err != nil {
							t.Fatal(err)
						}
						fc := fibers.NewCopier(r.p.PID, found, false, func(s string) { t.Error(s) })
						var opt live.Options
						fc.Apply(&opt)
						snap, err := live.Capture(r.p.PID, opt)
						if err != nil {
							t.Fatal(err)
						}
						tg := snap.Target(nil, nil)
						sp, _ := snap.Threads[0].Regs.SP()
						checkLayout(t, &r, layout, sp)
						tg.Contexts = append(tg.Contexts, fc.Contexts(tg, func(s string) { t.Error(s) })...)
						checkAdjacent(t, &r, tg, found, "")
						if flags[0] == "-O1" && layout == "merged" {
							c, ctg := coreTarget(t, fixture.Gcore(t, r.p), r.p.Exe)
							found, _, err := fibers.ScanCore(ctg, c.AnonymousSegments(), fibers.ScanLimits{})
							if err != nil {
								t.Fatal(err)
							}
							ctg.Contexts = append(ctg.Contexts, fibers.FromCore(ctg, found, false, func(s string) { t.Error(s) })...)
							checkAdjacent(t, &r, ctg, found, "core: ")
						}
					})
				}
			})
		}
	}
}

// checkAdjacent walks tg (its scanned contexts found among them) and
// checks what Phantoms keeps against the program's report.
func checkAdjacent(t *testing.T, r *adjacentRun, tg *target.Target, found []fibers.Spec, where string) {
	t.Helper()
	walks := dropPhantoms(stacks.Walk(tg, stacks.Options{Unwinder: unwind.NewAuto()}), found)
	if got, want := specSet(walkedSpecs(walks)), specSet(r.specs()); got != want {
		t.Errorf("%sscan found %s\nkept %s\nwant the parked contexts %s\n(stale records: %s)", where, specSet(found), got, want, specSet(r.stale))
	}
	rep := stacks.Report(tg, walks, &symbolize.Symbolizer{})
	byAddr := map[uint64]int{}
	for i, f := range rep.Fibers {
		byAddr[f.Context] = i
	}
	for _, a := range r.real {
		i, ok := byAddr[a.spec.Addr]
		if !ok {
			continue // said above
		}
		f := rep.Fibers[i]
		var fns []string
		var pcs []uint64
		for _, fr := range f.Frames {
			if !fr.Inlined {
				fns = append(fns, fr.Function)
				pcs = append(pcs, fr.PC)
			}
		}
		if len(fns) == 0 || fns[0] != a.fn || !slices.Equal(pcs[1:], a.ret) {
			t.Errorf("%s%v: frames %s (end %s %s)\nwant %s, then backtrace()'s %x", where, a.spec, names(f.Frames), f.End, f.EndDetail, a.fn, a.ret)
		}
	}
	if t.Failed() {
		var b strings.Builder
		for _, f := range rep.Fibers {
			fmt.Fprintf(&b, "%s@%#x:%s (end %s)\n", f.Kind, f.Context, names(f.Frames), f.End)
		}
		t.Logf("%sfibers walked:\n%s", where, b.String())
	}
}
