package grpcunary

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

// h2c starts a plain-text HTTP/2 server of h.
func h2c(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func frame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// TestInvoke: the request is gRPC's (HTTP/2 POST to the method, its
// headers, the framed message), the response's message comes back, and the
// connection is reused.
func TestInvoke(t *testing.T) {
	var remotes []string
	c := h2c(t, func(w http.ResponseWriter, r *http.Request) {
		remotes = append(remotes, r.RemoteAddr)
		if r.ProtoMajor != 2 || r.Method != "POST" || r.URL.Path != "/pkg.Svc/M" || r.Header.Get("Content-Type") != "application/grpc" ||
			r.Header.Get("Te") != "trailers" || r.Header.Get("X-Md") != "v" || r.Header.Get("Grpc-Timeout") == "" {
			t.Errorf("request %s %s %s %v", r.Proto, r.Method, r.URL.Path, r.Header)
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) != string(frame([]byte("ping"))) {
			t.Errorf("request body % x", b)
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		w.Write(frame([]byte("pong")))
		w.Header().Set("Grpc-Status", "0")
	})
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := c.Invoke(ctx, "/pkg.Svc/M", map[string]string{"x-md": "v"}, []byte("ping"))
		cancel()
		if err != nil || string(got) != "pong" {
			t.Fatalf("Invoke = %q, %v", got, err)
		}
	}
	if remotes[0] != remotes[1] || remotes[1] != remotes[2] {
		t.Errorf("calls came from %v: the connection was not reused", remotes)
	}
}

// TestInvokeErrors: every failure is an *Error with the code a server
// gave or the failure maps to.
func TestInvokeErrors(t *testing.T) {
	status := func(code, msg string, trailersOnly bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			if !trailersOnly {
				w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
				w.WriteHeader(200)
			}
			w.Header().Set("Grpc-Status", code)
			w.Header().Set("Grpc-Message", msg)
		}
	}
	body := func(ctype string, b []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.Header().Set("Trailer", "Grpc-Status")
			w.Write(b)
			w.Header().Set("Grpc-Status", "0")
		}
	}
	for _, c := range []struct {
		name string
		h    http.HandlerFunc
		code Code
		msg  string
	}{
		{"unavailable in trailers", status("14", "busy%20now", false), Unavailable, "busy now"},
		{"unavailable trailers-only", status("14", "busy", true), Unavailable, "busy"},
		{"unknown code", status("99", "", true), Code(99), "Code(99)"},
		{"no status", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Write(frame(nil))
		}, Internal, "no valid grpc-status"},
		{"bad status", status("x", "", true), Internal, "grpc-status"},
		{"http 503", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", 503) }, Unavailable, "503"},
		{"http 404", http.NotFound, Unimplemented, "404"},
		{"compressed", body("application/grpc", []byte{1, 0, 0, 0, 0}), Internal, "compressed"},
		{"short frame", body("application/grpc", []byte{0, 0, 0, 0, 9, 1}), Internal, "holds"},
		{"two frames", body("application/grpc", append(frame([]byte("a")), frame([]byte("b"))...)), Internal, "holds"},
		{"no frame", body("application/grpc", nil), Internal, "lacks"},
		{"html", body("text/html", frame(nil)), Unknown, "content-type"},
		{"huge", body("application/grpc", frame(make([]byte, MaxResponse))), ResourceExhausted, "larger"},
	} {
		cl := h2c(t, c.h)
		got, err := cl.Invoke(context.Background(), "/pkg.Svc/M", nil, nil)
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), c.code.String()) {
			t.Errorf("%s: %q, %v; want code %v with %q", c.name, got, err, c.code, c.msg)
		}
	}
}

func TestClosedPortAndDeadline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, _ := New(addr)
	_, err = c.Invoke(context.Background(), "/pkg.Svc/M", nil, nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: %v, want Unavailable: connection refused", err)
	}

	hang := make(chan struct{})
	defer close(hang)
	c = h2c(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Invoke(ctx, "/pkg.Svc/M", nil, nil)
	if !errors.As(err, &e) || e.Code != DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("server that hangs: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call ended %v after its 200 ms deadline", d)
	}
}

// lateTimer is a context whose deadline has passed but whose timer has not
// fired yet, as on a machine too busy to run it.
type lateTimer struct{ context.Context }

func (lateTimer) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestResetPastDeadline: a stream the server reset after the call's
// deadline passed failed for the deadline, though the client's context has
// not ended yet; before the deadline, the reset leaves the server
// unavailable.
func TestResetPastDeadline(t *testing.T) {
	reset := errors.New("stream error: stream ID 1; CANCEL; received from peer")
	if e := transportError(lateTimer{context.Background()}, reset); e.Code != DeadlineExceeded {
		t.Errorf("reset past the deadline: %v, want DeadlineExceeded", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if e := transportError(ctx, reset); e.Code != Unavailable {
		t.Errorf("reset before the deadline: %v, want Unavailable", e)
	}
}

func TestNewAddr(t *testing.T) {
	for _, a := range []string{"127.0.0.1:4317", "localhost:1", "[::1]:4317", "collector.example:4317"} {
		if _, err := New(a); err != nil {
			t.Errorf("New(%q): %v", a, err)
		}
	}
	for _, a := range []string{"", "host", "host:", ":4317", "host:0", "host:99999", "http://host:4317", "a/b:1"} {
		if _, err := New(a); err == nil {
			t.Errorf("New(%q) accepted", a)
		}
	}
}

func TestTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{-1: "1n", 30 * time.Second: "30000000u", 2 * time.Minute: "120000m",
		time.Nanosecond: "1n", 1000 * time.Hour: "3600000S"} {
		if got := timeout(d); got != want {
			t.Errorf("timeout(%v) = %s, want %s", d, got, want)
		}
	}
}

// FuzzMessage: any response body gives its message or an error, never a
// panic, and the message is the body's own bytes.
func FuzzMessage(f *testing.F) {
	seeds := [][]byte{frame([]byte("\x0a\x05\x08\x03\x12\x01x")), {1, 0, 0, 0, 0}, {0, 0xff, 0xff, 0xff, 0xff}, nil}
	if _, err := os.Stat("testdata/fuzz/FuzzMessage/seed0"); err != nil {
		for i, s := range seeds {
			if err := fuzzcorpus.Write("testdata/fuzz/FuzzMessage", "seed"+string(rune('0'+i)), s); err != nil {
				f.Fatal(err)
			}
		}
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Message(b)
		if err == nil && (len(m) != len(b)-5 || b[0] != 0) {
			t.Fatalf("message of %d bytes from a body of %d", len(m), len(b))
		}
	})
}
