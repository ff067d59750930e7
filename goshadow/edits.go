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
			"\tshadowHits   uintptr\n" +
			"\tshadowPolicy shadowPolicy\n}",
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

// runtimeFiles are the files added to the runtime: name in GOROOT/src/runtime
// and name in the embedded rt directory.
var runtimeFiles = []struct{ name, src string }{
	{"rewind_shadow.go", "rt/shadow.go.txt"},
	{"rewind_shadow_on.go", "rt/shadow_on.go.txt"},
	{"rewind_shadow_off.go", "rt/shadow_off.go.txt"},
	{"rewind_shadow_amd64.s", "rt/shadow_amd64.s.txt"},
	{"rewind_shadow_arm64.s", "rt/shadow_arm64.s.txt"},
}
