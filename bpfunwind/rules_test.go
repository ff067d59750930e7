package bpfunwind

import (
	"errors"
	"math"
	"testing"

	"github.com/cilium/ebpf"
)

// fakeRules records what pack writes to the rules map.
type fakeRules map[uint32]rule

func (f fakeRules) Update(key, value any, _ ebpf.MapUpdateFlags) error {
	f[key.(uint32)] = *value.(*rule)
	return nil
}

// TestPackSharesRules packs two files' rows: equal rules get one index,
// written once, across files; PCs are relative to each file's first row.
func TestPackSharesRules(t *testing.T) {
	var tb ruleTable
	m := fakeRules{}
	a := []Row{{PC: 0x1000, CFA: CFASP, CFAOff: 8, RA: RegAtCFA, RAOff: -8}, {PC: 0x1004, CFA: CFASP, CFAOff: 16, RA: RegAtCFA, RAOff: -8}, {PC: 0x1010}}
	b := []Row{{PC: 0x400000, CFA: CFASP, CFAOff: 16, RA: RegAtCFA, RAOff: -8}, {PC: 0x400020}}
	pa, basea, err := tb.pack(a, m)
	if err != nil || basea != 0x1000 {
		t.Fatalf("pack a: base %#x, %v", basea, err)
	}
	pb, baseb, err := tb.pack(b, m)
	if err != nil || baseb != 0x400000 {
		t.Fatalf("pack b: base %#x, %v", baseb, err)
	}
	if len(m) != 3 || tb.count() != 3 {
		t.Fatalf("%d rules written, %d counted, want 3 (two rules and the gap)", len(m), tb.count())
	}
	if pa[1].Rule != pb[0].Rule || pa[0].Rule == pa[1].Rule || pa[2].Rule != pb[1].Rule {
		t.Errorf("rule indexes a %v, b %v: equal rules must share an index", pa, pb)
	}
	if pa[1].PC != 4 || pa[2].PC != 0x10 || pb[1].PC != 0x20 {
		t.Errorf("packed PCs a %v, b %v, want relative to each file's first row", pa, pb)
	}
	for i, r := range a {
		if got := m[pa[i].Rule]; got != (rule{r.CFAOff, r.RAOff, r.FPOff, r.CFA, r.RA, r.FP, r.Flags}) {
			t.Errorf("row %d's rule is %+v, want %+v", i, got, r)
		}
	}
}

// TestPackRefuses refuses rows spanning more than 4 GiB and new rules
// past MaxRules, writing nothing for the latter's file past the limit.
func TestPackRefuses(t *testing.T) {
	var tb ruleTable
	m := fakeRules{}
	if _, _, err := tb.pack([]Row{{PC: 0}, {PC: math.MaxUint32 + 1}}, m); err == nil {
		t.Error("rows spanning more than 4 GiB were packed")
	}
	rows := make([]Row, MaxRules+1)
	for i := range rows {
		rows[i] = Row{PC: uint64(i), CFA: CFASP, CFAOff: int32(i)}
	}
	if _, _, err := tb.pack(rows, m); !errors.Is(err, errRulesFull) {
		t.Errorf("%d distinct rules: err %v, want errRulesFull", len(rows), err)
	}
}
