package agent

import (
	"os"

	"github.com/rewindstack/rewind/internal/testutil/fuzzcorpus"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

func TestOTLPRoundTrip(t *testing.T) {
	for _, typ := range []string{TypeCPU, TypeOffCPU} {
		b := OTLP(testPeriod(typ))
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(b); err != nil {
			t.Fatal(err)
		}
		got := flatten(req.Profiles())
		if len(got) != 2 {
			t.Fatalf("%s: %d samples, want 2 (two threads' stacks): %+v", typ, len(got), got)
		}
		want := map[string]int64{"work;main": 30, "idle;main": 10}
		for _, s := range got {
			key := strings.Join(s.Funcs, ";")
			if want[key] != s.Value {
				t.Errorf("%s: stack %s value %d, want %d", typ, key, s.Value, want[key])
			}
			if s.Type != typ || s.PID != 42 || s.Exe != "/bin/app" {
				t.Errorf("sample %+v: want type %s, pid 42, /bin/app", s, typ)
			}
			if !reflect.DeepEqual(s.Mappings, []string{"/bin/app 0x1000 abcdef01", "/bin/app 0x1000 abcdef01"}) {
				t.Errorf("mappings %q lack the file offset or build-id", s.Mappings)
			}
			for k, v := range map[string]any{"host.name": "testhost", "container.id": hex64, "process.executable.build_id.gnu": "abcdef01",
				"process.cgroup": "/system.slice/docker-" + hex64 + ".scope"} {
				if s.Resource[k] != v {
					t.Errorf("resource %s = %v, want %v", k, s.Resource[k], v)
				}
			}
		}
	}
}

func TestOTLPNoSymbolize(t *testing.T) {
	p := testPeriod(TypeCPU)
	p.Symbolized = false
	for _, s := range flatten(decodeOTLP(t, OTLP(p))) {
		for i, f := range s.Funcs {
			if !strings.HasPrefix(f, "0x") {
				t.Errorf("frame %d named %q without symbolization", i, f)
			}
		}
		if len(s.Mappings) != len(s.Funcs) {
			t.Errorf("%d of %d frames have a mapping", len(s.Mappings), len(s.Funcs))
		}
	}
}

func TestParseCgroup(t *testing.T) {
	for _, c := range []struct{ in, path, id string }{
		{"0::/system.slice/docker-" + hex64 + ".scope\n", "/system.slice/docker-" + hex64 + ".scope", hex64},
		{"0::/user.slice/user-0.slice/session-1.scope\n", "/user.slice/user-0.slice/session-1.scope", ""},
		{"12:cpu,cpuacct:/kubepods/burstable/pod1/" + hex64 + "\n0::/\n", "/", hex64[:0]},
		{"", "", ""},
		{"garbage", "", ""},
	} {
		p, id := parseCgroup(c.in)
		if p != c.path || id != c.id {
			t.Errorf("parseCgroup(%q) = %q, %q; want %q, %q", c.in, p, id, c.path, c.id)
		}
	}
}

// FuzzParseCgroup: any /proc/PID/cgroup text gives a path and maybe a
// 64-hex-digit container id, never a panic.
func FuzzParseCgroup(f *testing.F) {
	seed := "0::/system.slice/docker-" + hex64 + ".scope\n"
	if _, err := os.Stat("testdata/fuzz/FuzzParseCgroup/seed"); err != nil {
		if err := fuzzcorpus.Write("testdata/fuzz/FuzzParseCgroup", "seed", seed); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, s string) {
		_, id := parseCgroup(s)
		if id != "" && (len(id) != 64 || !isHex(id)) {
			t.Fatalf("container id %q", id)
		}
	})
}
