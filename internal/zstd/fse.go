package zstd

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Finite State Entropy tables (RFC 8878 section 4.1).

// fseEntry is one state of an FSE decoding table: the symbol it emits, and
// how to reach the next state (newState plus nbBits bits of the stream).
type fseEntry struct {
	newState uint16
	sym      uint8
	nbBits   uint8
}

// readNormCounts parses an FSE table description at the start of in into
// norm (at least maxSym+1 long). It returns the number of symbols
// described, the accuracy log and the description's size in bytes.
func readNormCounts(norm []int16, in []byte, maxSym int, maxLog uint8) (nsym int, accLog uint8, size int, err error) {
	if len(in) == 0 {
		return 0, 0, 0, corrupt("missing FSE table description")
	}
	accLog = in[0]&15 + 5
	if accLog > maxLog {
		return 0, 0, 0, fmt.Errorf("FSE accuracy log %d exceeds %d", accLog, maxLog)
	}
	pos := 4 // in bits
	// peek returns at least 25 bits from bit pos on; zeros past the end.
	peek := func() uint32 {
		i := pos >> 3
		var v uint32
		if i+4 <= len(in) {
			v = binary.LittleEndian.Uint32(in[i:])
		} else {
			for k := 0; i+k < len(in); k++ {
				v |= uint32(in[i+k]) << (8 * k)
			}
		}
		return v >> (pos & 7)
	}
	remaining := int32(1)<<accLog + 1
	threshold := int32(1) << accLog
	nb := int(accLog) + 1
	for remaining > 1 && nsym <= maxSym {
		v := peek()
		max := 2*threshold - 1 - remaining
		var count int32
		if low := int32(v) & (threshold - 1); low < max {
			count = low
			pos += nb - 1
		} else {
			count = int32(v) & (2*threshold - 1)
			if count >= threshold {
				count -= max
			}
			pos += nb
		}
		count-- // -1 is the "less than 1" probability
		if count < 0 {
			remaining--
		} else {
			remaining -= count
		}
		norm[nsym] = int16(count)
		nsym++
		if count == 0 {
			// A zero is followed by 2-bit repeat flags; 3 means "3 more
			// zeros, and another flag follows".
			for {
				r := int(peek() & 3)
				pos += 2
				if nsym+r > maxSym+1 {
					return 0, 0, 0, corrupt("FSE zero run past the last symbol")
				}
				for k := 0; k < r; k++ {
					norm[nsym] = 0
					nsym++
				}
				if r != 3 {
					break
				}
				if pos > 8*len(in) {
					return 0, 0, 0, corrupt("truncated FSE table description")
				}
			}
		}
		for remaining < threshold {
			nb--
			threshold >>= 1
		}
		if pos > 8*len(in) {
			return 0, 0, 0, corrupt("truncated FSE table description")
		}
	}
	if remaining != 1 {
		return 0, 0, 0, corrupt("FSE probabilities do not add up")
	}
	return nsym, accLog, (pos + 7) >> 3, nil
}

// buildFSE fills dst[:1<<accLog] with the decoding table for the normalized
// counts norm[:nsym] (which readNormCounts checked add up to 1<<accLog).
func buildFSE(dst []fseEntry, norm []int16, nsym int, accLog uint8) error {
	size := 1 << accLog
	dst = dst[:size]
	high := size - 1
	var next [256]uint16
	for s := 0; s < nsym; s++ {
		if norm[s] == -1 {
			dst[high].sym = uint8(s)
			high--
			next[s] = 1
		} else {
			next[s] = uint16(norm[s])
		}
	}
	step := size>>1 + size>>3 + 3
	mask := size - 1
	pos := 0
	for s := 0; s < nsym; s++ {
		for i := int16(0); i < norm[s]; i++ {
			dst[pos].sym = uint8(s)
			pos = (pos + step) & mask
			for pos > high {
				pos = (pos + step) & mask
			}
		}
	}
	if pos != 0 {
		return corrupt("bad FSE distribution")
	}
	for u := range dst {
		s := dst[u].sym
		ns := next[s]
		next[s]++
		nb := accLog + 1 - uint8(bits.Len16(ns))
		dst[u].nbBits = nb
		dst[u].newState = ns<<nb - uint16(size)
	}
	return nil
}
