package session_test

import (
	"testing"
	"time"

	"github.com/rewindstack/rewind/perfdata"
	"github.com/rewindstack/rewind/session"
)

// countSource counts the waits asked of it, by timeout.
type countSource struct {
	waits map[time.Duration]int
}

func (c *countSource) Wait(timeout time.Duration) bool {
	c.waits[timeout]++
	return false
}

func (c *countSource) Read(func(*perfdata.Record) error) error { return nil }
func (c *countSource) Disable()                                {}

// TestPumpIdle: while Idle says true the loop does not wait to be woken
// by the source (every sample of a Prompt recording would wake it) but
// polls it every IdleInterval; once it says false, it waits.
func TestPumpIdle(t *testing.T) {
	src := &countSource{waits: map[time.Duration]int{}}
	idle := true
	n := 0
	start := time.Now()
	p := &session.Pump{Source: src, Add: func(*perfdata.Record) {}, Idle: func() bool { return idle }, Interval: time.Second,
		Check: func(bool) string {
			n++
			if n == 5 {
				idle = false
			}
			if n == 7 {
				return "done"
			}
			return ""
		}}
	if why := p.Run(); why != "done" {
		t.Fatalf("Run: %q", why)
	}
	if src.waits[0] != 5 || src.waits[time.Second] != 2 {
		t.Errorf("waits by timeout %v, want 5 polls while idle, then 2 waits of the interval", src.waits)
	}
	if d := time.Since(start); d < 5*session.IdleInterval {
		t.Errorf("5 idle reads took %v, want at least %v", d, 5*session.IdleInterval)
	}
}
