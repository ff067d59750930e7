package target

import (
	"fmt"
	"strings"
	"testing"
)

// names is a native stack of function names, for Splice.
type names []string

func (n names) Len() int                      { return len(n) }
func (n names) IsEntry(i int, fn string) bool { return n[i] == fn }
func (n names) Holding(uint64) int            { return -1 }
func (n names) PhysPC(int) uint64             { return 0 }

func splice(st []InterpStack, nat names, opt SpliceOptions) string {
	var out []string
	Splice(st, nat, opt, func(i int) { out = append(out, nat[i]) },
		func(f *InterpFrame) { out = append(out, f.Function) })
	return strings.Join(out, " ")
}

// TestSpliceTwoRuntimes: two runtimes share a thread (Python calling
// Lua through a C extension): each one's activations go before its own
// entry frames, whatever the other's.
func TestSpliceTwoRuntimes(t *testing.T) {
	nat := names{"lj_vm", "lua_entry", "ext_call", "py_eval", "call", "py_eval", "main"}
	var c Context
	c.SetInterp(InterpStack{Entry: "py_eval", Frames: []InterpFrame{{Function: "old"}}})
	c.SetInterp(InterpStack{Entry: "lua_entry", Frames: []InterpFrame{{Function: "l1"}, {Function: "l2"}}})
	// Re-read: the Python frames replace the first ones, in place.
	c.SetInterp(InterpStack{Entry: "py_eval", Frames: []InterpFrame{{Function: "p1"}, {Function: "p2", Activation: 1}}})
	if len(c.Interp) != 2 || c.Interp[0].Entry != "py_eval" {
		t.Fatalf("stacks %+v, want python's then lua's", c.Interp)
	}
	want := "lj_vm l1 l2 lua_entry ext_call p1 py_eval call p2 py_eval main"
	if got := splice(c.Interp, nat, SpliceOptions{}); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Activations without an entry: at the end in a dump, before the
	// outermost entry in a profile, dropped there without any entry.
	st := []InterpStack{{Entry: "py_eval", Frames: []InterpFrame{{Function: "a"}, {Function: "b", Activation: 2}}}}
	if got, want := splice(st, nat, SpliceOptions{}), "lj_vm lua_entry ext_call a py_eval call py_eval main b"; got != want {
		t.Errorf("dump: got %s, want %s", got, want)
	}
	if got, want := splice(st, nat, SpliceOptions{Outermost: true}), "lj_vm lua_entry ext_call a py_eval call b py_eval main"; got != want {
		t.Errorf("profile: got %s, want %s", got, want)
	}
	if got, want := splice(st, names{"f", "main"}, SpliceOptions{Outermost: true}), "f main"; got != want {
		t.Errorf("profile without entry: got %s, want %s", got, want)
	}
}

// pcs is a native stack of PCs (physical frames only), for Splice.
type pcs []uint64

func (n pcs) Len() int                 { return len(n) }
func (n pcs) IsEntry(int, string) bool { return false }
func (n pcs) Holding(uint64) int       { return -1 }
func (n pcs) PhysPC(i int) uint64      { return n[i] }

// TestSpliceByPCRange: an interpreter whose entry has no symbol (a
// stripped LuaJIT) places each activation before its native frames in
// the interpreter's code range.
func TestSpliceByPCRange(t *testing.T) {
	nat := pcs{0x10, 0x2005, 0x30, 0x2100, 0x40}
	st := []InterpStack{{Entry: "lj_vm", EntryPCs: []PCRange{{0x2000, 0x3000}},
		Frames: []InterpFrame{{Function: "a"}, {Function: "b"}, {Function: "c", Activation: 1}}}}
	var out []string
	Splice(st, nat, SpliceOptions{}, func(i int) { out = append(out, fmt.Sprintf("%#x", nat[i])) },
		func(f *InterpFrame) { out = append(out, f.Function) })
	want := "0x10 a b 0x2005 0x30 c 0x2100 0x40"
	if got := strings.Join(out, " "); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// pcNames is names whose frames also have PCs (a caller's return
// address - 1, as PhysPC gives them).
type pcNames struct {
	names
	pcs []uint64
}

func (n pcNames) PhysPC(i int) uint64 { return n.pcs[i] }

// TestSpliceByPC: an entry function the symbols do not name (Debian's
// Ruby 3.3 hides rb_vm_exec) is found by its address range, where the
// native side gives PCs; without them the frames go after the native
// ones.
func TestSpliceByPC(t *testing.T) {
	nat := pcNames{names{"read", "??", "??", "ary_each", "??", "main"}, []uint64{0x10, 0x2005, 0x3000, 0x40, 0x2fff, 0x50}}
	st := []InterpStack{{Entry: "vm_exec", EntryPCs: []PCRange{{0x2000, 0x3000}},
		Frames: []InterpFrame{{Function: "a"}, {Function: "b", Activation: 1}, {Function: "c", Activation: 1}}}}
	var out []string
	Splice(st, nat, SpliceOptions{}, func(i int) { out = append(out, nat.names[i]) },
		func(f *InterpFrame) { out = append(out, f.Function) })
	if got, want := strings.Join(out, " "), "read a ?? ?? ary_each b c ?? main"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, want := splice(st, nat.names, SpliceOptions{}), "read ?? ?? ary_each ?? main a b c"; got != want {
		t.Errorf("without PCs: got %s, want %s", got, want)
	}
}
