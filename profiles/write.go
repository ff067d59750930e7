package profiles

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rewindstack/rewind/internal/pprof"
	"github.com/rewindstack/rewind/runtimes"

	"github.com/rewindstack/rewind/internal/textesc"
)

// Folded is one aggregated stack, root (outermost) frame first.
type Folded struct {
	Stack []string
	Value int64
}

// FoldOptions control Fold.
type FoldOptions struct {
	// NoComm leaves out the root frame naming the thread's command.
	NoComm bool
	// KernelSuffix is appended to kernel frame names ("_[k]", as
	// Brendan Gregg's stackcollapse-perf.pl --kernel marks them).
	KernelSuffix string
	// Count makes each sample count 1 instead of its period (a folded
	// Stack its Count).
	Count bool
}

// KernelSpan returns the page-aligned range [start, limit) that holds
// every kernel location of the profile, the bounds of its kernel mapping
// in pprof and OTLP (both attribute an address to the mapping whose bounds
// hold it); 0, 0 when there is none.
func (p *Profile) KernelSpan() (start, limit uint64) {
	start = ^uint64(0)
	for _, l := range p.Locations {
		if !l.Kernel {
			continue
		}
		end := (l.Addr | 0xfff) + 1
		if end == 0 {
			end = ^uint64(0) // the address space's last page
		}
		start, limit = min(start, l.Addr&^0xfff), max(limit, end)
	}
	if limit == 0 {
		return 0, 0
	}
	return start, limit
}

// frameNames appends l's frames outermost first: the physical function,
// then the calls inlined into it.
func frameNames(dst []string, l *Location, kernelSuffix string) []string {
	for i := len(l.Lines) - 1; i >= 0; i-- {
		n := l.Lines[i].Function
		if i == len(l.Lines)-1 {
			n = l.Name()
		} else if n == "" {
			n = "[unknown inline]"
		}
		if l.Kernel {
			n += kernelSuffix
		}
		dst = append(dst, n)
	}
	return dst
}

// Fold aggregates the profile's stacks, sorted by stack.
//
// A profile has many more distinct stacks than folded ones (a hot loop is
// sampled at many PCs of the same functions: 1,900 and 98 for a 7,670-sample
// perf.data file), and joining every distinct stack's frame names to look
// it up was a third of writing a flame graph. Each location is named once
// instead, and given the number of its names: stacks are first aggregated
// by their sequence of those numbers, and only each such aggregate's names
// are joined (aggregates whose names are the same are then merged, so the
// result is the same as aggregating by names).
func (p *Profile) Fold(opt FoldOptions) []Folded {
	var names []string
	// Samples with the same stack share its Locations (see
	// Builder.stackLocs): fold each shared stack once per thread name.
	type sharedKey struct {
		comm  string
		first **Location
		n     int
	}
	shared := map[sharedKey]*Folded{}
	nameIDs := map[string]uint32{}
	byLoc := make([]uint32, len(p.Locations)) // by Location.ID-1; 0: not named yet
	otherLocs := map[*Location]uint32{}
	locName := func(l *Location) uint32 {
		slot := (*uint32)(nil)
		if l.ID >= 1 && l.ID <= uint64(len(p.Locations)) && p.Locations[l.ID-1] == l {
			slot = &byLoc[l.ID-1]
			if *slot != 0 {
				return *slot
			}
		} else if id, ok := otherLocs[l]; ok {
			return id
		}
		names = frameNames(names[:0], l, opt.KernelSuffix)
		k := strings.Join(names, "\x00")
		id, ok := nameIDs[k]
		if !ok {
			id = uint32(len(nameIDs) + 1)
			nameIDs[k] = id
		}
		if slot != nil {
			*slot = id
		} else {
			otherLocs[l] = id
		}
		return id
	}
	byIDs := map[string]*Folded{}
	var order []*Folded
	var key []byte
	for i := range p.Stacks {
		s := &p.Stacks[i]
		c := s.Comm
		if c == "" {
			c = "[pid " + strconv.Itoa(s.PID) + "]"
		}
		var sk sharedKey
		if len(s.Locations) > 0 {
			sk = sharedKey{comm: c, first: &s.Locations[0], n: len(s.Locations)}
			if f := shared[sk]; f != nil {
				if opt.Count {
					f.Value += s.Samples()
				} else {
					f.Value += s.Value
				}
				continue
			}
		}
		key = key[:0]
		if !opt.NoComm {
			key = binary.LittleEndian.AppendUint32(key, uint32(len(c)))
			key = append(key, c...)
		}
		for j := len(s.Locations) - 1; j >= 0; j-- {
			key = binary.LittleEndian.AppendUint32(key, locName(s.Locations[j]))
		}
		f := byIDs[string(key)]
		if f == nil {
			names = names[:0]
			if !opt.NoComm {
				names = append(names, c)
			}
			for j := len(s.Locations) - 1; j >= 0; j-- {
				names = frameNames(names, s.Locations[j], opt.KernelSuffix)
			}
			f = &Folded{Stack: append([]string(nil), names...)}
			byIDs[string(key)] = f
			order = append(order, f)
		}
		if sk.first != nil {
			shared[sk] = f
		}
		if opt.Count {
			f.Value += s.Samples()
		} else {
			f.Value += s.Value
		}
	}
	agg := make(map[string]*Folded, len(order))
	keys := make([]string, 0, len(order))
	for _, f := range order {
		k := strings.Join(f.Stack, "\x00")
		if g := agg[k]; g != nil {
			g.Value += f.Value
			continue
		}
		agg[k] = f
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Folded, 0, len(keys))
	for _, k := range keys {
		out = append(out, *agg[k])
	}
	return out
}

// foldedName makes a frame name safe for the folded format, whose frames
// are separated by ';' and whose lines end with " COUNT".
var foldedName = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

// WriteFolded writes Brendan Gregg's folded stack format, one line per
// unique stack, "root;caller;...;leaf COUNT", counting samples (what
// flamegraph.pl and speedscope expect); an off-CPU profile's COUNT is the
// nanoseconds blocked.
func (p *Profile) WriteFolded(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, f := range p.Fold(FoldOptions{KernelSuffix: "_[k]", Count: !p.OffCPU}) {
		for i, n := range f.Stack {
			if i > 0 {
				bw.WriteByte(';')
			}
			bw.WriteString(textesc.String(foldedName.Replace(n)))
		}
		fmt.Fprintf(bw, " %d\n", f.Value)
	}
	return bw.Flush()
}

// Pprof converts the profile to pprof's data model (write it with its
// Write method; github.com/google/pprof/profile.Parse reads that) with
// two sample values,
// samples/count and cpu/nanoseconds. Inlined calls are extra Lines of
// their Location, innermost first, as pprof expects; mappings carry their
// build-ids; samples are labelled with pid, tid and thread name.
func (p *Profile) Pprof(periodNS int64) *pprof.Profile {
	return p.pprof(periodNS, false)
}

// pprof is Pprof; with stream, the profile's Sample is empty and its
// Samples yields them, one at a time (for writing it).
func (p *Profile) pprof(periodNS int64, stream bool) *pprof.Profile {
	pp := &pprof.Profile{
		SampleType: []*pprof.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &pprof.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     periodNS,
	}
	if p.OffCPU {
		pp.SampleType[1].Type = "off_cpu"
		pp.PeriodType, pp.Period = nil, 0
	}
	maps := map[*Mapping]*pprof.Mapping{}
	// pprof takes the first mapping for the main binary: put executables
	// before shared libraries.
	ordered := append([]*Mapping(nil), p.Mappings...)
	sort.SliceStable(ordered, func(i, j int) bool { return !isLib(ordered[i].Path) && isLib(ordered[j].Path) })
	for _, m := range ordered {
		pm := &pprof.Mapping{ID: m.ID, Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Path, BuildID: m.BuildID,
			HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
		maps[m] = pm
		pp.Mapping = append(pp.Mapping, pm)
	}
	var kmap *pprof.Mapping
	type fnKey struct{ name, file string }
	funcs := map[fnKey]*pprof.Function{}
	fn := func(name, file string) *pprof.Function {
		k := fnKey{name, file}
		if f := funcs[k]; f != nil {
			return f
		}
		f := &pprof.Function{ID: uint64(len(pp.Function) + 1), Name: name, SystemName: name, Filename: file}
		funcs[k] = f
		pp.Function = append(pp.Function, f)
		return f
	}
	// The converted locations by ID when the IDs are dense (the
	// builder's are), else in a map.
	maxID := uint64(0)
	for _, l := range p.Locations {
		maxID = max(maxID, l.ID)
	}
	var locs map[*Location]*pprof.Location
	var byID []*pprof.Location
	if maxID <= 2*uint64(len(p.Locations))+16 {
		byID = make([]*pprof.Location, maxID+1)
	} else {
		locs = make(map[*Location]*pprof.Location, len(p.Locations))
	}
	locByID := func(l *Location) *pprof.Location {
		if byID != nil {
			if l.ID < uint64(len(byID)) {
				return byID[l.ID]
			}
			return nil
		}
		return locs[l]
	}
	pp.Location = make([]*pprof.Location, 0, len(p.Locations))
	for _, l := range p.Locations {
		pl := &pprof.Location{ID: l.ID, Address: l.Addr, Mapping: maps[l.Mapping]}
		if l.Kernel {
			if kmap == nil {
				start, limit := p.KernelSpan()
				kmap = &pprof.Mapping{ID: uint64(len(pp.Mapping) + 1), File: "[kernel.kallsyms]", HasFunctions: true,
					Start: start, Limit: limit}
				pp.Mapping = append(pp.Mapping, kmap)
			}
			pl.Mapping = kmap
		}
		for i, ln := range l.Lines {
			name := ln.Function
			if i == len(l.Lines)-1 {
				name = l.Name()
			}
			sys := name
			if ln.Mangled != "" {
				sys = ln.Mangled
			}
			f := fn(name, ln.File)
			if f.SystemName != sys && sys != name {
				f.SystemName = sys
			}
			if l.Interpreted {
				// No system name: pprof takes a function whose
				// system name is its name for an undemangled one,
				// and cuts what looks like C++ template arguments
				// from it ("<module>", "<listcomp>" become "").
				f.SystemName = ""
			}
			pl.Line = append(pl.Line, pprof.Line{Function: f, Line: int64(ln.Line)})
		}
		if byID != nil {
			byID[l.ID] = pl
		} else {
			locs[l] = pl
		}
		pp.Location = append(pp.Location, pl)
	}
	// A sample per thread and stack, in the order of the stacks: the
	// stacks of one thread with the same locations (folded apart for
	// their ends, or their thread's names) are one sample, whose labels
	// are the first's. The groups are found by a hash of the thread and
	// the location IDs (those of one hash are chained): a 2 GB
	// system-wide recording had 209,126 of them, and the string keys
	// and maps of each that this replaced took 150 MB.
	var order []int32   // the first stack of each group
	var sums [][2]int64 // and the group's values
	{
		heads := make(map[uint64]int32, len(p.Stacks)) // 1 + the last group's index
		var next []int32                               // 1 + the group before of the same hash
		for i := range p.Stacks {
			s := &p.Stacks[i]
			h := uint64(14695981039346656037)
			h = (h ^ uint64(s.PID)) * 1099511628211
			h = (h ^ uint64(s.TID)) * 1099511628211
			for _, l := range s.Locations {
				h = (h ^ l.ID) * 1099511628211
			}
			g := heads[h]
			for g != 0 && !sameSample(&p.Stacks[order[g-1]], s) {
				g = next[g-1]
			}
			if g == 0 {
				order = append(order, int32(i))
				sums = append(sums, [2]int64{})
				next = append(next, heads[h])
				g = int32(len(order))
				heads[h] = g
			}
			sums[g-1][0] += s.Samples()
			sums[g-1][1] += s.Value
		}
	}
	type labelKey struct {
		pid, tid int
		comm     string
	}
	labels := map[labelKey]struct {
		str map[string][]string
		num map[string][]int64
	}{}
	// sample fills ps with group g's sample, its locations in locs.
	sample := func(ps *pprof.Sample, g int, locs []*pprof.Location) {
		s := &p.Stacks[order[g]]
		// The samples of a thread share its labels (nothing changes
		// them): two maps a sample took a third of the conversion's
		// time for a profile of 14,658 stacks.
		lk := labelKey{s.PID, s.TID, s.Comm}
		lb := labels[lk]
		if lb.num == nil && len(labels) >= maxLabelSets {
			// (A recording of many short-lived threads: their labels
			// are made again when needed.)
			clear(labels)
		}
		if lb.num == nil {
			lb.num = map[string][]int64{"pid": {int64(s.PID)}, "tid": {int64(s.TID)}}
			lb.str = map[string][]string{}
			if s.Comm != "" {
				lb.str["thread"] = []string{s.Comm}
			}
			labels[lk] = lb
		}
		ps.Label, ps.NumLabel = lb.str, lb.num
		ps.Value = sums[g][:]
		for i, l := range s.Locations {
			locs[i] = locByID(l)
		}
		ps.Location = locs[:len(s.Locations)]
	}
	if stream {
		pp.Samples = func(yield func(*pprof.Sample) bool) {
			var ps pprof.Sample
			var locs []*pprof.Location
			for g := range order {
				if n := len(p.Stacks[order[g]].Locations); cap(locs) < n {
					locs = make([]*pprof.Location, n)
				}
				sample(&ps, g, locs[:cap(locs)])
				if !yield(&ps) {
					return
				}
			}
		}
		return pp
	}
	pp.Sample = make([]*pprof.Sample, len(order))
	all := make([]pprof.Sample, len(order))
	var slab []*pprof.Location // the samples' locations are carved from it
	for g := range order {
		n := len(p.Stacks[order[g]].Locations)
		if len(slab) < n {
			slab = make([]*pprof.Location, max(n, 64<<10))
		}
		sample(&all[g], g, slab[:n:n])
		slab = slab[n:]
		pp.Sample[g] = &all[g]
	}
	return pp
}

// WritePprof writes the profile gzip-compressed in pprof's format.
func (p *Profile) WritePprof(w io.Writer, periodNS int64) error {
	// (The samples streamed: a profile of many distinct stacks does not
	// hold a copy of them all.)
	pp := p.pprof(periodNS, true)
	if err := pp.CheckValid(); err != nil {
		return fmt.Errorf("internal error: invalid pprof profile: %w", err)
	}
	return pp.Write(w)
}

// WriteFidelity prints the fidelity table: per method, the share of
// samples whose stack reaches the thread's root.
func (p *Profile) WriteFidelity(w io.Writer) {
	fmt.Fprintf(w, "stack fidelity (user stacks reaching the thread root: _start, __libc_start_main, start_thread, clone3, runtime.goexit):\n")
	for _, f := range p.Fidelity {
		if f.Samples == 0 {
			continue
		}
		avg := 0.0
		if f.Samples > 0 {
			avg = float64(f.Frames) / float64(f.Samples)
		}
		fmt.Fprintf(w, "  %-10s %6.2f%% complete  (%d of %d samples, %.1f frames/sample)", f.Method, f.Percent(), f.Complete, f.Samples, avg)
		if len(f.Ends) > 0 {
			var reasons []string
			for r, n := range f.Ends {
				reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
			}
			sort.Strings(reasons)
			fmt.Fprintf(w, "  ends: %s", strings.Join(reasons, ", "))
		}
		if len(f.Reasons) > 0 {
			var reasons []string
			for r, n := range f.Reasons {
				reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
			}
			sort.Strings(reasons)
			fmt.Fprintf(w, "  ends: %s", strings.Join(reasons, ", "))
		}
		fmt.Fprintln(w)
	}
	writeSubsampleNote(w, p.Fidelity)
	for _, r := range p.InterpReads {
		writeInterpReads(w, &r)
	}
	if n := p.KernelOnly - p.InKernelNoUser; n > 0 {
		fmt.Fprintf(w, "  %d samples had no user stack (kernel threads)\n", n)
	}
	if p.InKernelNoUser > 0 {
		fmt.Fprintf(w, "  %d samples of user processes were taken in the kernel, with no user stack recorded\n", p.InKernelNoUser)
	}
	if p.AtCopyEdge > 0 {
		hint := p.CopyEdgeHint
		if hint == "" {
			hint = "a larger --stack-size, up to 65528, reaches further"
		}
		fmt.Fprintf(w, "  %d samples ended at the stack copy's edge (%s)\n", p.AtCopyEdge, hint)
	}
}

// maxLabelSets bounds the threads' labels Pprof keeps to share.
const maxLabelSets = 4096

// sameSample reports whether two stacks are one pprof sample: the same
// thread and locations.
func sameSample(a, b *Stack) bool {
	if a.PID != b.PID || a.TID != b.TID || len(a.Locations) != len(b.Locations) {
		return false
	}
	for i, l := range a.Locations {
		if l.ID != b.Locations[i].ID {
			return false
		}
	}
	return true
}

// isLib reports whether path names a shared library or special mapping.
func isLib(path string) bool {
	return strings.Contains(path, ".so") || !strings.HasPrefix(path, "/")
}

// writeInterpReads prints the fidelity line of a runtime's frames read
// after each sample: how many were read whole, how late, and how many
// changed under the read (torn) or broke off (cut).
func writeInterpReads(w io.Writer, r *runtimes.SampleStats) {
	if r.Samples == 0 {
		return
	}
	fmt.Fprintf(w, "  %-10s frames read after each sample (at the ring buffer's wake-up: %v after it, median; %v at most): %d of %d samples read whole (%.2f%%), %d torn (changed under every read tried), %d cut, %d with no %s frame; %d read late (more than %v after their sample)\n",
		r.Runtime, r.MedianDelay.Round(time.Microsecond), r.MaxDelay.Round(time.Microsecond), r.Whole, r.Samples, 100*float64(r.Whole)/float64(r.Samples),
		r.Torn, r.Cut, r.None, r.Runtime, r.Late, r.LateAfter.Round(time.Microsecond))
}
