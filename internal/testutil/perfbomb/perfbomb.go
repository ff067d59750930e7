// Package perfbomb writes perf.data files as perf record -z does, whose
// compressed records expand far more than any recording's: decompression
// bombs, for the tests of what reads them. Every record is valid: one
// sample repeated, compressed by a real Zstandard encoder into one frame
// that never ends, flushed and cut into COMPRESSED2 records as perf cuts
// its stream.
package perfbomb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/klauspost/compress/zstd"
)

// Kind is the sample record a bomb repeats.
type Kind int

const (
	// Dwarf samples are perf record --call-graph dwarf's: user registers
	// and an 8 KiB stack copy (of zeros), 8.4 KB a record.
	Dwarf Kind = iota
	// Tiny samples are perf record -g's with a one-frame callchain,
	// 64 bytes a record: the most records for the bytes.
	Tiny
)

// Options describe a bomb.
type Options struct {
	Kind Kind
	// Expand is how many bytes of records the compressed stream holds
	// (rounded up to whole records).
	Expand int64
	// PID is the sampled process and thread (default 4242).
	PID uint32
	// Noise is how many bytes of each record are random (in the stack
	// copy of a Dwarf sample, the time and address of a Tiny one, at
	// most 16): the more, the larger the file for the same Expand.
	Noise int
	// Seed seeds the noise.
	Seed uint64
	// Raw writes the records as they are, not compressed: a file of
	// Expand bytes of records (perf record without -z), for tests of
	// large files. It is written a chunk at a time.
	Raw bool
	// Threads, with Raw, spreads the samples over that many threads of
	// the process, in turn (their TIDs follow PID): as many distinct
	// stacks for a profile, which keeps one per thread and stack.
	Threads int
}

// Result says what was written.
type Result struct {
	// Size is the file's size, DataSize its data section's.
	Size, DataSize int64
	// Records is the number of sample records in the stream, RecordSize
	// the size of each.
	Records    int64
	RecordSize int
}

// Attribute fields, as perf_event_open takes them.
const (
	sampleIP        = 1 << 0
	sampleTID       = 1 << 1
	sampleTime      = 1 << 2
	sampleCallchain = 1 << 5
	samplePeriod    = 1 << 8
	sampleRegsUser  = 1 << 12
	sampleStackUser = 1 << 13
	flagFreq        = 1 << 10
	// regsAMD64 is the register mask perf asks for on x86-64 (AX to R15
	// without the segment registers), 20 registers.
	regsAMD64 = 0xff0fff
	stackSize = 8192
	attrSize  = 128

	recordSample      = 9
	recordCompressed2 = 83
	// maxPiece is the compressed bytes one COMPRESSED2 record holds
	// (perf's records are at most 64 KiB).
	maxPiece = 65000
	// flushEvery is how many bytes of records go into the stream
	// between two flushes (perf flushes what it read of the ring
	// buffers each time).
	flushEvery = 16 << 20
)

func (k Kind) attr() (sampleType, regs uint64, stack uint32) {
	if k == Tiny {
		return sampleIP | sampleTID | sampleTime | samplePeriod | sampleCallchain, 0, 0
	}
	return sampleIP | sampleTID | sampleTime | samplePeriod | sampleCallchain | sampleRegsUser | sampleStackUser, regsAMD64, stackSize
}

// sample returns the record the bomb repeats.
func (k Kind) sample(pid uint32) []byte {
	le := binary.LittleEndian
	var b []byte
	b = le.AppendUint32(b, recordSample)
	b = le.AppendUint16(b, 2) // PERF_RECORD_MISC_USER
	b = le.AppendUint16(b, 0) // size, below
	b = le.AppendUint64(b, 0x401000)
	b = le.AppendUint32(b, pid)
	b = le.AppendUint32(b, pid)
	b = le.AppendUint64(b, 1000) // time
	b = le.AppendUint64(b, 1000000)
	b = le.AppendUint64(b, 2) // callchain: user context, the IP
	b = le.AppendUint64(b, ^uint64(512-1))
	b = le.AppendUint64(b, 0x401000)
	if k == Dwarf {
		b = le.AppendUint64(b, 2) // PERF_SAMPLE_REGS_ABI_64
		for i := 0; i < 20; i++ {
			b = le.AppendUint64(b, 0x7ffd0000)
		}
		b = le.AppendUint64(b, stackSize)
		b = append(b, make([]byte, stackSize)...)
		b = le.AppendUint64(b, stackSize) // dyn_size
	}
	le.PutUint16(b[6:], uint16(len(b)))
	return b
}

// Write writes a bomb to path.
func Write(path string, opt Options) (Result, error) {
	if opt.PID == 0 {
		opt.PID = 4242
	}
	rec := opt.Kind.sample(opt.PID)
	res := Result{RecordSize: len(rec)}
	var z bytes.Buffer
	enc, err := zstd.NewWriter(&z, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(false))
	if err != nil {
		return res, err
	}
	// chunk is flushEvery bytes of records, written again and again
	// (with new noise each time).
	chunk := bytes.Repeat(rec, flushEvery/len(rec))
	noiseAt := 24 // the time and the period
	if opt.Kind == Dwarf {
		noiseAt = len(rec) - 8 - stackSize
	}
	noise := min(opt.Noise, len(rec)-8-noiseAt)
	if opt.Kind == Tiny {
		noise = min(noise, 16)
	}
	rnd := rand.New(rand.NewPCG(opt.Seed, 1))
	if opt.Raw {
		return writeRaw(path, opt, rec, chunk, noiseAt, noise, rnd)
	}
	var data []byte
	cut := func() {
		for z.Len() > 0 {
			p := z.Next(maxPiece)
			size := (8 + 8 + len(p) + 7) &^ 7
			var h [16]byte
			binary.LittleEndian.PutUint32(h[:], recordCompressed2)
			binary.LittleEndian.PutUint16(h[6:], uint16(size))
			binary.LittleEndian.PutUint64(h[8:], uint64(len(p)))
			data = append(data, h[:]...)
			data = append(data, p...)
			data = append(data, make([]byte, size-16-len(p))...)
		}
	}
	for left := opt.Expand; left > 0; {
		c := chunk
		if noise > 0 {
			for p := 0; p < len(c); p += len(rec) {
				for i := 0; i < noise; i++ {
					c[p+noiseAt+i] = byte(rnd.Uint32())
				}
			}
		}
		if int64(len(c)) > left {
			n := (left + int64(len(rec)) - 1) / int64(len(rec))
			c = c[:n*int64(len(rec))]
		}
		if _, err := enc.Write(c); err != nil {
			return res, err
		}
		if err := enc.Flush(); err != nil {
			return res, err
		}
		cut()
		left -= int64(len(c))
		res.Records += int64(len(c) / len(rec))
	}
	// The frame is not ended: perf never ends it.
	res.DataSize = int64(len(data))
	file := header(opt.Kind, data, true)
	res.Size = int64(len(file))
	if err := os.WriteFile(path, file, 0o644); err != nil {
		return res, err
	}
	return res, nil
}

// writeRaw writes the records of a Raw bomb to path, chunk (rec repeated)
// by chunk.
func writeRaw(path string, opt Options, rec, chunk []byte, noiseAt, noise int, rnd *rand.Rand) (Result, error) {
	res := Result{RecordSize: len(rec)}
	res.Records = (opt.Expand + int64(len(rec)) - 1) / int64(len(rec))
	res.DataSize = res.Records * int64(len(rec))
	f, err := os.Create(path)
	if err != nil {
		return res, err
	}
	defer f.Close()
	head := header(opt.Kind, nil, false)
	head = head[:len(head)-16] // the data, then the feature table, follow
	le := binary.LittleEndian
	le.PutUint64(head[48:], uint64(res.DataSize))
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(head)
	n := 0
	for left := res.Records; left > 0; {
		c := chunk[:min(int64(len(chunk)/len(rec)), left)*int64(len(rec))]
		for p := 0; p < len(c) && noise > 0; p += len(rec) {
			for i := 0; i < noise; i++ {
				c[p+noiseAt+i] = byte(rnd.Uint32())
			}
		}
		for p := 0; p < len(c) && opt.Threads > 0; p += len(rec) {
			le.PutUint32(c[p+20:], opt.PID+uint32(n%opt.Threads)) // the TID
			n++
		}
		w.Write(c)
		left -= int64(len(c) / len(rec))
	}
	var table [16]byte
	le.PutUint64(table[:], uint64(int64(len(head))+res.DataSize+16))
	w.Write(table[:])
	if err := w.Flush(); err != nil {
		return res, err
	}
	res.Size = int64(len(head)) + res.DataSize + 16
	return res, f.Close()
}

// header returns a perf.data file of one cpu-clock event and the data
// section data, with the HEADER_COMPRESSED feature bit perf record -z
// sets when compressed (and no feature sections).
func header(k Kind, data []byte, compressed bool) []byte {
	le := binary.LittleEndian
	st, regs, stack := k.attr()
	attr := make([]byte, attrSize)
	le.PutUint32(attr[0:], 1)         // PERF_TYPE_SOFTWARE
	le.PutUint32(attr[4:], attrSize)  //
	le.PutUint64(attr[8:], 0)         // PERF_COUNT_SW_CPU_CLOCK
	le.PutUint64(attr[16:], 999)      // sample_freq
	le.PutUint64(attr[24:], st)       //
	le.PutUint64(attr[40:], flagFreq) //
	le.PutUint64(attr[80:], regs)     // sample_regs_user
	le.PutUint32(attr[88:], stack)    // sample_stack_user
	le.PutUint32(attr[92:], 0)        // clockid
	const headerSize, attrsOff = 104, 104
	idsOff := attrsOff + attrSize + 16
	dataOff := idsOff + 8
	var b []byte
	b = append(b, "PERFILE2"...)
	b = le.AppendUint64(b, headerSize)
	b = le.AppendUint64(b, attrSize+16)
	b = le.AppendUint64(b, attrsOff)
	b = le.AppendUint64(b, attrSize+16)
	b = le.AppendUint64(b, uint64(dataOff))
	b = le.AppendUint64(b, uint64(len(data)))
	b = le.AppendUint64(b, 0) // event types
	b = le.AppendUint64(b, 0)
	if compressed {
		b = le.AppendUint64(b, 1<<27) // HEADER_COMPRESSED
	} else {
		b = le.AppendUint64(b, 0)
	}
	b = le.AppendUint64(b, 0)
	b = le.AppendUint64(b, 0)
	b = le.AppendUint64(b, 0)
	b = append(b, attr...)
	b = le.AppendUint64(b, uint64(idsOff))
	b = le.AppendUint64(b, 8)
	b = le.AppendUint64(b, 1) // the event's id
	if len(b) != dataOff {
		panic(fmt.Sprintf("perfbomb: header of %d bytes, want %d", len(b), dataOff))
	}
	b = append(b, data...)
	// An empty feature table: the feature's section is said absent by
	// a zero size.
	b = le.AppendUint64(b, uint64(len(b)+16))
	b = le.AppendUint64(b, 0)
	return b
}
