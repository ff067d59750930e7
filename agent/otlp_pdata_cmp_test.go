package agent

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

// decodeOTLP reads an ExportProfilesServiceRequest with pdata.
func decodeOTLP(t testing.TB, b []byte) pprofile.Profiles {
	t.Helper()
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(b); err != nil {
		t.Fatalf("pdata cannot read the request: %v", err)
	}
	return req.Profiles()
}

// TestOTLPMatchesPdata: for periods of every shape, OTLP's bytes are the
// bytes pdata marshals from the same profiles built with pdata (the
// builder rewind had before), and pdata reads them back as those
// profiles.
func TestOTLPMatchesPdata(t *testing.T) {
	periods := map[string]*Period{}
	for _, typ := range []string{TypeCPU, TypeOffCPU} {
		periods[typ] = testPeriod(typ)
		p := testPeriod(typ)
		p.Symbolized = false
		periods[typ+" unsymbolized"] = p
	}
	p := testPeriod(TypeCPU)
	p.Profile = &profiles.Profile{}
	periods["empty"] = p
	p = testPeriod(TypeCPU)
	p.Start, p.End = time.Unix(0, 0), time.Unix(0, 0)
	periods["time zero"] = p
	p = testPeriod(TypeOffCPU)
	p.Procs = nil
	p.Host = ""
	periods["no process info"] = p
	p = testPeriod(TypeCPU)
	p.Procs[42] = &ProcInfo{PID: 42, Comm: "app"}
	periods["no exe"] = p
	for seed := range 200 {
		periods["random "+strconv.Itoa(seed)] = randomPeriod(rand.New(rand.NewPCG(uint64(seed), 7)))
	}
	for name, p := range periods {
		got := OTLP(p)
		want, err := pprofileotlp.NewExportRequestFromProfiles(otlpPdata(p)).MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s: %d bytes, pdata's %d; first difference at %d: % x vs % x", name, len(got), len(want), i,
				got[i:min(i+16, len(got))], want[i:min(i+16, len(want))])
			continue
		}
		// And pdata reads them as the profiles built with pdata.
		back := decodeOTLP(t, got)
		if g, w := fmt.Sprint(flatten(back)), fmt.Sprint(flatten(otlpPdata(p))); g != w {
			t.Errorf("%s: pdata reads\n%s\nwant\n%s", name, g, w)
		}
	}
}

// randomPeriod is a period of a few processes and threads with random
// mappings (some without build-id), kernel and user locations, inlined
// lines, unsymbolized frames and values, large and negative numbers.
func randomPeriod(r *rand.Rand) *Period {
	prof := &profiles.Profile{}
	for i := range r.IntN(4) {
		m := &profiles.Mapping{ID: uint64(i + 1), Start: r.Uint64() >> r.IntN(64), End: r.Uint64(), Offset: r.Uint64() >> r.IntN(64),
			Path: "/lib/l" + strconv.Itoa(r.IntN(3)) + ".so"}
		if r.IntN(2) == 0 {
			m.BuildID = strconv.FormatUint(r.Uint64(), 16)
		}
		prof.Mappings = append(prof.Mappings, m)
	}
	for i := range r.IntN(12) {
		l := &profiles.Location{ID: uint64(i + 1), Addr: r.Uint64() >> r.IntN(64), Kernel: r.IntN(5) == 0}
		if len(prof.Mappings) > 0 && r.IntN(4) != 0 {
			l.Mapping = prof.Mappings[r.IntN(len(prof.Mappings))]
		}
		for range r.IntN(3) {
			l.Lines = append(l.Lines, symbolize.Location{Function: "f" + strconv.Itoa(r.IntN(6)), File: []string{"", "a.c", "b.go"}[r.IntN(3)],
				Line: r.IntN(3) * r.IntN(100000)})
		}
		prof.Locations = append(prof.Locations, l)
	}
	for range r.IntN(30) {
		s := profiles.Stack{PID: 1 + r.IntN(3), TID: r.IntN(1 << r.IntN(31)), Comm: []string{"", "a", "worker 1"}[r.IntN(3)],
			Value: r.Int64N(1<<40) - 1<<20}
		for range r.IntN(6) {
			if len(prof.Locations) > 0 {
				s.Locations = append(s.Locations, prof.Locations[r.IntN(len(prof.Locations))])
			}
		}
		prof.Stacks = append(prof.Stacks, s)
	}
	t0 := time.Unix(r.Int64N(1<<34), r.Int64N(1e9))
	p := &Period{Type: []string{TypeCPU, TypeOffCPU}[r.IntN(2)], Start: t0, End: t0.Add(time.Duration(r.Int64N(1 << 40))), Profile: prof,
		Symbolized: r.IntN(3) != 0, Host: "h" + strconv.Itoa(r.IntN(2)), Seq: r.IntN(1000), Procs: map[int]*ProcInfo{}}
	for pid := 1; pid <= 3; pid++ {
		if r.IntN(3) == 0 {
			continue
		}
		info := &ProcInfo{PID: pid, Comm: []string{"", "app", "l0.so"}[r.IntN(3)], Cgroup: []string{"", "/a.slice"}[r.IntN(2)]}
		if r.IntN(2) == 0 {
			info.Exe = "/lib/l" + strconv.Itoa(r.IntN(3)) + ".so"
		}
		if r.IntN(2) == 0 {
			info.ContainerID = hex64
		}
		p.Procs[pid] = info
	}
	return p
}
