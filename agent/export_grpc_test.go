package agent

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rewindstack/rewind/internal/grpcunary"
	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
)

// answering is a gRPC OTLP profiles server of grpc-go and pdata that
// answers every export with its function's response.
type answering struct {
	pprofileotlp.UnimplementedGRPCServer
	answer func(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error)
}

func (a *answering) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	return a.answer(ctx, req)
}

func serveGRPC(t *testing.T, answer func(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error)) *GRPC {
	t.Helper()
	lis, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(srv, &answering{answer: answer})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	g, err := NewGRPC(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// TestGRPCExportAnswers: grpc-go's server gets the profiles with the
// development version metadata; its errors and partial successes become
// errors naming the code or the rejected count.
func TestGRPCExportAnswers(t *testing.T) {
	var got []flatSample
	g := serveGRPC(t, func(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if err := pprofileotlp.ValidateDevelopmentVersion(md.Get(pprofileotlp.DevelopmentVersionHeader)); err != nil || len(md.Get(pprofileotlp.DevelopmentVersionHeader)) != 1 {
			t.Errorf("metadata %v: %v", md, err)
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Errorf("no deadline reached the server")
		}
		got = flatten(req.Profiles())
		return pprofileotlp.NewExportResponse(), nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Export(ctx, testPeriod(TypeCPU)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].PID != 42 || got[0].Resource["process.executable.name"] != "app" {
		t.Errorf("received %+v", got)
	}

	g = serveGRPC(t, func(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
		return pprofileotlp.NewExportResponse(), status.Error(codes.Unavailable, "memory limiter: data refused")
	})
	err := g.Export(context.Background(), testPeriod(TypeCPU))
	var e *grpcunary.Error
	if !errors.As(err, &e) || e.Code != grpcunary.Unavailable || !strings.Contains(err.Error(), "code = Unavailable desc = memory limiter: data refused") {
		t.Errorf("server answering UNAVAILABLE: %v", err)
	}

	g = serveGRPC(t, func(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
		r := pprofileotlp.NewExportResponse()
		r.PartialSuccess().SetRejectedProfiles(3)
		r.PartialSuccess().SetErrorMessage("too old")
		return r, nil
	})
	if err := g.Export(context.Background(), testPeriod(TypeCPU)); err == nil || err.Error() != "collector rejected 3 profiles: too old" {
		t.Errorf("partial success: %v", err)
	}

	g = serveGRPC(t, func(ctx context.Context, _ pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
		<-ctx.Done()
		return pprofileotlp.NewExportResponse(), ctx.Err()
	})
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := g.Export(ctx, testPeriod(TypeCPU)); !errors.As(err, &e) || e.Code != grpcunary.DeadlineExceeded {
		t.Errorf("server past the deadline: %v, want DeadlineExceeded", err)
	}
}

func TestGRPCClosedPort(t *testing.T) {
	l, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	g, err := NewGRPC(addr)
	if err != nil {
		t.Fatal(err)
	}
	err = g.Export(context.Background(), testPeriod(TypeCPU))
	if err == nil || !strings.Contains(err.Error(), "code = Unavailable") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: %v", err)
	}
	if _, err := NewGRPC("no-port"); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("NewGRPC(no-port): %v", err)
	}
}

// TestDecodeExportResponse: pdata's responses read as pdata wrote them.
func TestDecodeExportResponse(t *testing.T) {
	for _, c := range []struct {
		rejected int64
		msg      string
	}{{0, ""}, {3, "too old"}, {-1, strings.Repeat("x", 300)}, {1 << 40, ""}} {
		r := pprofileotlp.NewExportResponse()
		r.PartialSuccess().SetRejectedProfiles(c.rejected)
		r.PartialSuccess().SetErrorMessage(c.msg)
		b, err := r.MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		rej, msg, err := decodeExportResponse(b)
		if err != nil || rej != c.rejected || msg != c.msg {
			t.Errorf("%+v: decoded %d, %q, %v", c, rej, msg, err)
		}
	}
}

// FuzzExportResponse: any response message decodes as pdata decodes it,
// or is an error; never a panic.
func FuzzExportResponse(f *testing.F) {
	r := pprofileotlp.NewExportResponse()
	r.PartialSuccess().SetRejectedProfiles(7)
	r.PartialSuccess().SetErrorMessage("rejected")
	seed, _ := r.MarshalProto()
	seeds := [][]byte{seed, {0x0a, 0x02, 0x08, 0x01, 0x1a, 0x00}, {0x0a, 0x80}, {0x09, 1, 2, 3, 4, 5, 6, 7, 8}, nil}
	if _, err := os.Stat("testdata/fuzz/FuzzExportResponse/seed0"); err != nil {
		for i, s := range seeds {
			if err := fuzzcorpus.Write("testdata/fuzz/FuzzExportResponse", "seed"+string(rune('0'+i)), s); err != nil {
				f.Fatal(err)
			}
		}
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rej, msg, err := decodeExportResponse(b)
		want := pprofileotlp.NewExportResponse()
		werr := want.UnmarshalProto(b)
		if err == nil && werr == nil && (rej != want.PartialSuccess().RejectedProfiles() || msg != want.PartialSuccess().ErrorMessage()) {
			t.Fatalf("decoded %d, %q; pdata %d, %q", rej, msg, want.PartialSuccess().RejectedProfiles(), want.PartialSuccess().ErrorMessage())
		}
	})
}
