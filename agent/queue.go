package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"
)

// Exporter sends one period's profile somewhere.
type Exporter interface {
	// Name names the exporter in warnings ("otlp grpc 127.0.0.1:4317").
	Name() string
	// Export sends p; an error makes the queue retry it with back-off.
	Export(ctx context.Context, p *Period) error
}

// queue is one exporter's bounded queue of periods: pushing never blocks,
// a full queue drops its oldest period (counted), and a failed send is
// retried with exponential back-off until it succeeds or is dropped.
type queue struct {
	exp  Exporter
	max  int
	warn func(string)

	mu       sync.Mutex
	items    []*Period
	closed   bool
	wake     chan struct{}
	done     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	sent     uint64
	dropped  uint64
	failures uint64
	// warned holds the causes (errCause) of the failures warned about
	// since the last success: each is printed once, however often the
	// export is retried.
	warned map[string]bool

	// minBackoff and maxBackoff bound the delay between retries.
	minBackoff, maxBackoff time.Duration
}

func newQueue(e Exporter, max int, warn func(string)) *queue {
	ctx, cancel := context.WithCancel(context.Background())
	return &queue{exp: e, max: max, warn: warn, wake: make(chan struct{}, 1), done: make(chan struct{}),
		ctx: ctx, cancel: cancel, minBackoff: 250 * time.Millisecond, maxBackoff: 30 * time.Second}
}

// push adds p, dropping the oldest period when the queue is full.
func (q *queue) push(p *Period) {
	q.mu.Lock()
	if len(q.items) >= q.max {
		copy(q.items, q.items[1:])
		q.items = q.items[:len(q.items)-1]
		q.dropped++
	}
	q.items = append(q.items, p)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) stats() (sent, dropped, failures uint64, depth int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent, q.dropped, q.failures, len(q.items)
}

func (q *queue) head() *Period {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// run sends the queue's periods in order until it is closed and empty.
func (q *queue) run() {
	defer close(q.done)
	backoff := q.minBackoff
	for {
		p := q.head()
		if p == nil {
			q.mu.Lock()
			closed := q.closed
			q.mu.Unlock()
			if closed {
				return
			}
			select {
			case <-q.wake:
			case <-q.ctx.Done():
				return
			}
			continue
		}
		ctx, cancel := context.WithTimeout(q.ctx, 30*time.Second)
		err := q.exp.Export(ctx, p)
		cancel()
		q.mu.Lock()
		if err == nil {
			if len(q.items) > 0 && q.items[0] == p {
				q.items = q.items[1:]
			}
			q.sent++
			clear(q.warned)
			backoff = q.minBackoff
			q.mu.Unlock()
			continue
		}
		if q.ctx.Err() != nil {
			// Stopped (wait gave up on it): the period is not sent,
			// and no retry follows.
			q.mu.Unlock()
			return
		}
		q.failures++
		repeat := q.seen(err)
		q.mu.Unlock()
		if !repeat && q.warn != nil {
			q.warn(fmt.Sprintf("%s: %v (retrying with back-off; the queue keeps the newest %d periods)", q.exp.Name(), err, q.max))
		}
		select {
		case <-time.After(backoff):
		case <-q.ctx.Done():
			return
		}
		backoff = min(2*backoff, q.maxBackoff)
	}
}

// maxCauses bounds the causes a queue remembers having warned about.
const maxCauses = 16

// seen reports whether a failure of err's cause was warned about since
// the last success, and records it. q.mu is held.
func (q *queue) seen(err error) bool {
	c := errCause(err)
	if q.warned[c] {
		return true
	}
	if q.warned == nil || len(q.warned) >= maxCauses {
		q.warned = map[string]bool{}
	}
	q.warned[c] = true
	return false
}

// errCause is what a failure's warning is rate-limited by: the system
// error at its root (ENOSPC, ECONNREFUSED) when there is one, and the
// operation that failed with it, without the names and addresses that
// change from one try to the next (every period is written under a new
// file name, every connection comes from a new port); else the message.
func errCause(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + errno.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Op + ": " + errno.Error()
	}
	return errno.Error()
}

// close lets run end once the queue is empty.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// wait waits up to d for run to end, then stops it.
func (q *queue) wait(d time.Duration) {
	select {
	case <-q.done:
	case <-time.After(max(d, 0)):
		q.cancel()
		<-q.done
	}
}
