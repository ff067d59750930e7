package bpfunwind

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/cilium/ebpf"
)

// packedRow is the rows map's value (struct row): where a rule starts,
// relative to its file's base, and the rule's index in the rules map.
type packedRow struct {
	PC   uint32
	Rule uint32
}

// rule is the rules map's value (struct rule): a Row without its PC.
type rule struct {
	CFAOff, RAOff, FPOff int32
	CFA, RA, FP, Flags   uint8
}

// ruleTable gives the rules of every file's rows their indexes in the
// rules map. Rows share rules (a compiler's million rows have a few
// thousand distinct ones), so a row is 8 bytes, not 24. A rule once
// written is never changed nor taken back: the rows of any file loaded,
// evicted and loaded again keep pointing at the same rules, and the
// table is bounded by the distinct rules the host's files have.
type ruleTable struct {
	mu  sync.Mutex
	ids map[rule]uint32
}

// ruleMap is what pack writes new rules to (the BPF rules map).
type ruleMap interface {
	Update(key, value any, flags ebpf.MapUpdateFlags) error
}

// errRulesFull: the rules map has no room for a file's new rules.
var errRulesFull = errors.New("the BPF rules map is full")

// pack turns a file's rows into the rows map's values, relative to the
// first row's PC (the base returned), writing the rules not seen before
// to m. A file spanning more than 4 GiB of addresses, or whose new rules
// do not fit in MaxRules, is refused.
func (t *ruleTable) pack(rows []Row, m ruleMap) ([]packedRow, uint64, error) {
	if len(rows) == 0 {
		return nil, 0, nil
	}
	base := rows[0].PC
	if span := rows[len(rows)-1].PC - base; span > math.MaxUint32 {
		return nil, 0, fmt.Errorf("its rows span %#x bytes of addresses, more than the 4 GiB the BPF rows hold", span)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ids == nil {
		t.ids = map[rule]uint32{}
	}
	out := make([]packedRow, len(rows))
	for i := range rows {
		r := &rows[i]
		k := rule{r.CFAOff, r.RAOff, r.FPOff, r.CFA, r.RA, r.FP, r.Flags}
		id, ok := t.ids[k]
		if !ok {
			if len(t.ids) >= MaxRules {
				return nil, 0, fmt.Errorf("%w (%d distinct rules)", errRulesFull, MaxRules)
			}
			id = uint32(len(t.ids))
			if err := m.Update(id, &k, ebpf.UpdateAny); err != nil {
				return nil, 0, fmt.Errorf("writing a rule to the BPF rules map: %v", err)
			}
			t.ids[k] = id
		}
		out[i] = packedRow{uint32(r.PC - base), id}
	}
	return out, base, nil
}

// count returns how many distinct rules the rules map holds.
func (t *ruleTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ids)
}
