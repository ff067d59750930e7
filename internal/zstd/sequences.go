package zstd

import (
	"fmt"
	"sync"
)

// Sequences section (RFC 8878 section 3.1.1.3.2).

// seqEntry is an FSE state of a sequence table, with the code's value
// folded in: the field value is base plus extra bits read from the stream.
type seqEntry struct {
	base     uint32
	extra    uint8
	nbBits   uint8
	newState uint16
}

// seqTable is the decoding table of literal lengths, offsets or match
// lengths.
type seqTable struct {
	entries [1 << 9]seqEntry
	accLog  uint8
}

// seqKind describes one of the three sequence fields.
type seqKind struct {
	name     string
	maxSym   int
	maxLog   uint8
	base     []uint32 // nil for offsets: base 1<<code
	extra    []uint8
	defNorm  []int16
	defLog   uint8
	defTable seqTable
}

var (
	llKind = seqKind{
		name: "literal length", maxSym: 35, maxLog: 9,
		base: []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
			16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096,
			8192, 16384, 32768, 65536},
		extra: []uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12,
			13, 14, 15, 16},
		defNorm: []int16{4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
			2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1,
			-1, -1, -1, -1},
		defLog: 6,
	}
	mlKind = seqKind{
		name: "match length", maxSym: 52, maxLog: 9,
		base: []uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
			19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34,
			35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051,
			4099, 8195, 16387, 32771, 65539},
		extra: []uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
			1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11,
			12, 13, 14, 15, 16},
		defNorm: []int16{1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
			1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
			1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
			-1, -1, -1, -1, -1},
		defLog: 6,
	}
	ofKind = seqKind{
		name: "offset", maxSym: 31, maxLog: 8,
		defNorm: []int16{1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
			1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1},
		defLog: 5,
	}
)

// buildPredefined makes the predefined tables, once, when the first
// decoder is made: every rewind command links the package, few decode.
var buildPredefined = sync.OnceFunc(func() {
	for _, k := range []*seqKind{&llKind, &mlKind, &ofKind} {
		if err := k.build(&k.defTable, k.defNorm, len(k.defNorm), k.defLog); err != nil {
			panic("zstd: bad predefined " + k.name + " table")
		}
	}
})

// codeValue returns the base and extra bit count of code sym.
func (k *seqKind) codeValue(sym uint8) (uint32, uint8) {
	if k.base == nil {
		return 1 << sym, sym
	}
	return k.base[sym], k.extra[sym]
}

// build makes t the sequence table for the given normalized counts.
func (k *seqKind) build(t *seqTable, norm []int16, nsym int, accLog uint8) error {
	var fse [1 << 9]fseEntry
	if err := buildFSE(fse[:], norm, nsym, accLog); err != nil {
		return err
	}
	for i, e := range fse[:1<<accLog] {
		base, extra := k.codeValue(e.sym)
		t.entries[i] = seqEntry{base: base, extra: extra, nbBits: e.nbBits, newState: e.newState}
	}
	t.accLog = accLog
	return nil
}

// readTable sets *cur for compression mode mode from the description at the
// start of in, and returns the description's size. own is storage for a
// table read from the stream.
func (k *seqKind) readTable(cur **seqTable, own *seqTable, mode byte, in []byte) (int, error) {
	switch mode {
	case 0: // Predefined_Mode
		*cur = &k.defTable
		return 0, nil
	case 1: // RLE_Mode
		if len(in) < 1 {
			return 0, fmt.Errorf("truncated %s RLE symbol", k.name)
		}
		if int(in[0]) > k.maxSym {
			return 0, fmt.Errorf("%s code %d out of range", k.name, in[0])
		}
		base, extra := k.codeValue(in[0])
		own.entries[0] = seqEntry{base: base, extra: extra}
		own.accLog = 0
		*cur = own
		return 1, nil
	case 2: // FSE_Compressed_Mode
		var norm [64]int16
		nsym, accLog, n, err := readNormCounts(norm[:], in, k.maxSym, k.maxLog)
		if err != nil {
			return 0, fmt.Errorf("%s table: %v", k.name, err)
		}
		if err := k.build(own, norm[:], nsym, accLog); err != nil {
			return 0, fmt.Errorf("%s table: %v", k.name, err)
		}
		*cur = own
		return n, nil
	default: // Repeat_Mode
		if *cur == nil {
			return 0, fmt.Errorf("repeated %s table without a previous one", k.name)
		}
		return 0, nil
	}
}

// decodeSequences decodes the Sequences_Section in and executes it: the
// block's output (literals interleaved with matches) is appended to d.hist,
// which must have room for d.blockMax more bytes.
func (d *Decoder) decodeSequences(in, lits []byte) error {
	if len(in) == 0 {
		return corrupt("missing sequences section")
	}
	nseq := int(in[0])
	p := 1
	switch {
	case nseq == 255:
		if len(in) < 3 {
			return corrupt("truncated sequences header")
		}
		nseq, p = int(in[1])|int(in[2])<<8+0x7F00, 3
	case nseq >= 128:
		if len(in) < 2 {
			return corrupt("truncated sequences header")
		}
		nseq, p = (nseq-128)<<8|int(in[1]), 2
	}
	start := len(d.hist)
	if nseq == 0 {
		if p != len(in) {
			return corrupt("bytes after empty sequences section")
		}
		d.hist = append(d.hist, lits...)
		return nil
	}
	if p >= len(in) {
		return corrupt("truncated sequences header")
	}
	modes := in[p]
	p++
	if modes&3 != 0 {
		return corrupt("reserved bits set in symbol compression modes")
	}
	n, err := llKind.readTable(&d.llTab, &d.llOwn, modes>>6, in[p:])
	if err != nil {
		return err
	}
	p += n
	n, err = ofKind.readTable(&d.ofTab, &d.ofOwn, modes>>4&3, in[p:])
	if err != nil {
		return err
	}
	p += n
	n, err = mlKind.readTable(&d.mlTab, &d.mlOwn, modes>>2&3, in[p:])
	if err != nil {
		return err
	}
	p += n

	var br backReader
	if err := br.init(in[p:]); err != nil {
		return err
	}
	llT := d.llTab.entries[:1<<d.llTab.accLog]
	ofT := d.ofTab.entries[:1<<d.ofTab.accLog]
	mlT := d.mlTab.entries[:1<<d.mlTab.accLog]
	llS := br.read(d.llTab.accLog)
	ofS := br.read(d.ofTab.accLog)
	mlS := br.read(d.mlTab.accLog)

	out := d.hist[:cap(d.hist)]
	pos := start
	limit := start + d.blockMax
	window := d.window
	rep := d.rep
	for i := nseq - 1; i >= 0; i-- {
		// After a refill at least 57 bits are loaded (unless the stream
		// runs out): enough for all three values but the rare case of
		// long offsets with long lengths, and then the three states
		// (at most 9+9+8 bits) often fit too.
		br.refill()
		ofE, mlE, llE := ofT[ofS], mlT[mlS], llT[llS]
		ofv := int(ofE.base) + int(br.read(ofE.extra))
		if ofE.extra+mlE.extra+llE.extra > 56 {
			br.refill()
		}
		ml := int(mlE.base) + int(br.read(mlE.extra))
		ll := int(llE.base) + int(br.read(llE.extra))
		if i > 0 {
			if br.n < 26 {
				br.refill()
			}
			llS = uint64(llE.newState) + br.read(llE.nbBits)
			mlS = uint64(mlE.newState) + br.read(mlE.nbBits)
			ofS = uint64(ofE.newState) + br.read(ofE.nbBits)
		}

		var off int
		if ofv > 3 {
			off = ofv - 3
			rep[2], rep[1], rep[0] = rep[1], rep[0], off
		} else {
			idx := ofv - 1
			if ll == 0 {
				idx++
			}
			switch idx {
			case 0:
				off = rep[0]
			case 1:
				off = rep[1]
				rep[1], rep[0] = rep[0], off
			case 2:
				off = rep[2]
				rep[2], rep[1], rep[0] = rep[1], rep[0], off
			default:
				off = rep[0] - 1
				rep[2], rep[1], rep[0] = rep[1], rep[0], off
			}
		}

		if ll > len(lits) {
			return fmt.Errorf("sequence needs %d literals, %d left", ll, len(lits))
		}
		if ll+ml > limit-pos {
			return corrupt("block output exceeds maximum block size")
		}
		copy(out[pos:pos+ll], lits[:ll])
		lits = lits[ll:]
		pos += ll
		if off <= 0 || off > pos || off > window {
			return fmt.Errorf("match offset %d beyond history", off)
		}
		src := pos - off
		if off >= ml {
			copy(out[pos:pos+ml], out[src:src+ml])
			pos += ml
		} else {
			// Overlapping match: the source is periodic with period off,
			// so each copy can take everything from src up to pos.
			end := pos + ml
			for pos < end {
				pos += copy(out[pos:end], out[src:pos])
			}
		}
	}
	if !br.done() {
		return corrupt("sequences bitstream not consumed exactly")
	}
	if len(lits) > limit-pos {
		return corrupt("block output exceeds maximum block size")
	}
	pos += copy(out[pos:], lits)
	d.hist = out[:pos]
	d.rep = rep
	return nil
}
