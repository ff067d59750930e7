package luajit_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rewindstack/rewind/internal/testutil/fixture"
	"github.com/rewindstack/rewind/output"
)

// embedSource runs NTHREADS pthreads, each with a lua_State of its own
// (luaL_newstate: a global_State each) running a chunk whose function
// worker_K calls the C function park, which writes the thread's id and
// luaL_traceback to the report and blocks in read(2); the main thread
// prints "ready" once all have. LuaJIT is the Debian shared library,
// stripped: found by its dynamic symbols.
const embedSource = `#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NTHREADS 3
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int parked;
static FILE *report;
static int never[2];

static int park(lua_State *L) {
	luaL_traceback(L, L, NULL, 1);
	pthread_mutex_lock(&mu);
	fprintf(report, "thread %ld\n%s\n", (long)syscall(SYS_gettid), lua_tostring(L, -1));
	fflush(report);
	parked++;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	char c;
	for (;;) read(never[0], &c, 1);
	return 0;
}

static void *run(void *arg) {
	long k = (long)arg;
	char chunk[256];
	snprintf(chunk, sizeof chunk,
		"local function inner_%ld() park() end\n"
		"function worker_%ld() inner_%ld() end\n"
		"worker_%ld()\n", k, k, k, k);
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_register(L, "park", park);
	if (luaL_loadbuffer(L, chunk, strlen(chunk), "=embedded") || lua_pcall(L, 0, 0, 0)) {
		fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
		exit(1);
	}
	return NULL;
}

int main(int argc, char **argv) {
	report = fopen(argv[1], "w");
	if (!report || pipe(never)) return 1;
	pthread_t th[NTHREADS];
	for (long k = 0; k < NTHREADS; k++) pthread_create(&th[k], NULL, run, (void *)k);
	pthread_mutex_lock(&mu);
	while (parked < NTHREADS) pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}
`

// TestEmbedded: a C program's pthreads, each with its own lua_State of
// the stripped libluajit-5.1.so, each show their Lua frames: park (the
// C function) and then what luaL_traceback wrote on that thread, live
// and from a gcore core.
func TestEmbedded(t *testing.T) {
	if _, err := os.Stat("/usr/include/luajit-2.1/lua.h"); err != nil {
		t.Skip("no LuaJIT headers (libluajit-5.1-dev): ", err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc: ", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("reading another process's memory needs root")
	}
	dir := t.TempDir()
	src, exe, report := filepath.Join(dir, "embed.c"), filepath.Join(dir, "embed"), filepath.Join(dir, "report")
	if err := os.WriteFile(src, []byte(embedSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-pthread", "-I/usr/include/luajit-2.1", "-o", exe, src, "-lluajit-5.1").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	p := fixture.Start(t, exe, report)
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]luaFrame{}
	for _, part := range strings.Split(string(b), "thread ")[1:] {
		line, rest, _ := strings.Cut(part, "\n")
		tid, err := strconv.Atoi(line)
		if err != nil {
			t.Fatalf("report %q", b)
		}
		tbs := parseTraceback(t, rest)
		if len(tbs) != 1 || len(tbs[0]) == 0 {
			t.Fatalf("thread %d's traceback %q", tid, rest)
		}
		want[tid] = tbs[0]
	}
	if len(want) != 3 {
		t.Fatalf("%d tracebacks, want 3", len(want))
	}
	for name, rep := range dumps(t, p) {
		t.Run(name, func(t *testing.T) { checkEmbedded(t, rep, want) })
	}
}

func checkEmbedded(t *testing.T, rep *output.Report, want map[int][]luaFrame) {
	seen := 0
	for _, th := range rep.Threads {
		w, ok := want[th.TID]
		got := luaFrames(th.Frames)
		if !ok {
			if len(got) > 0 {
				t.Errorf("thread %d runs no Lua, but shows %v", th.TID, got)
			}
			continue
		}
		seen++
		if len(got) == 0 || got[0] != (luaFrame{"park", "[C]", 0}) {
			t.Errorf("thread %d: innermost Lua frame of %v, want park's", th.TID, got)
			continue
		}
		if fmt.Sprint(got[1:]) != fmt.Sprint(w) {
			t.Errorf("thread %d: Lua frames\nrewind         %v\nluaL_traceback %v", th.TID, got[1:], w)
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d Lua threads dumped", seen, len(want))
	}
}
