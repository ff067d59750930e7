package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strconv"

	"github.com/rewindstack/rewind/profiles"
)

// ScopeName is the instrumentation scope of rewind's OTLP profiles.
const ScopeName = "github.com/rewindstack/rewind/agent"

// OTLP encodes a period's profile as an OTLP ExportProfilesServiceRequest
// (opentelemetry/proto/collector/profiles/v1development, the version of
// the Collector's pdata v1.71.0), the protobuf message both the gRPC and
// the HTTP exporters send: one resource per process with its host name,
// PID, executable, build-id and cgroup, one profile of p.Type in it, and
// one dictionary shared by all. Mappings keep their file offsets and
// build-ids, so a backend can symbolize unsymbolized (--no-symbolize)
// profiles. Resource attributes refer to the dictionary's string table,
// as pdata's marshaler writes them.
//
// It is written by hand, in the byte order pdata's marshaler has, so that
// rewind's commands do not link gRPC, protobuf and pdata, whose package
// initializers cost every rewind process 1.5 ms of start.
func OTLP(p *Period) []byte {
	d := newDict()
	prof := p.Profile

	mapIdx := map[*profiles.Mapping]int32{}
	for _, m := range prof.Mappings {
		om := otlpMapping{start: m.Start, limit: m.End, offset: m.Offset, file: d.str(m.Path)}
		if m.BuildID != "" {
			om.attrs = append(om.attrs, d.attr("process.executable.build_id.gnu", m.BuildID))
		}
		d.mappings = append(d.mappings, om)
		mapIdx[m] = int32(len(d.mappings) - 1)
	}
	kernelMap := int32(0)
	type fnKey struct{ name, file string }
	fnIdx := map[fnKey]int32{}
	fn := func(name, file string) int32 {
		k := fnKey{name, file}
		if i, ok := fnIdx[k]; ok {
			return i
		}
		n := d.str(name)
		d.functions = append(d.functions, otlpFunction{name: n, systemName: n, file: d.str(file)})
		i := int32(len(d.functions) - 1)
		fnIdx[k] = i
		return i
	}
	locIdx := map[*profiles.Location]int32{}
	for _, l := range prof.Locations {
		ol := otlpLocation{addr: l.Addr}
		switch {
		case l.Kernel:
			if kernelMap == 0 {
				start, limit := prof.KernelSpan()
				d.mappings = append(d.mappings, otlpMapping{start: start, limit: limit, file: d.str("[kernel.kallsyms]")})
				kernelMap = int32(len(d.mappings) - 1)
			}
			ol.mapping = kernelMap
		case l.Mapping != nil:
			ol.mapping = mapIdx[l.Mapping]
		}
		if p.Symbolized || l.Kernel {
			for i, ln := range l.Lines {
				name := ln.Function
				if i == len(l.Lines)-1 {
					name = l.Name()
				}
				ol.lines = append(ol.lines, otlpLine{function: fn(name, ln.File), line: int64(ln.Line)})
			}
		}
		d.locations = append(d.locations, ol)
		locIdx[l] = int32(len(d.locations) - 1)
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
		prof *otlpProfile
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
	out := make([]*otlpProfile, 0, len(pids))
	stackIdx := map[string]int32{}
	var kb []byte
	for _, pid := range pids {
		op := &otlpProfile{}
		res := func(key, val string) { op.resource = append(op.resource, otlpKeyValue{key: key, str: val}) }
		res("host.name", p.Host)
		op.resource = append(op.resource, otlpKeyValue{key: "process.pid", isInt: true, i: int64(pid)})
		if info := p.Procs[pid]; info != nil {
			if info.Exe != "" {
				res("process.executable.path", info.Exe)
				res("process.executable.name", baseName(info.Exe))
				if id := exeBuildID(prof, info.Exe); id != "" {
					res("process.executable.build_id.gnu", id)
				}
			} else if info.Comm != "" {
				res("process.executable.name", info.Comm)
			}
			if info.Comm != "" {
				res("process.command", info.Comm)
			}
			if info.Cgroup != "" {
				res("process.cgroup", info.Cgroup)
			}
			if info.ContainerID != "" {
				res("container.id", info.ContainerID)
			}
		}
		op.time = uint64(p.Start.UnixNano())
		op.duration = uint64(p.End.Sub(p.Start))
		op.sampleType = [2]int32{d.str(typ), d.str(unit)}
		if p.Type == TypeCPU {
			op.periodType = [2]int32{d.str("cpu"), d.str("nanoseconds")}
		}
		for i, c := range []byte(strconv.Itoa(pid) + p.Type + strconv.Itoa(p.Seq) + p.Start.String()) {
			op.id[i%16] ^= c + byte(i)
		}
		out = append(out, op)
		procs[pid] = &proc{prof: op, agg: map[sKey]int{}}
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
			st := make([]int32, len(s.Locations))
			for i, l := range s.Locations {
				st[i] = locIdx[l]
			}
			d.stacks = append(d.stacks, st)
			si = int32(len(d.stacks) - 1)
			stackIdx[string(kb)] = si
		}
		k := sKey{s.TID, si}
		if i, ok := pr.agg[k]; ok {
			pr.prof.samples[i].value += s.Value
			continue
		}
		smp := otlpSample{stack: si, value: s.Value, attrs: []int32{d.attrInt("thread.id", int64(s.TID))}}
		if s.Comm != "" {
			smp.attrs = append(smp.attrs, d.attr("thread.name", s.Comm))
		}
		pr.prof.samples = append(pr.prof.samples, smp)
		pr.agg[k] = len(pr.prof.samples) - 1
	}
	// Resource attributes refer to the string table (key_strindex,
	// string_value_strindex), their strings appended after the
	// dictionary's, as pdata's ConvertProfilesToReferences does.
	for _, op := range out {
		for i := range op.resource {
			kv := &op.resource[i]
			kv.keyIdx = d.str(kv.key)
			if !kv.isInt {
				kv.strIdx = d.str(kv.str)
			}
		}
	}
	return encodeRequest(d, out)
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

func exeBuildID(p *profiles.Profile, exe string) string {
	for _, m := range p.Mappings {
		if m.Path == exe && m.BuildID != "" {
			return m.BuildID
		}
	}
	return ""
}

// The OTLP profiles messages, with the fields rewind sets: indices refer
// to the dictionary's tables.

type otlpMapping struct {
	start, limit, offset uint64
	file                 int32
	attrs                []int32
}

type otlpLocation struct {
	mapping int32
	addr    uint64
	lines   []otlpLine
}

type otlpLine struct {
	function int32
	line     int64
}

type otlpFunction struct {
	name, systemName, file int32
}

// otlpAttr is an entry of the attribute table (KeyValueAndUnit): a string
// or integer value.
type otlpAttr struct {
	key   int32
	str   string
	isInt bool
	i     int64
}

// otlpKeyValue is a resource attribute (KeyValue) by key and value, and by
// their string table indices (strIdx for a string value) once interned.
type otlpKeyValue struct {
	key, str       string
	isInt          bool
	i              int64
	keyIdx, strIdx int32
}

// otlpProfile is one process's resource with its profile.
type otlpProfile struct {
	resource               []otlpKeyValue
	time, duration         uint64
	sampleType, periodType [2]int32 // type and unit string indices
	id                     [16]byte
	samples                []otlpSample
}

type otlpSample struct {
	stack int32
	value int64
	attrs []int32
}

// dict is the ProfilesDictionary being filled, deduplicating strings and
// attributes. Index 0 of every table is the empty entry, as OTLP requires.
type dict struct {
	mappings  []otlpMapping
	locations []otlpLocation
	functions []otlpFunction
	strings   []string
	attrs     []otlpAttr
	stacks    [][]int32

	strIdx  map[string]int32
	attrIdx map[string]int32
}

func newDict() *dict {
	return &dict{
		mappings: make([]otlpMapping, 1), locations: make([]otlpLocation, 1), functions: make([]otlpFunction, 1),
		strings: []string{""}, attrs: make([]otlpAttr, 1), stacks: make([][]int32, 1),
		strIdx: map[string]int32{"": 0}, attrIdx: map[string]int32{},
	}
}

func (d *dict) str(s string) int32 {
	if i, ok := d.strIdx[s]; ok {
		return i
	}
	d.strings = append(d.strings, s)
	i := int32(len(d.strings) - 1)
	d.strIdx[s] = i
	return i
}

func (d *dict) attr(key, val string) int32 {
	return d.attribute(key+"\x00s"+val, otlpAttr{key: d.str(key), str: val})
}

func (d *dict) attrInt(key string, val int64) int32 {
	return d.attribute(key+"\x00i"+strconv.FormatInt(val, 10), otlpAttr{key: d.str(key), isInt: true, i: val})
}

// attribute is the index of the attribute memoized as k, appending a when
// it is new.
func (d *dict) attribute(k string, a otlpAttr) int32 {
	if i, ok := d.attrIdx[k]; ok {
		return i
	}
	d.attrs = append(d.attrs, a)
	i := int32(len(d.attrs) - 1)
	d.attrIdx[k] = i
	return i
}

// encodeRequest writes the ExportProfilesServiceRequest. Every message's
// fields go in descending field number, as pdata's marshaler (which
// writes back to front) orders them, and the message fields it always
// writes are written even when empty, so that the bytes are pdata's.
func encodeRequest(d *dict, profs []*otlpProfile) []byte {
	e := &otlpEncoder{buf: make([]byte, 0, 4096)}
	dm := e.begin()               // dictionary = 2
	for _, st := range d.stacks { // stack_table = 7
		m := e.begin()
		e.packed(1, st) // location_indices
		e.end(7, m)
	}
	for i, a := range d.attrs { // attribute_table = 6: KeyValueAndUnit
		m := e.begin()
		v := e.begin() // value = 2: AnyValue, empty in the empty entry
		switch {
		case i == 0:
		case a.isInt:
			e.varint(3, uint64(a.i)) // int_value
		default:
			e.bytes(1, a.str) // string_value
		}
		e.end(2, v)
		e.varintNZ(1, uint64(a.key)) // key_strindex
		e.end(6, m)
	}
	for _, s := range d.strings { // string_table = 5
		e.bytes(5, s)
	}
	// link_table = 4: the empty link only, its span_id (2) and trace_id
	// (1) written empty.
	e.bytes(4, "\x12\x00\x0a\x00")
	for _, f := range d.functions { // function_table = 3
		m := e.begin()
		e.varintNZ(3, uint64(f.file))
		e.varintNZ(2, uint64(f.systemName))
		e.varintNZ(1, uint64(f.name))
		e.end(3, m)
	}
	for _, l := range d.locations { // location_table = 2
		m := e.begin()
		for _, ln := range l.lines { // lines = 3
			lm := e.begin()
			e.varintNZ(2, uint64(ln.line))
			e.varintNZ(1, uint64(ln.function))
			e.end(3, lm)
		}
		e.varintNZ(2, l.addr)
		e.varintNZ(1, uint64(l.mapping))
		e.end(2, m)
	}
	for _, mp := range d.mappings { // mapping_table = 1
		m := e.begin()
		e.packed(5, mp.attrs) // attribute_indices
		e.varintNZ(4, uint64(mp.file))
		e.varintNZ(3, mp.offset)
		e.varintNZ(2, mp.limit)
		e.varintNZ(1, mp.start)
		e.end(1, m)
	}
	e.end(2, dm)
	for _, op := range profs { // resource_profiles = 1
		rp := e.begin()
		sp := e.begin() // scope_profiles = 2
		pm := e.begin() // profiles = 2
		e.profile(op)
		e.end(2, pm)
		sc := e.begin() // scope = 1
		e.bytes(1, ScopeName)
		e.end(1, sc)
		e.end(2, sp)
		res := e.begin()                 // resource = 1
		for _, kv := range op.resource { // attributes = 1
			m := e.begin()
			e.varintNZ(3, uint64(kv.keyIdx)) // key_strindex
			v := e.begin()                   // value = 2
			if kv.isInt {
				e.varint(3, uint64(kv.i)) // int_value
			} else {
				e.varint(8, uint64(kv.strIdx)) // string_value_strindex
			}
			e.end(2, v)
			e.end(1, m)
		}
		e.end(1, res)
		e.end(1, rp)
	}
	return e.buf
}

// profile writes a Profile's fields.
func (e *otlpEncoder) profile(op *otlpProfile) {
	m := e.begin() // profile_id = 7: empty when all zero, as pdata writes it
	if op.id != ([16]byte{}) {
		e.buf = append(e.buf, op.id[:]...)
	}
	e.end(7, m)
	m = e.begin() // period_type = 5
	e.valueType(op.periodType)
	e.end(5, m)
	e.varintNZ(4, op.duration) // duration_nano
	if op.time != 0 {          // time_unix_nano = 3, fixed64
		e.key(3, 1)
		e.buf = binary.LittleEndian.AppendUint64(e.buf, op.time)
	}
	for _, s := range op.samples { // samples = 2
		m := e.begin()
		e.key(4, 2) // values, packed: one value
		e.buf = binary.AppendUvarint(e.buf, uint64(varintLen(uint64(s.value))))
		e.buf = binary.AppendUvarint(e.buf, uint64(s.value))
		e.packed(2, s.attrs) // attribute_indices
		e.varintNZ(1, uint64(s.stack))
		e.end(2, m)
	}
	m = e.begin() // sample_type = 1
	e.valueType(op.sampleType)
	e.end(1, m)
}

func (e *otlpEncoder) valueType(vt [2]int32) {
	e.varintNZ(2, uint64(vt[1])) // unit_strindex
	e.varintNZ(1, uint64(vt[0])) // type_strindex
}

// otlpEncoder writes protobuf's wire format front to back: a message
// field's content is written first, then end puts its key and length in
// front of it.
type otlpEncoder struct {
	buf []byte
}

// begin starts a message field.
func (e *otlpEncoder) begin() int { return len(e.buf) }

// end makes what was written since start the message field.
func (e *otlpEncoder) end(field int, start int) {
	n := len(e.buf) - start
	var hdr [20]byte
	h := binary.AppendUvarint(binary.AppendUvarint(hdr[:0], uint64(field)<<3|2), uint64(n))
	e.buf = append(e.buf, h...)
	copy(e.buf[start+len(h):], e.buf[start:start+n])
	copy(e.buf[start:], h)
}

// key writes a field's key: its number and wire type (0 varint, 1 fixed64,
// 2 length-delimited).
func (e *otlpEncoder) key(field, wire int) {
	e.buf = binary.AppendUvarint(e.buf, uint64(field)<<3|uint64(wire))
}

// varint writes a varint field, even zero (as pdata writes oneof values).
func (e *otlpEncoder) varint(field int, v uint64) {
	e.key(field, 0)
	e.buf = binary.AppendUvarint(e.buf, v)
}

// varintNZ writes a varint field unless it is zero, as proto3 does.
func (e *otlpEncoder) varintNZ(field int, v uint64) {
	if v != 0 {
		e.varint(field, v)
	}
}

// bytes writes a string or bytes field, even empty.
func (e *otlpEncoder) bytes(field int, s string) {
	e.key(field, 2)
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// packed writes a packed repeated int32 field unless it is empty.
func (e *otlpEncoder) packed(field int, vs []int32) {
	if len(vs) == 0 {
		return
	}
	n := 0
	for _, v := range vs {
		n += varintLen(uint64(v))
	}
	e.key(field, 2)
	e.buf = binary.AppendUvarint(e.buf, uint64(n))
	for _, v := range vs {
		e.buf = binary.AppendUvarint(e.buf, uint64(v))
	}
}

// varintLen is how many bytes binary.AppendUvarint writes for v.
func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// decodeExportResponse reads an ExportProfilesServiceResponse: its
// partial_success (1) message's rejected_profiles (1, int64) and
// error_message (2, string). Other fields are skipped; a message that is
// not valid protobuf is an error.
func decodeExportResponse(b []byte) (rejected int64, msg string, err error) {
	err = protoFields(b, func(field, wire int, v uint64, data []byte) error {
		if field != 1 || wire != 2 {
			return nil
		}
		return protoFields(data, func(field, wire int, v uint64, data []byte) error {
			switch {
			case field == 1 && wire == 0:
				rejected = int64(v)
			case field == 2 && wire == 2:
				msg = string(data)
			}
			return nil
		})
	})
	return rejected, msg, err
}

// protoFields calls f with every field of the protobuf message b: its
// number and wire type, its value (varint, fixed32 or fixed64) or its
// bytes (length-delimited).
func protoFields(b []byte, f func(field, wire int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		field, wire := key>>3, int(key&7)
		if field == 0 || field > 1<<29-1 {
			return fmt.Errorf("bad field number %d", field)
		}
		var v uint64
		var data []byte
		switch wire {
		case 0:
			if v, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("field %d: bad varint", field)
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return fmt.Errorf("field %d: truncated", field)
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case 5:
			if len(b) < 4 {
				return fmt.Errorf("field %d: truncated", field)
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("field %d: bad length", field)
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("field %d: unsupported wire type %d", field, wire)
		}
		if err := f(int(field), wire, v, data); err != nil {
			return err
		}
	}
	return nil
}
