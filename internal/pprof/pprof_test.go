package pprof

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
)

// TestReadByPprof: what Write writes, github.com/google/pprof/profile
// reads back with every field as it was.
func TestReadByPprof(t *testing.T) {
	exe := &Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/bin/prog", BuildID: "abcd",
		HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	kern := &Mapping{ID: 2, File: "[kernel.kallsyms]", HasFunctions: true}
	main := &Function{ID: 1, Name: "main", SystemName: "main", Filename: "prog.c"}
	inl := &Function{ID: 2, Name: "ns::f(int)", SystemName: "_ZN2ns1fEi", Filename: "f.h"}
	sched := &Function{ID: 3, Name: "schedule", SystemName: "schedule"}
	l1 := &Location{ID: 1, Mapping: exe, Address: 0x401234, Line: []Line{{inl, 7}, {main, 42}}}
	l2 := &Location{ID: 2, Mapping: kern, Address: 0xffffffff81000000, Line: []Line{{sched, 0}}}
	l3 := &Location{ID: 3, Mapping: exe, Address: 0x401000}
	p := &Profile{
		SampleType: []*ValueType{{"samples", "count"}, {"cpu", "nanoseconds"}},
		PeriodType: &ValueType{"cpu", "nanoseconds"}, Period: 10101010,
		TimeNanos: 1700000000000000000, DurationNanos: 60e9,
		Mapping: []*Mapping{exe, kern}, Function: []*Function{main, inl, sched}, Location: []*Location{l1, l2, l3},
		Sample: []*Sample{
			{Location: []*Location{l2, l1, l3}, Value: []int64{3, 30303030},
				Label: map[string][]string{"thread": {"worker"}}, NumLabel: map[string][]int64{"pid": {7}, "tid": {8}}},
			{Location: []*Location{l3}, Value: []int64{1, 10101010}, NumLabel: map[string][]int64{"pid": {-1}}},
		},
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if got.Period != p.Period || got.PeriodType.Type != "cpu" || got.TimeNanos != p.TimeNanos || got.DurationNanos != p.DurationNanos {
		t.Errorf("header: %+v", got)
	}
	if len(got.SampleType) != 2 || got.SampleType[1].Type != "cpu" || got.SampleType[1].Unit != "nanoseconds" {
		t.Errorf("sample types %v", got.SampleType)
	}
	m := got.Mapping[0]
	if m.ID != 1 || m.Start != exe.Start || m.Limit != exe.Limit || m.Offset != exe.Offset || m.File != exe.File ||
		m.BuildID != exe.BuildID || !m.HasFunctions || !m.HasFilenames || !m.HasLineNumbers || !m.HasInlineFrames {
		t.Errorf("mapping %+v", m)
	}
	if got.Mapping[1].File != "[kernel.kallsyms]" || got.Mapping[1].HasFilenames {
		t.Errorf("kernel mapping %+v", got.Mapping[1])
	}
	if len(got.Function) != 3 || got.Function[1].Name != "ns::f(int)" || got.Function[1].SystemName != "_ZN2ns1fEi" || got.Function[1].Filename != "f.h" {
		t.Errorf("functions %+v", got.Function)
	}
	if len(got.Sample) != 2 {
		t.Fatalf("%d samples", len(got.Sample))
	}
	s := got.Sample[0]
	if len(s.Location) != 3 || s.Location[0].ID != 2 || s.Location[1].ID != 1 || s.Value[0] != 3 || s.Value[1] != 30303030 {
		t.Errorf("sample %+v", s)
	}
	if s.Label["thread"][0] != "worker" || s.NumLabel["pid"][0] != 7 || s.NumLabel["tid"][0] != 8 {
		t.Errorf("labels %v %v", s.Label, s.NumLabel)
	}
	if got.Sample[1].NumLabel["pid"][0] != -1 {
		t.Errorf("negative label %v", got.Sample[1].NumLabel)
	}
	l := s.Location[1]
	if l.Address != 0x401234 || l.Mapping.ID != 1 || len(l.Line) != 2 || l.Line[0].Function.Name != "ns::f(int)" || l.Line[0].Line != 7 || l.Line[1].Line != 42 {
		t.Errorf("location %+v", l)
	}
	if len(s.Location[2].Line) != 0 {
		t.Errorf("location without lines: %+v", s.Location[2])
	}
}

// TestCheckValid: the mistakes that make a profile unreadable are caught.
func TestCheckValid(t *testing.T) {
	f := &Function{ID: 1, Name: "f"}
	l := &Location{ID: 1, Line: []Line{{f, 1}}}
	ok := func() *Profile {
		return &Profile{SampleType: []*ValueType{{"samples", "count"}}, Function: []*Function{f}, Location: []*Location{l},
			Sample: []*Sample{{Location: []*Location{l}, Value: []int64{1}}}}
	}
	if err := ok().CheckValid(); err != nil {
		t.Fatal(err)
	}
	bad := []func(p *Profile){
		func(p *Profile) { p.Sample[0].Value = []int64{1, 2} },
		func(p *Profile) { p.Sample[0].Location = []*Location{{ID: 9}} },
		func(p *Profile) { p.Location = append(p.Location, &Location{ID: 1}) },
		func(p *Profile) { p.Function = nil },
		func(p *Profile) { p.Location[0] = &Location{ID: 1, Mapping: &Mapping{ID: 1}} },
		func(p *Profile) { p.Function = []*Function{{ID: 0}} },
	}
	for i, b := range bad {
		p := ok()
		b(p)
		if p.CheckValid() == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}
