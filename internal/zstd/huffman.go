package zstd

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Huffman coding of literals (RFC 8878 section 4.2).

const (
	hufMaxBits    = 11 // Max_Number_of_Bits
	hufMaxWeights = 255
	hufWeightLog  = 6 // max accuracy log of the FSE-compressed weights
)

// hufTable decodes a Huffman stream by looking up the next maxBits bits:
// each entry is the symbol in its low byte and the code length above.
type hufTable struct {
	entries [1 << hufMaxBits]uint16
	maxBits uint8
}

// readTree parses a Huffman_Tree_Description at the start of in, builds the
// table, and returns the description's size.
func (t *hufTable) readTree(in []byte) (int, error) {
	if len(in) == 0 {
		return 0, corrupt("missing Huffman tree description")
	}
	var weights [256]uint8
	nw := 0
	h := int(in[0])
	size := 0
	if h >= 128 {
		// Direct representation: 4 bits per weight.
		nw = h - 127
		size = 1 + (nw+1)/2
		if size > len(in) {
			return 0, corrupt("truncated Huffman weights")
		}
		for i := 0; i < nw; i++ {
			b := in[1+i/2]
			if i&1 == 0 {
				weights[i] = b >> 4
			} else {
				weights[i] = b & 15
			}
		}
	} else {
		size = 1 + h
		if size > len(in) {
			return 0, corrupt("truncated Huffman weights")
		}
		var err error
		nw, err = readFSEWeights(weights[:hufMaxWeights], in[1:size])
		if err != nil {
			return 0, err
		}
	}
	var total uint32
	for _, w := range weights[:nw] {
		if w > hufMaxBits {
			return 0, fmt.Errorf("Huffman weight %d too large", w)
		}
		if w > 0 {
			total += 1 << (w - 1)
		}
	}
	if total == 0 {
		return 0, corrupt("Huffman weights all zero")
	}
	maxBits := bits.Len32(total)
	if maxBits > hufMaxBits {
		return 0, corrupt("Huffman code too long")
	}
	rest := uint32(1)<<maxBits - total
	if rest&(rest-1) != 0 {
		return 0, corrupt("Huffman weights do not complete a tree")
	}
	weights[nw] = uint8(bits.Len32(rest))
	nw++

	// Codes go to symbols in order of increasing weight, then symbol value;
	// the smallest codes (lowest table indexes) go to the lowest weights.
	var count [hufMaxBits + 1]int
	for _, w := range weights[:nw] {
		count[w]++
	}
	var start [hufMaxBits + 1]int
	p := 0
	for w := 1; w <= maxBits; w++ {
		start[w] = p
		p += count[w] << (w - 1)
	}
	for s, w := range weights[:nw] {
		if w == 0 {
			continue
		}
		n := 1 << (w - 1)
		e := uint16(s) | uint16(maxBits+1-int(w))<<8
		fill := t.entries[start[w] : start[w]+n]
		for i := range fill {
			fill[i] = e
		}
		start[w] += n
	}
	t.maxBits = uint8(maxBits)
	return size, nil
}

// readFSEWeights decodes FSE-compressed Huffman weights from in into
// weights and returns how many there are. The stream interleaves two
// states and ends when a state update reads past its start.
func readFSEWeights(weights []uint8, in []byte) (int, error) {
	var norm [256]int16
	nsym, accLog, hs, err := readNormCounts(norm[:], in, 255, hufWeightLog)
	if err != nil {
		return 0, err
	}
	var tab [1 << hufWeightLog]fseEntry
	if err := buildFSE(tab[:], norm[:], nsym, accLog); err != nil {
		return 0, err
	}
	var br backReader
	if err := br.init(in[hs:]); err != nil {
		return 0, err
	}
	s1 := br.read(accLog)
	s2 := br.read(accLog)
	n := 0
	for {
		if n+2 > len(weights) {
			return 0, corrupt("too many Huffman weights")
		}
		br.refill()
		e := tab[s1&63]
		weights[n] = e.sym
		n++
		s1 = uint64(e.newState) + br.read(e.nbBits)
		if br.n < 0 {
			weights[n] = tab[s2&63].sym
			n++
			break
		}
		e = tab[s2&63]
		weights[n] = e.sym
		n++
		s2 = uint64(e.newState) + br.read(e.nbBits)
		if br.n < 0 {
			weights[n] = tab[s1&63].sym
			n++
			break
		}
	}
	return n, nil
}

// decode1 decodes one Huffman stream, src, filling all of dst.
func (t *hufTable) decode1(dst, src []byte) error {
	var br backReader
	if err := br.init(src); err != nil {
		return err
	}
	shift := 64 - t.maxBits
	tab := &t.entries
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		br.refill()
		e := tab[(br.value>>shift)&(1<<hufMaxBits-1)]
		br.value <<= e >> 8
		dst[i] = byte(e)
		nb := int(e >> 8)
		e = tab[(br.value>>shift)&(1<<hufMaxBits-1)]
		br.value <<= e >> 8
		dst[i+1] = byte(e)
		nb += int(e >> 8)
		e = tab[(br.value>>shift)&(1<<hufMaxBits-1)]
		br.value <<= e >> 8
		dst[i+2] = byte(e)
		nb += int(e >> 8)
		e = tab[(br.value>>shift)&(1<<hufMaxBits-1)]
		br.value <<= e >> 8
		dst[i+3] = byte(e)
		nb += int(e >> 8)
		br.n -= nb
		if br.n < 0 {
			return corrupt("Huffman stream overrun")
		}
	}
	br.refill()
	for ; i < len(dst); i++ {
		e := tab[(br.value>>shift)&(1<<hufMaxBits-1)]
		br.value <<= e >> 8
		br.n -= int(e >> 8)
		dst[i] = byte(e)
	}
	if !br.done() {
		return corrupt("Huffman stream not consumed exactly")
	}
	return nil
}

// decode4 decodes the four-stream form: a 6-byte jump table with the sizes
// of the first three streams, then the streams, each filling a quarter of
// dst (rounded up; the last takes the remainder).
func (t *hufTable) decode4(dst, src []byte) error {
	if len(src) < 6 {
		return corrupt("truncated Huffman jump table")
	}
	s1 := int(binary.LittleEndian.Uint16(src[0:]))
	s2 := int(binary.LittleEndian.Uint16(src[2:]))
	s3 := int(binary.LittleEndian.Uint16(src[4:]))
	src = src[6:]
	if s1+s2+s3 > len(src) {
		return corrupt("Huffman jump table exceeds literals")
	}
	seg := (len(dst) + 3) / 4
	if 3*seg > len(dst) {
		return corrupt("too few literals for four Huffman streams")
	}
	for i, s := range [4]int{s1, s2, s3, len(src) - s1 - s2 - s3} {
		end := (i + 1) * seg
		if i == 3 {
			end = len(dst)
		}
		if err := t.decode1(dst[i*seg:end], src[:s]); err != nil {
			return err
		}
		src = src[s:]
	}
	return nil
}
