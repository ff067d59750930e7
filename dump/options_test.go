package dump

import (
	"testing"

	"github.com/rewindstack/rewind/runtimes"
	"github.com/rewindstack/rewind/unwind"
)

// TestNoRuntimes: the runtimes named in NoRuntimes are left out, the
// others kept in registry order.
func TestNoRuntimes(t *testing.T) {
	all := runtimes.All()
	if len(all) == 0 {
		t.Skip("no runtime registered")
	}
	if got := newPipe(Options{}).runtimes(); len(got) != len(all) {
		t.Fatalf("with none left out: %d runtimes, want %d", len(got), len(all))
	}
	left := all[0].Name()
	got := newPipe(Options{NoRuntimes: []string{left}}).runtimes()
	if len(got) != len(all)-1 {
		t.Fatalf("with %s left out: %d runtimes, want %d", left, len(got), len(all)-1)
	}
	for i, r := range got {
		if r.Name() == left || r.Name() != all[i+1].Name() {
			t.Errorf("runtime %d is %s, want %s", i, r.Name(), all[i+1].Name())
		}
	}
}

// TestReadsTables: the early work prepares unwind tables for the methods
// whose walks read them (auto and dwarf), as the CLI did by name.
func TestReadsTables(t *testing.T) {
	for name, want := range map[string]bool{"auto": true, "dwarf": true, "fp": false, "sframe": false, "gopclntab": false} {
		u, err := unwind.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := newPipe(Options{Unwinder: u}).readsTables(); got != want {
			t.Errorf("%s: reads tables %v, want %v", name, got, want)
		}
	}
	if !newPipe(Options{}).readsTables() {
		t.Errorf("the default unwinder reads no tables")
	}
}

// TestPendingWait: a dump given a Pending leaves the save to it, and
// waiting twice, or on a Pending no dump was given, returns.
func TestPendingWait(t *testing.T) {
	var never Pending
	never.Wait()
	var p Pending
	saved := 0
	pp := newPipe(Options{Pending: &p})
	pp.finish()
	if p.save == nil {
		t.Fatal("the save was not left to Pending")
	}
	inner := p.save
	p.save = func() { saved++; inner() }
	p.Wait()
	p.Wait()
	if saved != 1 {
		t.Errorf("saved %d times, want 1", saved)
	}
}
