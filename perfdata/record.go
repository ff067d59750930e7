package perfdata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rewindstack/rewind/internal/fileerr"
)

// Record types of the kernel (perf_event_type) and of perf.data files
// (perf's user types, 64 and up).
const (
	RecordMmap          = 1
	RecordLost          = 2
	RecordComm          = 3
	RecordExit          = 4
	RecordThrottle      = 5
	RecordUnthrottle    = 6
	RecordFork          = 7
	RecordRead          = 8
	RecordSample        = 9
	RecordMmap2         = 10
	RecordLostSamples   = 13
	RecordFinishedRound = 68
	RecordCompressed    = 81
	RecordFinishedInit  = 82
	RecordCompressed2   = 83
)

// Misc bits of the record header.
const (
	MiscCPUModeMask  = 7
	MiscKernel       = 1
	MiscUser         = 2
	MiscCommExec     = 1 << 13
	MiscMmapBuildID  = 1 << 14
	MiscBuildIDSize  = 1 << 15
	recordHeaderSize = 8
)

// Callchain context markers (PERF_CONTEXT_*): a callchain entry at or above
// ContextMax is not an address but says whose frames follow.
const (
	ContextHV          = ^uint64(32 - 1)   // -32
	ContextKernel      = ^uint64(128 - 1)  // -128
	ContextUser        = ^uint64(512 - 1)  // -512
	ContextGuest       = ^uint64(2048 - 1) // -2048
	ContextGuestKernel = ^uint64(2176 - 1) // -2176
	ContextGuestUser   = ^uint64(2560 - 1) // -2560
	ContextMax         = ^uint64(4095 - 1) // -4095
)

// Register ABI of a REGS_USER block.
const (
	RegsABINone = 0
	RegsABI32   = 1
	RegsABI64   = 2
)

// FormatError is a decoding error: the file ("" for ring-buffer data), the
// byte offset of the bad data in the file or stream, and what is wrong. It
// is the FormatError of every rewind parser (cfi, sframe, elfobj, corefile
// report theirs with the same type).
type FormatError = fileerr.FormatError

// SampleIDFields are the identification fields of a sample, also appended
// to other records when the attribute has sample_id_all.
type SampleIDFields struct {
	PID, TID uint32
	Time     uint64
	ID       uint64
	StreamID uint64
	CPU      uint32
}

// Sample is a decoded PERF_RECORD_SAMPLE. Slices point into the record's
// bytes (Callchain and Regs are copied into storage reused by the next
// Decode): copy what must outlive the record.
type Sample struct {
	SampleIDFields
	// Attr is the attribute of the event that produced the sample.
	Attr   *Attr
	Misc   uint16
	IP     uint64
	Addr   uint64
	Period uint64
	// Callchain is the kernel's callchain, including PERF_CONTEXT_* markers.
	Callchain []uint64
	// RegsABI is RegsABINone when the sample has no user registers (it
	// hit a kernel thread).
	RegsABI uint64
	// Regs holds the user registers selected by Attr.SampleRegsUser, in
	// bit order.
	Regs []uint64
	// RegsRaw is the same registers as the record holds them: 8 bytes
	// each, little-endian, in the record's memory (a perf.data file's
	// mapping stays valid until Close; Regs is decoder storage).
	RegsRaw []byte
	// Stack is the copy of user stack memory starting at the user stack
	// pointer, cut to the size the kernel filled (dyn_size).
	Stack []byte
	// RawData is the PERF_SAMPLE_RAW payload (a tracepoint's fields).
	RawData []byte
}

// Mmap is a decoded PERF_RECORD_MMAP or PERF_RECORD_MMAP2.
type Mmap struct {
	PID, TID   uint32
	Addr, Len  uint64
	PgOff      uint64
	Maj, Min   uint32
	Ino        uint64
	InoGen     uint64
	BuildID    []byte // MMAP2 with MiscMmapBuildID only
	Prot       uint32
	Flags      uint32
	Filename   string
	Executable bool // PROT_EXEC for MMAP2; not a data mmap for MMAP
}

// Comm is a decoded PERF_RECORD_COMM.
type Comm struct {
	PID, TID uint32
	Comm     string
	Exec     bool // the comm changed because of exec
}

// Task is a decoded PERF_RECORD_FORK or PERF_RECORD_EXIT.
type Task struct {
	PID, PPID uint32
	TID, PTID uint32
	Time      uint64
}

// Record is one decoded record. Exactly one of the typed pointers is set
// for the record types rewind decodes; others only fill Type and Raw.
type Record struct {
	Type uint32
	Misc uint16
	// Raw is the whole record, header included.
	Raw []byte
	// ID holds the sample_id trailer of non-sample records (or the
	// sample's own identification fields), as far as the attribute has
	// them.
	ID SampleIDFields
	// Attr is the attribute the record belongs to (nil if unknown).
	Attr   *Attr
	Sample *Sample
	Mmap   *Mmap
	Comm   *Comm
	Task   *Task
	// Lost is the count of PERF_RECORD_LOST / PERF_RECORD_LOST_SAMPLES.
	Lost uint64
	// Decompressed is set for a record File.Records decompressed (perf
	// record -z): its bytes, and the slices into them, are reused for
	// the next records after the call, unlike a file's mapping, which
	// lives until Close. Copy what must outlive the call.
	Decompressed bool
}

// Decoder decodes records of a set of events. It keeps storage between
// calls: a Record and the values it points to are valid until the next
// Decode.
type Decoder struct {
	attrs []*Attr
	ids   map[uint64]*Attr
	// idPos/idFromEnd locate the event ID in samples and trailers when
	// there are several attributes.
	idPos     int
	idFromEnd int

	sample Sample
	mmap   Mmap
	comm   Comm
	task   Task
	chain  []uint64
	regs   []uint64
}

// NewDecoder returns a decoder for records of events with these attributes;
// ids maps event IDs to the index of their attribute in attrs. With one
// attribute ids may be nil. With several, every attribute must have
// SampleIdentifier, or all must share one sample_type with SampleID, so that
// records can be told apart.
func NewDecoder(attrs []*Attr, ids map[uint64]int) (*Decoder, error) {
	if len(attrs) == 0 {
		return nil, fmt.Errorf("no event attributes")
	}
	d := &Decoder{attrs: attrs, ids: map[uint64]*Attr{}}
	for id, i := range ids {
		if i < 0 || i >= len(attrs) {
			return nil, fmt.Errorf("event id %d names attribute %d of %d", id, i, len(attrs))
		}
		d.ids[id] = attrs[i]
	}
	for _, a := range attrs {
		if a.SampleType&^sampleKnown != 0 {
			return nil, fmt.Errorf("unknown sample_type bits %#x", a.SampleType&^sampleKnown)
		}
	}
	if len(attrs) > 1 {
		allIdent := true
		for _, a := range attrs {
			if a.SampleType&SampleIdentifier == 0 {
				allIdent = false
			}
		}
		if !allIdent {
			st := attrs[0].SampleType
			for _, a := range attrs[1:] {
				if a.SampleType != st || a.Flags&FlagSampleIDAll != attrs[0].Flags&FlagSampleIDAll {
					return nil, fmt.Errorf("%d events with different sample types and no sample identifier", len(attrs))
				}
			}
			if st&SampleID == 0 {
				return nil, fmt.Errorf("%d events without sample IDs: records cannot be attributed", len(attrs))
			}
			d.idPos = 8 * popcount(st&(SampleIP|SampleTID|SampleTime|SampleAddr))
			// In the trailer, ID follows TID and TIME; the trailer
			// ends after ID, STREAM_ID, CPU (IDENTIFIER is not set).
			d.idFromEnd = 8 * popcount(st&(SampleID|SampleStreamID|SampleCPU))
		}
	}
	return d, nil
}

func popcount(x uint64) int { return regCount(x) }

// Attrs returns the decoder's attributes.
func (d *Decoder) Attrs() []*Attr { return d.attrs }

// reader walks a record body, remembering the first error.
type reader struct {
	b   []byte
	off int
	err error
	at  int64 // offset of b[0] in the stream
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = &FormatError{Pkg: "perfdata", Offset: uint64(r.at + int64(r.off)), Msg: msg}
	}
}

func (r *reader) u64(what string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 8 {
		r.fail("record too short for " + what)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) u32(what string) uint32 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 4 {
		r.fail("record too short for " + what)
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail(fmt.Sprintf("%s of %d bytes overruns the record", what, n))
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

// cstring reads a NUL-terminated string padded to 8 bytes, which ends at
// end (the start of the sample_id trailer).
func (r *reader) cstring(end int, what string) string {
	if r.err != nil {
		return ""
	}
	if end < r.off || end > len(r.b) {
		r.fail("record too short for " + what)
		return ""
	}
	s := r.b[r.off:end]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	r.off = end
	return string(s)
}

// Decode decodes one record; b is the whole record (header included) and
// offset its position in the stream or file, for error messages.
func (d *Decoder) Decode(b []byte, offset int64, rec *Record) error {
	*rec = Record{Raw: b}
	if len(b) < recordHeaderSize {
		return &FormatError{Pkg: "perfdata", Offset: uint64(offset), Msg: fmt.Sprintf("record of %d bytes is shorter than its header", len(b))}
	}
	le := binary.LittleEndian
	rec.Type = le.Uint32(b)
	rec.Misc = le.Uint16(b[4:])
	if size := int(le.Uint16(b[6:])); size != len(b) {
		return &FormatError{Pkg: "perfdata", Offset: uint64(offset), Msg: fmt.Sprintf("record size %d, have %d bytes", size, len(b))}
	}
	r := reader{b: b, off: recordHeaderSize, at: offset}
	switch rec.Type {
	case RecordSample:
		a, err := d.attrOfSample(b, offset)
		if err != nil {
			return err
		}
		rec.Attr = a
		d.decodeSample(&r, a, rec)
	case RecordMmap, RecordMmap2, RecordComm, RecordFork, RecordExit, RecordLost, RecordLostSamples:
		a, err := d.attrOfTrailer(b, offset)
		if err != nil {
			return err
		}
		rec.Attr = a
		end := len(b) - a.idTrailerSize()
		if end < recordHeaderSize {
			return &FormatError{Pkg: "perfdata", Offset: uint64(offset), Msg: fmt.Sprintf("record of %d bytes too short for its sample_id trailer", len(b))}
		}
		d.decodeOther(&r, end, rec)
		if r.err == nil {
			t := reader{b: b[:len(b):len(b)], off: end, at: offset}
			d.decodeTrailer(&t, a, &rec.ID)
			r.err = t.err
		}
	}
	return r.err
}

// attrOfSample finds the attribute of a sample record.
func (d *Decoder) attrOfSample(b []byte, offset int64) (*Attr, error) {
	if len(d.attrs) == 1 {
		return d.attrs[0], nil
	}
	pos := d.idPos
	if d.attrs[0].SampleType&SampleIdentifier != 0 {
		pos = 0
	}
	return d.attrByID(b, recordHeaderSize+pos, offset)
}

// attrOfTrailer finds the attribute of a non-sample record by its trailer.
func (d *Decoder) attrOfTrailer(b []byte, offset int64) (*Attr, error) {
	if len(d.attrs) == 1 {
		return d.attrs[0], nil
	}
	if d.attrs[0].Flags&FlagSampleIDAll == 0 {
		return d.attrs[0], nil // no trailers: any attribute decodes the body
	}
	pos := len(b) - 8
	if d.attrs[0].SampleType&SampleIdentifier == 0 {
		pos = len(b) - d.idFromEnd
	}
	return d.attrByID(b, pos, offset)
}

func (d *Decoder) attrByID(b []byte, pos int, offset int64) (*Attr, error) {
	if pos < recordHeaderSize || pos+8 > len(b) {
		return nil, &FormatError{Pkg: "perfdata", Offset: uint64(offset), Msg: "record too short for its event id"}
	}
	id := binary.LittleEndian.Uint64(b[pos:])
	a := d.ids[id]
	if a == nil && id == 0 {
		// Records perf synthesizes (the mappings and names of the
		// processes running when a system-wide recording starts) carry
		// id 0; perf reads them with the first event, and so do we.
		return d.attrs[0], nil
	}
	if a == nil {
		return nil, &FormatError{Pkg: "perfdata", Offset: uint64(offset + int64(pos)), Msg: fmt.Sprintf("id %d", id), Err: ErrUnknownID}
	}
	return a, nil
}

// ErrUnknownID is wrapped by the error for a record whose event id names
// none of the file's event attributes (File.Records skips such records and
// counts them).
var ErrUnknownID = errors.New("unknown event id")

func (d *Decoder) decodeTrailer(r *reader, a *Attr, id *SampleIDFields) {
	st := a.SampleType
	if st&SampleTID != 0 {
		id.PID = r.u32("pid")
		id.TID = r.u32("tid")
	}
	if st&SampleTime != 0 {
		id.Time = r.u64("time")
	}
	if st&SampleID != 0 {
		id.ID = r.u64("id")
	}
	if st&SampleStreamID != 0 {
		id.StreamID = r.u64("stream id")
	}
	if st&SampleCPU != 0 {
		id.CPU = r.u32("cpu")
		r.u32("cpu reserved")
	}
	if st&SampleIdentifier != 0 {
		id.ID = r.u64("identifier")
	}
}

func (d *Decoder) decodeOther(r *reader, end int, rec *Record) {
	switch rec.Type {
	case RecordMmap, RecordMmap2:
		m := &d.mmap
		*m = Mmap{}
		m.PID = r.u32("pid")
		m.TID = r.u32("tid")
		m.Addr = r.u64("addr")
		m.Len = r.u64("len")
		m.PgOff = r.u64("pgoff")
		if rec.Type == RecordMmap2 {
			if rec.Misc&MiscMmapBuildID != 0 {
				head := r.bytes(4, "build-id size")
				id := r.bytes(20, "build-id")
				if r.err == nil {
					n := int(head[0])
					if n > 20 {
						r.fail(fmt.Sprintf("build-id size %d > 20", n))
					} else {
						m.BuildID = id[:n]
					}
				}
			} else {
				m.Maj = r.u32("maj")
				m.Min = r.u32("min")
				m.Ino = r.u64("ino")
				m.InoGen = r.u64("ino generation")
			}
			m.Prot = r.u32("prot")
			m.Flags = r.u32("flags")
			m.Executable = m.Prot&4 != 0 // PROT_EXEC
		} else {
			m.Executable = rec.Misc&(1<<13) == 0 // PERF_RECORD_MISC_MMAP_DATA
		}
		m.Filename = r.cstring(end, "filename")
		rec.Mmap = m
		rec.ID.PID, rec.ID.TID = m.PID, m.TID
	case RecordComm:
		c := &d.comm
		c.PID = r.u32("pid")
		c.TID = r.u32("tid")
		c.Comm = r.cstring(end, "comm")
		c.Exec = rec.Misc&MiscCommExec != 0
		rec.Comm = c
		rec.ID.PID, rec.ID.TID = c.PID, c.TID
	case RecordFork, RecordExit:
		t := &d.task
		t.PID = r.u32("pid")
		t.PPID = r.u32("ppid")
		t.TID = r.u32("tid")
		t.PTID = r.u32("ptid")
		t.Time = r.u64("time")
		rec.Task = t
		rec.ID.PID, rec.ID.TID, rec.ID.Time = t.PID, t.TID, t.Time
	case RecordLost:
		r.u64("id")
		rec.Lost = r.u64("lost")
	case RecordLostSamples:
		rec.Lost = r.u64("lost")
	}
}

func (d *Decoder) decodeSample(r *reader, a *Attr, rec *Record) {
	s := &d.sample
	*s = Sample{Attr: a, Misc: rec.Misc}
	st := a.SampleType
	if st&SampleIdentifier != 0 {
		s.ID = r.u64("identifier")
	}
	if st&SampleIP != 0 {
		s.IP = r.u64("ip")
	}
	if st&SampleTID != 0 {
		s.PID = r.u32("pid")
		s.TID = r.u32("tid")
	}
	if st&SampleTime != 0 {
		s.Time = r.u64("time")
	}
	if st&SampleAddr != 0 {
		s.Addr = r.u64("addr")
	}
	if st&SampleID != 0 {
		s.ID = r.u64("id")
	}
	if st&SampleStreamID != 0 {
		s.StreamID = r.u64("stream id")
	}
	if st&SampleCPU != 0 {
		s.CPU = r.u32("cpu")
		r.u32("cpu reserved")
	}
	if st&SamplePeriod != 0 {
		s.Period = r.u64("period")
	}
	if st&SampleRead != 0 {
		skipRead(r, a.ReadFormat)
	}
	if st&SampleCallchain != 0 {
		n := r.u64("callchain size")
		if n > maxCallchainFrames || n > uint64(len(r.b)-r.off)/8 {
			r.fail(fmt.Sprintf("callchain of %d entries overruns the record", n))
		} else {
			d.chain = d.chain[:0]
			for i := uint64(0); i < n; i++ {
				d.chain = append(d.chain, r.u64("callchain"))
			}
			s.Callchain = d.chain
		}
	}
	if st&SampleRaw != 0 {
		n := r.u32("raw size")
		s.RawData = r.bytes(uint64(n), "raw data")
	}
	if st&SampleBranchStack != 0 {
		n := r.u64("branch stack size")
		if a.BranchSampleType&flagBranchHWIndex != 0 {
			r.u64("branch hw_idx")
		}
		if n > uint64(len(r.b))/branchEntrySize {
			r.fail(fmt.Sprintf("branch stack of %d entries overruns the record", n))
		} else {
			r.bytes(n*branchEntrySize, "branch stack")
		}
	}
	if st&SampleRegsUser != 0 {
		s.RegsABI = r.u64("user regs abi")
		if s.RegsABI != RegsABINone {
			d.regs = d.regs[:0]
			start := r.off
			for i := regCount(a.SampleRegsUser); i > 0; i-- {
				d.regs = append(d.regs, r.u64("user regs"))
			}
			s.Regs = d.regs
			if r.err == nil {
				s.RegsRaw = r.b[start:r.off:r.off]
			}
		}
	}
	if st&SampleStackUser != 0 {
		n := r.u64("user stack size")
		data := r.bytes(n, "user stack")
		if n != 0 {
			dyn := r.u64("user stack dyn_size")
			if dyn < n {
				data = data[:dyn]
			}
		}
		s.Stack = data
	}
	// Fields after the stack (weight, data source, ...) are not needed.
	rec.Sample = s
	rec.ID = s.SampleIDFields
}

// skipRead skips a PERF_SAMPLE_READ block.
func skipRead(r *reader, rf uint64) {
	per := 1
	if rf&FormatID != 0 {
		per++
	}
	if rf&FormatLost != 0 {
		per++
	}
	head := 0
	if rf&FormatTotalTimeEnabled != 0 {
		head++
	}
	if rf&FormatTotalTimeRunning != 0 {
		head++
	}
	if rf&FormatGroup == 0 {
		r.bytes(uint64(8*(head+per)), "read values")
		return
	}
	n := r.u64("read group size")
	if n > uint64(len(r.b)) {
		r.fail(fmt.Sprintf("read group of %d events overruns the record", n))
		return
	}
	r.bytes(uint64(8*head)+n*uint64(8*per), "read group")
}
