package goruntime

// Go 1.26 (runtime2.go: g, m, waitReasonStrings in waitReason order).
func table126() *versionTable {
	return &versionTable{
		version: "go1.26",
		g: GOffsets{StackLo: 0, StackHi: 8, SchedSP: 56, SchedPC: 64, SchedBP: 96, SchedLR: 88, SyscallSP: 104, SyscallPC: 112,
			M: 48, Status: 144, Goid: 152, WaitSince: 168, WaitReason: 176, LockedM: 208, ParentGoid: 280,
			GoPC: 288, StartPC: 304, Labels: 352, Size: 456},
		m:      MOffsets{ProcID: 64, CurG: 184, Size: 1824},
		labels: LabelLayout{Supported: true},
		waitReasons: []string{"", "GC assist marking", "IO wait", "dumping heap", "garbage collection",
			"garbage collection scan", "panicwait", "GC assist wait", "GC sweep wait", "GC scavenge wait",
			"finalizer wait", "force gc (idle)", "GOMAXPROCS updater (idle)", "semacquire", "sleep",
			"chan receive (nil chan)", "chan send (nil chan)", "select (no cases)", "select", "chan receive",
			"chan send", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock",
			"sync.WaitGroup.Wait", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)",
			"GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world",
			"flushing proc caches", "trace goroutine status", "trace proc status", "page trace flush",
			"coroutine", "GC weak to strong wait", "synctest.Run", "synctest.Wait", "chan receive (durable)",
			"chan send (durable)", "select (durable)", "sync.WaitGroup.Wait (durable)", "cleanup wait"}}
}

// Go 1.27: the same g offsets and wait reasons as 1.26 (checked against
// go1.27.3's DWARF); runtime.m grew by 8 bytes past the fields read.
func table127() *versionTable {
	t := table126()
	t.version = "go1.27"
	t.m.Size = 1832
	return t
}
