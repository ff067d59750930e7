package unwind

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"github.com/rewindstack/rewind/target"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/rewindstack/rewind/cfi"
	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"github.com/rewindstack/rewind/regs"
	"github.com/rewindstack/rewind/unwindtable"
)

const (
	fuzzText  = 0x400000 // where the fuzzed .eh_frame claims to live
	fuzzStack = 0x7ff000 // where the fuzzed stack bytes are mapped
)

// FuzzTableWalk compiles arbitrary .eh_frame bytes into a table and walks
// arbitrary stack bytes with it: the table must stay consistent with
// itself, and walks must end (within the depth limit) without panicking,
// whatever the input.
func FuzzTableWalk(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, ehFrame, stack []byte, pcOff, spOff uint16) {
		sec := &cfi.Section{Name: "fuzz .eh_frame", Kind: cfi.EhFrame, Data: ehFrame, Addr: fuzzText,
			ByteOrder: binary.LittleEndian, PtrSize: 8}
		tab, err := unwindtable.Build(regs.AMD64, sec)
		if err != nil {
			return
		}
		tab.Rows(func(start, end uint64, r *unwindtable.Rule) {
			got, ok := tab.Lookup(start)
			if ok != (r.CFABase != unwindtable.CFANone) || (ok && got != r) {
				t.Fatalf("Lookup(%#x) = %v %v, row says %v", start, got, ok, r)
			}
			if end > start+1 {
				if got2, ok2 := tab.Lookup(end - 1); ok2 != ok || got2 != got {
					t.Fatalf("Lookup(%#x) disagrees with Lookup(%#x)", end-1, start)
				}
			}
		})
		mod := target.ModuleWithTable("fuzz", tab)
		space := target.NewAddressSpace([]target.Mapping{
			{Start: fuzzText, End: fuzzText + 1<<20, Path: "fuzz", Module: mod},
		}, nil)
		mem := &target.Snapshot{Regions: []target.Region{{Addr: fuzzStack, Data: stack}}}
		r := regs.New(regs.AMD64)
		r.Set(regs.AMD64RIP, fuzzText+uint64(pcOff))
		r.Set(regs.AMD64RSP, fuzzStack+uint64(spOff)%(uint64(len(stack))+1))
		r.Set(regs.AMD64RBP, fuzzStack+uint64(spOff)/2)
		// A second sample of the thread: the leaf moved and one stack
		// byte changed; then the first again.
		stack2 := slices.Clone(stack)
		if len(stack2) > 0 {
			stack2[int(pcOff)%len(stack2)] ^= 0x5a
		}
		mem2 := &target.Snapshot{Regions: []target.Region{{Addr: fuzzStack, Data: stack2}}}
		r2 := r
		r2.Set(regs.AMD64RIP, fuzzText+uint64(pcOff)+1)
		for _, u := range []*Unwinder{NewAuto(), NewDWARF(), NewFP()} {
			u.MaxDepth = 64
			st := u.Walk(r, mem, space)
			if len(st.Frames) > 64 || len(st.Frames) == 0 {
				t.Fatalf("%d frames, end %v", len(st.Frames), st.End)
			}
			// Walks with a memo are the fresh walks, whatever the memo
			// holds.
			var m Memo
			var got Stack
			for _, w := range []struct {
				r   regs.Regs
				mem *target.Snapshot
			}{{r, mem}, {r2, mem2}, {r, mem}, {r2, mem}} {
				want := u.Walk(w.r, w.mem, space)
				u.WalkMemo(&got, w.r, w.mem, space, &m)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("walk with a memo:\n%+v\nfresh:\n%+v", got, want)
				}
			}
		}
	})
}

// TestWriteFuzzSeeds regenerates the committed seed corpus from programs
// compiled here (REWIND_WRITE_SEEDS=1): real .eh_frame sections with a
// stack that holds plausible return addresses.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("REWIND_WRITE_SEEDS") == "" {
		t.Skip("set REWIND_WRITE_SEEDS=1 to regenerate testdata/fuzz/FuzzTableWalk")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "s.c")
	os.WriteFile(src, []byte(`int g(int x) { return x * 3; }
int f(int x) { int a[8]; for (int i = 0; i < 8; i++) a[i] = g(x + i); return a[x & 7]; }
int main(int c, char **v) { return f(c); }`), 0o644)
	out := filepath.Join("testdata", "fuzz", "FuzzTableWalk")
	for i, flags := range [][]string{{"-O0"}, {"-O2", "-fomit-frame-pointer"}} {
		obj := filepath.Join(dir, fmt.Sprint("o", i))
		args := append(append([]string{}, flags...), "-c", src, "-o", obj)
		if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v %s", err, b)
		}
		ef, err := elf.Open(obj)
		if err != nil {
			t.Fatal(err)
		}
		data, err := ef.Section(".eh_frame").Data()
		ef.Close()
		if err != nil {
			t.Fatal(err)
		}
		stack := make([]byte, 128)
		for w := 0; w < 16; w++ {
			binary.LittleEndian.PutUint64(stack[w*8:], fuzzText+uint64(w*13))
		}
		if err := fuzzcorpus.Write(out, "gcc-"+flags[0], data, stack, uint16(5+i*3), uint16(16)); err != nil {
			t.Fatal(err)
		}
	}
}
