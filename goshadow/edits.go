package goshadow

// runtimeEdits are the anchored edits to the installed runtime. Each inserts
// text before or after an anchor that must occur exactly once in the file.
var runtimeEdits = []Edit{
	{
		File:   "runtime2.go",
		Anchor: "\tvalgrindStackID uintptr\n}",
		Text: "\tvalgrindStackID uintptr\n\n" +
			"\t// rewind goshadow: the goroutine's software shadow stack (shadow.go).\n" +
			"\tshadowPCs    []uintptr\n" +
			"\tshadowOffs   []uintptr\n" +
			"\tshadowTop    uintptr\n" +
			"\tshadowSlot   uintptr\n" +
			"\tshadowHits   uintptr\n" +
			"\tshadowPolicy shadowPolicy\n" +
			"\tshadowIDs    []uint64  // stack IDs of the cached entries (rewind_shadow_id.go)\n" +
			"\tshadowIDBuf  []uintptr // ShadowStackID's walk buffer\n" +
			"\tshadowMemo   shadowMemo\n}",
		Replace: true,
	},
	{
		// An unwind that starts inside the trampoline (a profiling signal)
		// starts in the caller at its real return address instead.
		File:   "traceback.go",
		Anchor: "\tframe.fn = f\n\n\t// Populate the unwinder.",
		Text: "\tframe.fn = f\n" +
			"\tif shadowIsTrampoline(f.entry()) {\n" +
			"\t\tframe.pc = shadowInnermost(gp, frame.pc, f.entry())\n" +
			"\t\tif usesLR {\n" +
			"\t\t\tframe.lr = 0\n" +
			"\t\t}\n" +
			"\t\tif f = findfunc(frame.pc); !f.valid() {\n" +
			"\t\t\t*u = unwinder{}\n" +
			"\t\t\treturn\n" +
			"\t\t}\n" +
			"\t\tframe.fn = f\n" +
			"\t}\n\n" +
			"\t// Populate the unwinder.",
		Replace: true,
	},
	{
		// A return slot holding the trampoline stands for the real address.
		File:   "traceback.go",
		Anchor: "\n\tframe.varp = frame.fp\n",
		Text: "\n\tif shadowSupported && frame.lr != 0 && frame.lr == shadowTrampolinePC() {\n" +
			"\t\tframe.lr = shadowTopPC(u.g.ptr())\n" +
			"\t}\n",
		Before: true,
	},
	{
		// The execution tracer's frame-pointer walks.
		File:   "tracestack.go",
		Anchor: "\tif nstk > 0 {\n\t\tnstk-- // skip runtime.goexit",
		Text:   "\tif nstk > 1 {\n\t\tshadowFixPCs(gp, pcBuf[1:nstk])\n\t}\n",
		Before: true,
	},
	{
		// The block and mutex profiles' frame-pointer walk (curg's stack).
		File:   "mprof.go",
		Anchor: "\t\tpc := *(*uintptr)(unsafe.Pointer(uintptr(fp) + goarch.PtrSize))\n",
		Text:   "\t\tpc = shadowFixPC(getg().m.curg, pc)\n",
	},
	{
		// The cache is freed with the goroutine.
		File:   "proc.go",
		Anchor: "\tgp.writebuf = nil\n",
		Text:   "\tshadowRelease(gp)\n",
	},
}

// tortureEdits call shadowTortureHook, which (when REWIND_SHADOW_TORTURE=1
// is set) caches the stack and patches the caller's return slot, from
// functions the runtime's own tests use a lot: so those tests run with
// trampolined frames under panics, recovers, tracebacks and GC.
var tortureEdits = []Edit{
	{File: "extern.go", Anchor: "func Callers(skip int, pc []uintptr) int {\n", Text: "\tshadowTortureHook()\n"},
	{File: "mgc.go", Anchor: "func GC() {\n", Text: "\tshadowTortureHook()\n"},
	{File: "mprof.go", Anchor: "func Stack(buf []byte, all bool) int {\n", Text: "\tshadowTortureHook()\n"},
	{
		File:   "panic.go",
		Anchor: "\trunningPanicDefers.Add(1)\n\n\tp.start(sys.GetCallerPC(), unsafe.Pointer(sys.GetCallerSP()))\n",
		Text:   "\tshadowTortureHook()\n",
	},
	{
		File:   "panic.go",
		Anchor: "\tp.deferreturn = true\n\n\tp.start(sys.GetCallerPC(), unsafe.Pointer(sys.GetCallerSP()))\n",
		Text:   "\tshadowTortureHook()\n",
	},
}

// runtimeFiles are the files added to the runtime: name in GOROOT/src/runtime
// and name in the embedded rt directory.
var runtimeFiles = []struct{ name, src string }{
	{"rewind_shadow.go", "rt/shadow.go.txt"},
	{"rewind_shadow_on.go", "rt/shadow_on.go.txt"},
	{"rewind_shadow_off.go", "rt/shadow_off.go.txt"},
	{"rewind_shadow_amd64.s", "rt/shadow_amd64.s.txt"},
	{"rewind_shadow_arm64.s", "rt/shadow_arm64.s.txt"},
	{"rewind_shadow_copy_amd64.go", "rt/copy_amd64.go.txt"},
	{"rewind_shadow_copy_other.go", "rt/copy_other.go.txt"},
	{"rewind_shadow_id.go", "rt/shadowid.go.txt"},
}

// gostackPath is the import path of package gostack, whose ShadowCallers and
// ShadowCallersEager the runtime defines by linkname.
const gostackPath = "github.com/rewindstack/rewind/gostack"

// captureVariants are the copies of rt/callers.go.tmpl the generator writes.
var captureVariants = []struct {
	file, name, self, params, adaptive, build, doc string
}{
	{
		file: "rewind_shadow_callers.go", name: "ShadowCallers", self: "ShadowCallers", params: ", adaptive bool",
		doc: `// ShadowCallers fills pcs with the return addresses of the calling
// goroutine's physical frames, innermost first, read from the frame-pointer
// chain, and returns how many it wrote. skip counts physical frames: 0 is
// ShadowCallers itself (entry 0 is then a PC inside it), 1 its caller, and
// so on. The result equals a plain frame-pointer walk; the goroutine's shadow
// stack makes repeated captures cheaper. The cache starts at the return slot
// of the function entry 0 is in when skip >= 1. If adaptive is false every
// capture caches (the source article's policy); if true a per-goroutine
// policy caches only where it pays.
//
// ShadowCallers exists only in runtimes patched by rewind's goshadow overlay.
//
`,
	},
	{
		file: "rewind_shadow_gostack.go", name: "gostackShadowCallers", self: "gostackShadowCallers", adaptive: "const adaptive = true",
		build: "//go:build arm64\n\n",
		doc:   "// gostackShadowCallers is " + gostackPath + ".ShadowCallers.\n//\n//go:linkname gostackShadowCallers " + gostackPath + ".ShadowCallers\n",
	},
	{
		// On amd64 gostack.ShadowCallers is assembly (rt/shadow_amd64.s.txt)
		// doing the two common cases; it jumps to this copy for the rest.
		file: "rewind_shadow_gostack_amd64.go", name: "shadowCallersGo", self: "gostackShadowCallersEntry", adaptive: "const adaptive = true",
		doc: "// shadowCallersGo is the rest of " + gostackPath + ".ShadowCallers, which\n" +
			"// is assembly on amd64: it jumps here, so this runs as if called directly.\n//\n",
	},
	{
		file: "rewind_shadow_gostack_eager.go", name: "gostackShadowCallersEager", self: "gostackShadowCallersEager", adaptive: "const adaptive = false",
		build: "//go:build amd64 || arm64\n\n",
		doc:   "// gostackShadowCallersEager is " + gostackPath + ".ShadowCallersEager.\n//\n//go:linkname gostackShadowCallersEager " + gostackPath + ".ShadowCallersEager\n",
	},
}
