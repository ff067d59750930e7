package live

// Reader reads a stopped process's memory during a capture (see
// Options.During).
type Reader struct{ tid int }

// Read is one request of a batch: Buf is filled from Addr, and N is set
// to the number of bytes read (short when an unreadable page ends it).
type Read struct {
	Addr uint64
	Buf  []byte
	N    int
}
