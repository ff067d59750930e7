package goroutines

import (
	"testing"
	"time"

	"github.com/rewindstack/rewind/live"
)

// countBatch fills every read and counts the ranges asked for.
type countBatch struct{ asked int }

func (c *countBatch) ReadBatch(reads []live.Read) {
	for i := range reads {
		reads[i].N = len(reads[i].Buf)
		c.asked++
	}
}

// TestReadBound: a read in the pause stops asking once the pause's bound
// has passed, leaves the rest unread and counts it; before the bound,
// everything is read, in chunks.
func TestReadBound(t *testing.T) {
	mk := func() []live.Read {
		rs := make([]live.Read, 40)
		for i := range rs {
			rs[i] = live.Read{Addr: uint64(i) << 20, Buf: make([]byte, 1<<20)}
		}
		return rs
	}
	var st ReadStats
	inner := &countBatch{}
	r := &statReader{rd: inner, st: &st, deadline: time.Now().Add(-time.Millisecond)}
	rs := mk()
	r.ReadBatch(rs)
	if inner.asked != 0 || st.Unread != 40 || !pastBound(r) {
		t.Errorf("past the bound: %d asked, %d unread, want 0 and 40", inner.asked, st.Unread)
	}
	for _, rd := range rs {
		if rd.N != 0 {
			t.Fatalf("a read past the bound has N %d", rd.N)
		}
	}
	st, inner = ReadStats{}, &countBatch{}
	r = &statReader{rd: inner, st: &st, deadline: time.Now().Add(time.Hour)}
	rs = mk()
	r.ReadBatch(rs)
	if inner.asked != 40 || st.Unread != 0 || pastBound(r) || st.Bytes != 40<<20 {
		t.Errorf("within the bound: %d asked, %d unread, %d bytes", inner.asked, st.Unread, st.Bytes)
	}
}
