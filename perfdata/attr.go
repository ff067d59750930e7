// Package perfdata reads Linux perf event data: the perf_event_attr
// structure, the records the kernel writes into perf ring buffers
// (samples, mmaps, comms, forks, exits, lost counts) and perf.data files as
// `perf record` writes them (header, attributes, data section, feature
// sections such as build-ids).
//
// The record decoder here is the single place rewind decodes perf records:
// the live recorder (package perfevent) hands it ring-buffer records and the
// file reader hands it records from perf.data. Every decoding error carries
// the byte offset of the bad data, and hostile input never panics.
package perfdata

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Sample type bits (perf_event_attr.sample_type).
const (
	SampleIP          = 1 << 0
	SampleTID         = 1 << 1
	SampleTime        = 1 << 2
	SampleAddr        = 1 << 3
	SampleRead        = 1 << 4
	SampleCallchain   = 1 << 5
	SampleID          = 1 << 6
	SampleCPU         = 1 << 7
	SamplePeriod      = 1 << 8
	SampleStreamID    = 1 << 9
	SampleRaw         = 1 << 10
	SampleBranchStack = 1 << 11
	SampleRegsUser    = 1 << 12
	SampleStackUser   = 1 << 13
	SampleWeight      = 1 << 14
	SampleDataSrc     = 1 << 15
	SampleIdentifier  = 1 << 16
	SampleTransaction = 1 << 17
	SampleRegsIntr    = 1 << 18
	SamplePhysAddr    = 1 << 19
	SampleAux         = 1 << 20
	SampleCgroup      = 1 << 21
	SampleDataPage    = 1 << 22
	SampleCodePage    = 1 << 23
	SampleWeightStr   = 1 << 24
	sampleKnown       = 1<<25 - 1
)

// Read format bits (perf_event_attr.read_format).
const (
	FormatTotalTimeEnabled = 1 << 0
	FormatTotalTimeRunning = 1 << 1
	FormatID               = 1 << 2
	FormatGroup            = 1 << 3
	FormatLost             = 1 << 4
)

// Attribute flag bits (the bit field of perf_event_attr after read_format).
const (
	FlagDisabled       = 1 << 0
	FlagInherit        = 1 << 1
	FlagExcludeKernel  = 1 << 5
	FlagExcludeHV      = 1 << 6
	FlagMmap           = 1 << 8
	FlagComm           = 1 << 9
	FlagFreq           = 1 << 10
	FlagEnableOnExec   = 1 << 12
	FlagTask           = 1 << 13
	FlagWatermark      = 1 << 14
	FlagSampleIDAll    = 1 << 18
	FlagExcludeCCUser  = 1 << 22
	FlagMmap2          = 1 << 23
	FlagCommExec       = 1 << 24
	FlagUseClockID     = 1 << 25
	FlagExcludeCCKern  = 1 << 21
	FlagBuildID        = 1 << 34
	flagBranchHWIndex  = 1 << 17 // branch_sample_type PERF_SAMPLE_BRANCH_HW_INDEX
	attrSizeVer0       = 64
	attrSizeMax        = 136
	perfTypeSoftware   = 1
	swCPUClock         = 0
	branchEntrySize    = 24
	maxCallchainFrames = 1 << 16
)

// Event types and software event configs used by rewind.
const (
	TypeSoftware   = perfTypeSoftware
	TypeTracepoint = 2
	ConfigCPUClock = swCPUClock
)

// Attr is struct perf_event_attr. Fields a shorter (older) attribute does
// not have are zero.
type Attr struct {
	Type             uint32
	Size             uint32
	Config           uint64
	SamplePeriod     uint64 // sample_freq when Flags has FlagFreq
	SampleType       uint64
	ReadFormat       uint64
	Flags            uint64
	WakeupEvents     uint32 // wakeup_watermark when Flags has FlagWatermark
	BPType           uint32
	Config1          uint64
	Config2          uint64
	BranchSampleType uint64
	SampleRegsUser   uint64
	SampleStackUser  uint32
	ClockID          int32
	SampleRegsIntr   uint64
	AuxWatermark     uint32
	SampleMaxStack   uint16
	AuxSampleSize    uint32
	SigData          uint64
	Config3          uint64
}

// AttrSize is the size of the perf_event_attr Marshal writes (VER8).
const AttrSize = attrSizeMax

// Marshal encodes the attribute in the kernel's layout (little endian,
// AttrSize bytes), with Size set to AttrSize.
func (a *Attr) Marshal() []byte {
	b := make([]byte, AttrSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], a.Type)
	le.PutUint32(b[4:], AttrSize)
	le.PutUint64(b[8:], a.Config)
	le.PutUint64(b[16:], a.SamplePeriod)
	le.PutUint64(b[24:], a.SampleType)
	le.PutUint64(b[32:], a.ReadFormat)
	le.PutUint64(b[40:], a.Flags)
	le.PutUint32(b[48:], a.WakeupEvents)
	le.PutUint32(b[52:], a.BPType)
	le.PutUint64(b[56:], a.Config1)
	le.PutUint64(b[64:], a.Config2)
	le.PutUint64(b[72:], a.BranchSampleType)
	le.PutUint64(b[80:], a.SampleRegsUser)
	le.PutUint32(b[88:], a.SampleStackUser)
	le.PutUint32(b[92:], uint32(a.ClockID))
	le.PutUint64(b[96:], a.SampleRegsIntr)
	le.PutUint32(b[104:], a.AuxWatermark)
	le.PutUint16(b[108:], a.SampleMaxStack)
	le.PutUint32(b[112:], a.AuxSampleSize)
	le.PutUint64(b[120:], a.SigData)
	le.PutUint64(b[128:], a.Config3)
	return b
}

// ParseAttr decodes a perf_event_attr of len(b) bytes (at least the 64
// bytes of the first version). Bytes beyond the fields rewind knows are
// ignored.
func ParseAttr(b []byte) (Attr, error) {
	var a Attr
	if len(b) < attrSizeVer0 {
		return a, fmt.Errorf("perf_event_attr of %d bytes, want at least %d", len(b), attrSizeVer0)
	}
	var full [attrSizeMax]byte
	copy(full[:], b)
	le := binary.LittleEndian
	a.Type = le.Uint32(full[0:])
	a.Size = le.Uint32(full[4:])
	a.Config = le.Uint64(full[8:])
	a.SamplePeriod = le.Uint64(full[16:])
	a.SampleType = le.Uint64(full[24:])
	a.ReadFormat = le.Uint64(full[32:])
	a.Flags = le.Uint64(full[40:])
	a.WakeupEvents = le.Uint32(full[48:])
	a.BPType = le.Uint32(full[52:])
	a.Config1 = le.Uint64(full[56:])
	a.Config2 = le.Uint64(full[64:])
	a.BranchSampleType = le.Uint64(full[72:])
	a.SampleRegsUser = le.Uint64(full[80:])
	a.SampleStackUser = le.Uint32(full[88:])
	a.ClockID = int32(le.Uint32(full[92:]))
	a.SampleRegsIntr = le.Uint64(full[96:])
	a.AuxWatermark = le.Uint32(full[104:])
	a.SampleMaxStack = le.Uint16(full[108:])
	a.AuxSampleSize = le.Uint32(full[112:])
	a.SigData = le.Uint64(full[120:])
	a.Config3 = le.Uint64(full[128:])
	return a, nil
}

// idTrailerSize is the size of the sample_id trailer of non-sample records
// (zero unless FlagSampleIDAll).
func (a *Attr) idTrailerSize() int {
	if a.Flags&FlagSampleIDAll == 0 {
		return 0
	}
	n := 0
	st := a.SampleType
	for _, bit := range []uint64{SampleTID, SampleTime, SampleID, SampleStreamID, SampleCPU, SampleIdentifier} {
		if st&bit != 0 {
			n += 8
		}
	}
	return n
}

// regCount is the number of registers a REGS_USER or REGS_INTR block holds.
func regCount(mask uint64) int { return bits.OnesCount64(mask) }
