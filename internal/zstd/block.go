package zstd

import "fmt"

// Block_Type values.
const (
	blockRaw = iota
	blockRLE
	blockCompressed
	blockReserved
)

// decodeBlock decodes one block whose content is in and whose header gave
// size, appends its output to dst, and records it as history.
func (d *Decoder) decodeBlock(dst []byte, typ int, in []byte, size int) ([]byte, error) {
	d.makeRoom()
	start := len(d.hist)
	switch typ {
	case blockRaw:
		d.hist = append(d.hist, in...)
	case blockRLE:
		out := d.hist[start : start+size]
		for i := range out {
			out[i] = in[0]
		}
		d.hist = d.hist[:start+size]
	case blockCompressed:
		lits, n, err := d.decodeLiterals(in)
		if err != nil {
			return dst, err
		}
		if err := d.decodeSequences(in[n:], lits); err != nil {
			d.hist = d.hist[:start]
			return dst, err
		}
	}
	out := d.hist[start:]
	d.frameOut += uint64(len(out))
	if d.fh.hasFCS && d.frameOut > d.fh.fcs {
		return dst, fmt.Errorf("frame output exceeds declared content size %d", d.fh.fcs)
	}
	d.totalOut += uint64(len(out))
	if d.outLimit > 0 && d.totalOut > d.outLimit {
		return dst, fmt.Errorf("%w of %d bytes", ErrOutputLimit, d.outLimit)
	}
	if d.fh.checksum {
		d.xxh.write(out)
	}
	return append(dst, out...), nil
}

// makeRoom makes sure hist has capacity for one more block, keeping at
// least the last window bytes. History is slid down once at least half a
// window of older bytes has piled up, so each output byte is copied at most
// about twice, and capacity stays near 1.5 windows plus two blocks.
func (d *Decoder) makeRoom() {
	need := len(d.hist) + d.blockMax
	if need <= cap(d.hist) {
		return
	}
	if excess := len(d.hist) - d.window; excess > 0 && 2*excess >= d.window {
		n := copy(d.hist, d.hist[excess:])
		d.hist = d.hist[:n]
		need = n + d.blockMax
		if need <= cap(d.hist) {
			return
		}
	}
	target := d.window + d.window/2 + 2*d.blockMax
	newCap := min(max(2*cap(d.hist), 64<<10), target)
	newCap = max(newCap, need)
	h := make([]byte, len(d.hist), newCap)
	copy(h, d.hist)
	d.hist = h
}
