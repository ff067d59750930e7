package agent

import (
	"context"
	"fmt"
	"net"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rewindstack/rewind/internal/testutil/perftest"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

// buildSleeper compiles testdata/sleeper.c without frame pointers.
func buildSleeper(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("no C compiler: %v", err)
	}
	src, err := filepath.Abs("testdata/sleeper.c")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "sleeper")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

// start runs argv and kills it when the test ends.
func start(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Killed with the test binary too, should it die before its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// testPeriod is a small hand-made period: process 42 ("app", /bin/app)
// with two stacks, main -> work (value 30) and main -> idle (value 10).
func testPeriod(typ string) *Period {
	m := &profiles.Mapping{ID: 1, Start: 0x400000, End: 0x500000, Offset: 0x1000, Path: "/bin/app", BuildID: "abcdef01"}
	loc := func(id, addr uint64, fn, file string, line int) *profiles.Location {
		return &profiles.Location{ID: id, Addr: addr, Mapping: m, Lines: []symbolize.Location{{Function: fn, File: file, Line: line}}}
	}
	lmain, lwork, lidle := loc(1, 0x401000, "main", "app.c", 10), loc(2, 0x402000, "work", "app.c", 20), loc(3, 0x403000, "idle", "app.c", 30)
	p := &profiles.Profile{
		Mappings:  []*profiles.Mapping{m},
		Locations: []*profiles.Location{lmain, lwork, lidle},
		Stacks: []profiles.Stack{
			{PID: 42, TID: 42, Comm: "app", Locations: []*profiles.Location{lwork, lmain}, Value: 10},
			{PID: 42, TID: 42, Comm: "app", Locations: []*profiles.Location{lwork, lmain}, Value: 20},
			{PID: 42, TID: 43, Comm: "app-bg", Locations: []*profiles.Location{lidle, lmain}, Value: 10},
		},
	}
	t0 := time.Unix(1700000000, 0)
	return &Period{Type: typ, Start: t0, End: t0.Add(time.Minute), Profile: p, Symbolized: true, Host: "testhost", Seq: 1,
		Procs: map[int]*ProcInfo{42: {PID: 42, Exe: "/bin/app", Comm: "app", Cgroup: "/system.slice/docker-" + hex64 + ".scope", ContainerID: hex64}}}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// flatSample is one OTLP sample resolved through the dictionary.
type flatSample struct {
	PID      int64
	Type     string
	Exe      string
	Funcs    []string // leaf first
	Files    []string // per frame, its mapping's file name ("" without a mapping)
	Value    int64
	Resource map[string]any
	Mappings []string // "path offset buildid" per location with a mapping
	Start    int64    // the profile's time, Unix nanoseconds
	Duration int64
}

// flatten resolves every sample of ps.
func flatten(ps pprofile.Profiles) []flatSample {
	d := ps.Dictionary()
	str := func(i int32) string {
		if i < 0 || int(i) >= d.StringTable().Len() {
			return "?"
		}
		return d.StringTable().At(int(i))
	}
	var out []flatSample
	for i := 0; i < ps.ResourceProfiles().Len(); i++ {
		rp := ps.ResourceProfiles().At(i)
		res := rp.Resource().Attributes().AsRaw()
		pid, _ := res["process.pid"].(int64)
		exe, _ := res["process.executable.path"].(string)
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			sp := rp.ScopeProfiles().At(j)
			for k := 0; k < sp.Profiles().Len(); k++ {
				pr := sp.Profiles().At(k)
				typ := str(pr.SampleType().TypeStrindex())
				for s := 0; s < pr.Samples().Len(); s++ {
					smp := pr.Samples().At(s)
					fs := flatSample{PID: pid, Type: typ, Exe: exe, Resource: res, Start: int64(pr.Time()), Duration: int64(pr.DurationNano())}
					for v := 0; v < smp.Values().Len(); v++ {
						fs.Value += smp.Values().At(v)
					}
					st := d.StackTable().At(int(smp.StackIndex()))
					for l := 0; l < st.LocationIndices().Len(); l++ {
						loc := d.LocationTable().At(int(st.LocationIndices().At(l)))
						name := fmt.Sprintf("%#x", loc.Address())
						if loc.Lines().Len() > 0 {
							ln := loc.Lines().At(loc.Lines().Len() - 1)
							name = str(d.FunctionTable().At(int(ln.FunctionIndex())).NameStrindex())
						}
						fs.Funcs = append(fs.Funcs, name)
						file := ""
						if mi := loc.MappingIndex(); mi > 0 {
							file = str(d.MappingTable().At(int(mi)).FilenameStrindex())
						}
						fs.Files = append(fs.Files, file)
						if mi := loc.MappingIndex(); mi > 0 {
							m := d.MappingTable().At(int(mi))
							id := ""
							for a := 0; a < m.AttributeIndices().Len(); a++ {
								kv := d.AttributeTable().At(int(m.AttributeIndices().At(a)))
								if str(kv.KeyStrindex()) == "process.executable.build_id.gnu" {
									id = kv.Value().Str()
								}
							}
							fs.Mappings = append(fs.Mappings, fmt.Sprintf("%s %#x %s", str(m.FilenameStrindex()), m.FileOffset(), id))
						}
					}
					out = append(out, fs)
				}
			}
		}
	}
	return out
}

// runningFor returns a context that ends d after its ready function is
// called (Config.Ready: once the events are open), so that a slow start
// (a loaded machine, the race detector) does not shorten the run.
func runningFor(d time.Duration) (ctx context.Context, ready func(), cancel context.CancelFunc) {
	ctx, cancel = context.WithCancel(context.Background())
	return ctx, func() { time.AfterFunc(d, cancel) }, cancel
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func perftestCPU(t *testing.T) string { return perftest.BuildCPU(t, "-fno-omit-frame-pointer") }
