package bpfunwind

import (
	"testing"

	"github.com/rewindstack/rewind/target"
	"github.com/rewindstack/rewind/unwindtable"
)

// TestCompileRowsLibc compiles Debian's libc and checks, at every row
// boundary and in the middle of every row of its unwind table, that the
// row the BPF program's binary search finds carries the table's rule (or
// says it cannot apply it), and that the thread roots (clone3) are
// marked.
func TestCompileRowsLibc(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	objs := &target.Objects{}
	mod := objs.Module(libc)
	if mod.File == nil {
		t.Skipf("%s: %v", libc, mod.Err)
	}
	tab, err := mod.Table()
	if err != nil {
		t.Fatal(err)
	}
	marks := Marks(mod)
	rows := CompileRows(tab, marks)
	t.Logf("%d rows (%d bytes) from %d table rows, %d marks", len(rows), 24*len(rows), tab.Stats().Rows, len(marks))
	if len(rows) == 0 || len(rows) > MaxRows {
		t.Fatalf("%d rows", len(rows))
	}
	checked := 0
	tab.Rows(func(start, end uint64, r *unwindtable.Rule) {
		for _, pc := range []uint64{start, start + (end-start)/2, end - 1} {
			got, ok := Lookup(rows, pc)
			want := convert(r)
			if !ok {
				t.Fatalf("%#x: no row", pc)
			}
			got.PC, got.Flags, want.Flags = 0, got.Flags&0xf0, want.Flags&0xf0
			if got != want {
				t.Fatalf("%#x: row %+v, table rule %v (%+v)", pc, got, r, want)
			}
			checked++
		}
	})
	roots := 0
	for _, m := range marks {
		if r, ok := Lookup(rows, m.Start); !ok || r.Flags&m.Flags == 0 {
			t.Errorf("mark %+v: row %+v", m, r)
		}
		if m.Flags&RowRoot != 0 {
			roots++
		}
	}
	if roots == 0 {
		t.Errorf("no thread root marked in libc (clone, clone3)")
	}
	t.Logf("%d lookups agree", checked)
}
