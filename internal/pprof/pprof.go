// Package pprof holds a profile in pprof's data model and writes it in
// pprof's format: profile.proto (github.com/google/pprof/proto), protobuf
// encoded and gzip-compressed.
//
// It is the writer profiles and the agent use. It exists so that rewind's
// commands do not link github.com/google/pprof/profile, whose package
// initializers compile its legacy-format regular expressions at the start
// of every process (2.3 ms of each `rewind dump`). The tests read what it
// writes back with that package.
package pprof

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"reflect"
	"sort"
	"unsafe"

	"github.com/klauspost/compress/gzip"
)

// Profile is one profile. Its fields carry the meaning of profile.proto's.
type Profile struct {
	SampleType    []*ValueType
	Sample        []*Sample
	Mapping       []*Mapping
	Location      []*Location
	Function      []*Function
	TimeNanos     int64
	DurationNanos int64
	PeriodType    *ValueType
	Period        int64
	// Samples, when set, yields more samples, after those of Sample, one
	// at a time: the sample it passes is valid only during the call (it
	// may be reused for the next). Write and CheckValid go through them
	// (each once); a profile of many distinct stacks is then written
	// without holding them all as Samples.
	Samples func(yield func(*Sample) bool)
}

// eachSample calls fn for every sample: Sample's, then those Samples
// yields, with its index, until fn returns false.
func (p *Profile) eachSample(fn func(int, *Sample) bool) {
	for i, s := range p.Sample {
		if !fn(i, s) {
			return
		}
	}
	if p.Samples != nil {
		i := len(p.Sample)
		p.Samples(func(s *Sample) bool {
			ok := fn(i, s)
			i++
			return ok
		})
	}
}

// ValueType describes the values of samples, or the period.
type ValueType struct {
	Type, Unit string
}

// Sample is a stack, innermost location first, with its values (one per
// SampleType) and labels.
type Sample struct {
	Location []*Location
	Value    []int64
	Label    map[string][]string
	NumLabel map[string][]int64
}

// Mapping is a mapped object.
type Mapping struct {
	ID              uint64
	Start, Limit    uint64
	Offset          uint64
	File, BuildID   string
	HasFunctions    bool
	HasFilenames    bool
	HasLineNumbers  bool
	HasInlineFrames bool
}

// Location is one program counter with the calls inlined at it (Line,
// innermost first).
type Location struct {
	ID      uint64
	Mapping *Mapping
	Address uint64
	Line    []Line
}

// Line is a function and line of a Location.
type Line struct {
	Function *Function
	Line     int64
}

// Function is a function's names and source file.
type Function struct {
	ID               uint64
	Name, SystemName string
	Filename         string
}

// CheckValid reports what would make the encoded profile unreadable:
// IDs of zero or used twice, sample values not one per sample type, and
// references to mappings, locations or functions that are not in p.
func (p *Profile) CheckValid() error {
	n := len(p.SampleType)
	maps := map[*Mapping]bool{}
	ids := map[uint64]bool{}
	for _, m := range p.Mapping {
		if m == nil || m.ID == 0 || ids[m.ID] {
			return fmt.Errorf("pprof: mapping with ID 0, nil or repeated")
		}
		ids[m.ID] = true
		maps[m] = true
	}
	funcs := map[*Function]bool{}
	clear(ids)
	for _, f := range p.Function {
		if f == nil || f.ID == 0 || ids[f.ID] {
			return fmt.Errorf("pprof: function with ID 0, nil or repeated")
		}
		ids[f.ID] = true
		funcs[f] = true
	}
	// The locations by ID, in a slice when the IDs are dense (they are
	// numbered from 1): maps of a 2 GB recording's 120,335 locations took
	// 17 MB and their look-ups for its 3.1 million frames 0.2 s.
	maxID := uint64(0)
	for _, l := range p.Location {
		if l != nil {
			maxID = max(maxID, l.ID)
		}
	}
	var byID []*Location
	var byIDMap map[uint64]*Location
	if maxID <= 2*uint64(len(p.Location))+16 {
		byID = make([]*Location, maxID+1)
	} else {
		byIDMap = make(map[uint64]*Location, len(p.Location))
	}
	lookup := func(id uint64) *Location {
		if byID != nil {
			if id < uint64(len(byID)) {
				return byID[id]
			}
			return nil
		}
		return byIDMap[id]
	}
	for _, l := range p.Location {
		if l == nil || l.ID == 0 || lookup(l.ID) != nil {
			return fmt.Errorf("pprof: location with ID 0, nil or repeated")
		}
		if l.Mapping != nil && !maps[l.Mapping] {
			return fmt.Errorf("pprof: location %d: mapping %d is not in the profile", l.ID, l.Mapping.ID)
		}
		for _, ln := range l.Line {
			if ln.Function == nil || !funcs[ln.Function] {
				return fmt.Errorf("pprof: location %d: a line's function is not in the profile", l.ID)
			}
		}
		if byID != nil {
			byID[l.ID] = l
		} else {
			byIDMap[l.ID] = l
		}
	}
	var err error
	p.eachSample(func(i int, s *Sample) bool {
		if s == nil || len(s.Value) != n {
			err = fmt.Errorf("pprof: sample %d has %d values, want %d", i, len(s.Value), n)
			return false
		}
		for _, l := range s.Location {
			if l == nil || lookup(l.ID) != l {
				err = fmt.Errorf("pprof: sample %d: a location is not in the profile", i)
				return false
			}
		}
		return true
	})
	return err
}

// Write writes p gzip-compressed in pprof's format.
//
// The message is compressed as it is encoded, a few fields at a time:
// encoded whole first, the profile of a 2 GB system-wide recording took
// another 60 MB while it was written. It is compressed at the fastest
// level (klauspost/compress's, which is faster than the standard
// library's): the 237 KB profile of a 336 MB system-wide recording took
// 9-15 ms at compress/gzip's default level, 2-4 ms at its fastest and
// 0.8-0.9 ms at this one, for a file of 52 KB instead of 36 KB.
func (p *Profile) Write(w io.Writer) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	if _, err := p.encode(zw); err != nil {
		return err
	}
	return zw.Close()
}

// maxEncodedLabels bounds the label sets encode keeps the encoding of.
const maxEncodedLabels = 4096

// Encode returns p as an uncompressed profile.proto message.
func (p *Profile) Encode() []byte {
	b, _ := p.encode(nil)
	return b
}

// flushAt is how many encoded bytes encode holds before it writes them.
const flushAt = 64 << 10

// encode encodes p: to w as it goes when w is not nil, else into the
// result.
func (p *Profile) encode(w io.Writer) ([]byte, error) {
	e := &encoder{strings: map[string]int64{"": 0}, table: []string{""}}
	var b []byte
	var err error
	// flush writes what was encoded so far, once there is enough of it.
	flush := func() {
		if w != nil && err == nil && len(b) >= flushAt {
			_, err = w.Write(b)
			b = b[:0]
		}
	}
	for _, vt := range p.SampleType {
		b = bytesField(b, 1, e.valueType(vt))
	}
	var keys []string
	// Samples often share their label maps (those of one thread): their
	// labels are encoded once, by the maps' identity.
	type labelMaps struct{ str, num unsafe.Pointer }
	encoded := map[labelMaps][]byte{}
	var m, lb []byte
	var ids []uint64
	p.eachSample(func(_ int, s *Sample) bool {
		m = m[:0]
		ids = ids[:0]
		for _, l := range s.Location {
			ids = append(ids, l.ID)
		}
		m = packedUint(m, 1, ids)
		m = packedInt(m, 2, s.Value)
		lm := labelMaps{reflect.ValueOf(s.Label).UnsafePointer(), reflect.ValueOf(s.NumLabel).UnsafePointer()}
		enc, ok := encoded[lm]
		if !ok {
			keys = sortedKeys(keys, s.Label)
			for _, k := range keys {
				for _, v := range s.Label[k] {
					lb = varintField(lb[:0], 1, uint64(e.str(k)))
					lb = varintField(lb, 2, uint64(e.str(v)))
					enc = bytesField(enc, 3, lb)
				}
			}
			keys = sortedKeys(keys, s.NumLabel)
			for _, k := range keys {
				for _, v := range s.NumLabel[k] {
					lb = varintField(lb[:0], 1, uint64(e.str(k)))
					lb = varintField(lb, 3, uint64(v))
					enc = bytesField(enc, 3, lb)
				}
			}
			if lm.str != nil || lm.num != nil {
				if len(encoded) >= maxEncodedLabels {
					// (Many threads, each its labels: bounded. The
					// maps a key points to stay alive while it is
					// kept, so no other map is at its address.)
					clear(encoded)
				}
				encoded[lm] = enc
			}
		}
		m = append(m, enc...)
		b = bytesField(b, 2, m)
		flush()
		return err == nil
	})
	for _, mp := range p.Mapping {
		var m []byte
		m = varintField(m, 1, mp.ID)
		m = varintField(m, 2, mp.Start)
		m = varintField(m, 3, mp.Limit)
		m = varintField(m, 4, mp.Offset)
		m = varintField(m, 5, uint64(e.str(mp.File)))
		m = varintField(m, 6, uint64(e.str(mp.BuildID)))
		m = boolField(m, 7, mp.HasFunctions)
		m = boolField(m, 8, mp.HasFilenames)
		m = boolField(m, 9, mp.HasLineNumbers)
		m = boolField(m, 10, mp.HasInlineFrames)
		b = bytesField(b, 3, m)
		flush()
	}
	for _, l := range p.Location {
		var m []byte
		m = varintField(m, 1, l.ID)
		if l.Mapping != nil {
			m = varintField(m, 2, l.Mapping.ID)
		}
		m = varintField(m, 3, l.Address)
		for _, ln := range l.Line {
			var lb []byte
			lb = varintField(lb, 1, ln.Function.ID)
			lb = varintField(lb, 2, uint64(ln.Line))
			m = bytesField(m, 4, lb)
		}
		b = bytesField(b, 4, m)
		flush()
	}
	for _, f := range p.Function {
		var m []byte
		m = varintField(m, 1, f.ID)
		m = varintField(m, 2, uint64(e.str(f.Name)))
		m = varintField(m, 3, uint64(e.str(f.SystemName)))
		m = varintField(m, 4, uint64(e.str(f.Filename)))
		b = bytesField(b, 5, m)
		flush()
	}
	// The period type's strings join the table before it is written.
	var period []byte
	if p.PeriodType != nil {
		period = e.valueType(p.PeriodType)
	}
	for _, s := range e.table {
		b = bytesField(b, 6, []byte(s))
		flush()
	}
	b = varintField(b, 9, uint64(p.TimeNanos))
	b = varintField(b, 10, uint64(p.DurationNanos))
	if p.PeriodType != nil {
		b = bytesField(b, 11, period)
	}
	b = varintField(b, 12, uint64(p.Period))
	if w != nil && err == nil {
		_, err = w.Write(b)
		b = nil
	}
	return b, err
}

// encoder interns strings into the string table.
type encoder struct {
	strings map[string]int64
	table   []string
}

func (e *encoder) str(s string) int64 {
	if i, ok := e.strings[s]; ok {
		return i
	}
	i := int64(len(e.table))
	e.strings[s] = i
	e.table = append(e.table, s)
	return i
}

func (e *encoder) valueType(vt *ValueType) []byte {
	var m []byte
	m = varintField(m, 1, uint64(e.str(vt.Type)))
	return varintField(m, 2, uint64(e.str(vt.Unit)))
}

func sortedKeys[V any](dst []string, m map[string]V) []string {
	dst = dst[:0]
	for k := range m {
		dst = append(dst, k)
	}
	sort.Strings(dst)
	return dst
}

// Protobuf wire encoding: a field's key is its number and wire type
// (0 varint, 2 length-delimited); zero scalars are left out, as proto3
// does.

func varintField(b []byte, field int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(binary.AppendUvarint(b, uint64(field)<<3), v)
}

func boolField(b []byte, field int, v bool) []byte {
	if !v {
		return b
	}
	return varintField(b, field, 1)
}

func bytesField(b []byte, field int, m []byte) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(m)))
	return append(b, m...)
}

func packedUint(b []byte, field int, vs []uint64) []byte {
	if len(vs) == 0 {
		return b
	}
	n := 0
	for _, v := range vs {
		n += uvarintLen(v)
	}
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, uint64(n))
	for _, v := range vs {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// uvarintLen is the size of v's varint encoding.
func uvarintLen(v uint64) int {
	return (bits.Len64(v|1) + 6) / 7
}

func packedInt(b []byte, field int, vs []int64) []byte {
	if len(vs) == 0 {
		return b
	}
	n := 0
	for _, v := range vs {
		n += uvarintLen(uint64(v))
	}
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, uint64(n))
	for _, v := range vs {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}
