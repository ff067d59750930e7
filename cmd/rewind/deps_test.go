package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryDeps: the rewind binary does not link gRPC, protobuf, the
// Collector's pdata or pprof's profile package, whose package initializers
// would cost every rewind command its start time (the agent encodes OTLP
// and pprof by hand; the tests still use those packages), nor panicparse,
// the goroutine dumps' test oracle.
func TestBinaryDeps(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	cmd := exec.Command(goCmd, "list", "-deps", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"google.golang.org/grpc", "google.golang.org/protobuf", "go.opentelemetry.io/", "github.com/google/pprof/", "github.com/maruel/panicparse"} {
			if strings.HasPrefix(pkg, bad) {
				t.Errorf("rewind links %s", pkg)
			}
		}
	}
}
