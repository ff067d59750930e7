package agent

import (
	"sort"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rewindstack/rewind/profiles"
)

// otlpPdata is the OTLP builder rewind had before its own encoder: the
// same profiles built with the Collector's pdata. The tests compare what
// OTLP encodes with what pdata marshals from this.
func otlpPdata(p *Period) pprofile.Profiles {
	out := pprofile.NewProfiles()
	d := newPdict(out.Dictionary())
	prof := p.Profile

	mapIdx := map[*profiles.Mapping]int32{}
	for _, m := range prof.Mappings {
		pm := d.dict.MappingTable().AppendEmpty()
		pm.SetMemoryStart(m.Start)
		pm.SetMemoryLimit(m.End)
		pm.SetFileOffset(m.Offset)
		pm.SetFilenameStrindex(d.str(m.Path))
		if m.BuildID != "" {
			pm.AttributeIndices().Append(d.attr("process.executable.build_id.gnu", m.BuildID))
		}
		mapIdx[m] = int32(d.dict.MappingTable().Len() - 1)
	}
	kernelMap := int32(0)
	type fnKey struct{ name, file string }
	fnIdx := map[fnKey]int32{}
	fn := func(name, file string) int32 {
		k := fnKey{name, file}
		if i, ok := fnIdx[k]; ok {
			return i
		}
		f := d.dict.FunctionTable().AppendEmpty()
		f.SetNameStrindex(d.str(name))
		f.SetSystemNameStrindex(d.str(name))
		f.SetFilenameStrindex(d.str(file))
		i := int32(d.dict.FunctionTable().Len() - 1)
		fnIdx[k] = i
		return i
	}
	locIdx := map[*profiles.Location]int32{}
	for _, l := range prof.Locations {
		pl := d.dict.LocationTable().AppendEmpty()
		pl.SetAddress(l.Addr)
		switch {
		case l.Kernel:
			if kernelMap == 0 {
				km := d.dict.MappingTable().AppendEmpty()
				start, limit := prof.KernelSpan()
				km.SetMemoryStart(start)
				km.SetMemoryLimit(limit)
				km.SetFilenameStrindex(d.str("[kernel.kallsyms]"))
				kernelMap = int32(d.dict.MappingTable().Len() - 1)
			}
			pl.SetMappingIndex(kernelMap)
		case l.Mapping != nil:
			pl.SetMappingIndex(mapIdx[l.Mapping])
		}
		if p.Symbolized || l.Kernel {
			for i, ln := range l.Lines {
				name := ln.Function
				if i == len(l.Lines)-1 {
					name = l.Name()
				}
				line := pl.Lines().AppendEmpty()
				line.SetFunctionIndex(fn(name, ln.File))
				line.SetLine(int64(ln.Line))
			}
		}
		locIdx[l] = int32(d.dict.LocationTable().Len() - 1)
	}

	typ, unit := "cpu", "nanoseconds"
	if p.Type == TypeOffCPU {
		typ = "off_cpu"
	}
	// Samples by process, then by thread and stack.
	type sKey struct {
		tid   int
		stack int32
	}
	type proc struct {
		prof pprofile.Profile
		agg  map[sKey]int
	}
	procs := map[int]*proc{}
	var pids []int
	for _, s := range prof.Stacks {
		if _, ok := procs[s.PID]; !ok {
			pids = append(pids, s.PID)
			procs[s.PID] = nil
		}
	}
	sort.Ints(pids)
	stackIdx := map[string]int32{}
	var kb []byte
	for _, pid := range pids {
		rp := out.ResourceProfiles().AppendEmpty()
		res := rp.Resource().Attributes()
		res.PutStr("host.name", p.Host)
		res.PutInt("process.pid", int64(pid))
		if info := p.Procs[pid]; info != nil {
			if info.Exe != "" {
				res.PutStr("process.executable.path", info.Exe)
				res.PutStr("process.executable.name", baseName(info.Exe))
				if id := exeBuildID(prof, info.Exe); id != "" {
					res.PutStr("process.executable.build_id.gnu", id)
				}
			} else if info.Comm != "" {
				res.PutStr("process.executable.name", info.Comm)
			}
			if info.Comm != "" {
				res.PutStr("process.command", info.Comm)
			}
			if info.Cgroup != "" {
				res.PutStr("process.cgroup", info.Cgroup)
			}
			if info.ContainerID != "" {
				res.PutStr("container.id", info.ContainerID)
			}
		}
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(ScopeName)
		pp := sp.Profiles().AppendEmpty()
		pp.SetTime(pcommon.NewTimestampFromTime(p.Start))
		pp.SetDurationNano(uint64(p.End.Sub(p.Start)))
		pp.SampleType().SetTypeStrindex(d.str(typ))
		pp.SampleType().SetUnitStrindex(d.str(unit))
		if p.Type == TypeCPU {
			pp.PeriodType().SetTypeStrindex(d.str("cpu"))
			pp.PeriodType().SetUnitStrindex(d.str("nanoseconds"))
		}
		var id pprofile.ProfileID
		for i, c := range []byte(strconv.Itoa(pid) + p.Type + strconv.Itoa(p.Seq) + p.Start.String()) {
			id[i%16] ^= c + byte(i)
		}
		pp.SetProfileID(id)
		procs[pid] = &proc{prof: pp, agg: map[sKey]int{}}
	}
	for _, s := range prof.Stacks {
		pr := procs[s.PID]
		kb = kb[:0]
		for _, l := range s.Locations {
			kb = strconv.AppendInt(kb, int64(locIdx[l]), 36)
			kb = append(kb, ',')
		}
		si, ok := stackIdx[string(kb)]
		if !ok {
			st := d.dict.StackTable().AppendEmpty()
			for _, l := range s.Locations {
				st.LocationIndices().Append(locIdx[l])
			}
			si = int32(d.dict.StackTable().Len() - 1)
			stackIdx[string(kb)] = si
		}
		k := sKey{s.TID, si}
		if i, ok := pr.agg[k]; ok {
			v := pr.prof.Samples().At(i).Values()
			v.SetAt(0, v.At(0)+s.Value)
			continue
		}
		smp := pr.prof.Samples().AppendEmpty()
		smp.SetStackIndex(si)
		smp.Values().Append(s.Value)
		smp.AttributeIndices().Append(d.attrInt("thread.id", int64(s.TID)))
		if s.Comm != "" {
			smp.AttributeIndices().Append(d.attr("thread.name", s.Comm))
		}
		pr.agg[k] = pr.prof.Samples().Len() - 1
	}
	return out
}

// pdict fills a ProfilesDictionary, deduplicating strings and attributes.
// Index 0 of every table is the empty entry, as OTLP requires.
type pdict struct {
	dict  pprofile.ProfilesDictionary
	strs  map[string]int32
	attrs map[string]int32
}

func newPdict(d pprofile.ProfilesDictionary) *pdict {
	x := &pdict{dict: d, strs: map[string]int32{}, attrs: map[string]int32{}}
	d.StringTable().Append("")
	x.strs[""] = 0
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	return x
}

func (d *pdict) str(s string) int32 {
	if i, ok := d.strs[s]; ok {
		return i
	}
	d.dict.StringTable().Append(s)
	i := int32(d.dict.StringTable().Len() - 1)
	d.strs[s] = i
	return i
}

func (d *pdict) attr(key, val string) int32 {
	return d.attribute(key+"\x00s"+val, key, func(v pcommon.Value) { v.SetStr(val) })
}

func (d *pdict) attrInt(key string, val int64) int32 {
	return d.attribute(key+"\x00i"+strconv.FormatInt(val, 10), key, func(v pcommon.Value) { v.SetInt(val) })
}

// attribute is the index of the attribute memoized as k, appended to the
// table with key and the value set by set when it is new.
func (d *pdict) attribute(k, key string, set func(pcommon.Value)) int32 {
	if i, ok := d.attrs[k]; ok {
		return i
	}
	a := d.dict.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(d.str(key))
	set(a.Value())
	i := int32(d.dict.AttributeTable().Len() - 1)
	d.attrs[k] = i
	return i
}
