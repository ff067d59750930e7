package goruntime

// Go 1.22 (offsets and wait reasons from the DWARF and data of a go1.22.12 binary).
func table122() *versionTable {
	return &versionTable{
		version: "go1.22",
		g: GOffsets{StackLo: 0, StackHi: 8, SchedSP: 56, SchedPC: 64, SchedBP: 104, SchedLR: 96, SyscallSP: 112, SyscallPC: 120,
			M: 48, Status: 144, Goid: 152, WaitSince: 168, WaitReason: 176, LockedM: 208, ParentGoid: 272,
			GoPC: 280, StartPC: 296, Labels: 344, Size: 424},
		m:           MOffsets{ProcID: 72, CurG: 192, Size: 2024},
		labels:      LabelLayout{Supported: true, Map: true},
		waitReasons: []string{"", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap", "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)", "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait", "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)", "GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world", "flushing proc caches", "trace goroutine status", "trace proc status", "page trace flush", "coroutine"}}
}

// Go 1.23 (offsets and wait reasons from the DWARF and data of a go1.23.12 binary).
func table123() *versionTable {
	return &versionTable{
		version: "go1.23",
		g: GOffsets{StackLo: 0, StackHi: 8, SchedSP: 56, SchedPC: 64, SchedBP: 104, SchedLR: 96, SyscallSP: 112, SyscallPC: 120,
			M: 48, Status: 152, Goid: 160, WaitSince: 176, WaitReason: 184, LockedM: 216, ParentGoid: 280,
			GoPC: 288, StartPC: 304, Labels: 352, Size: 432},
		m:           MOffsets{ProcID: 72, CurG: 192, Size: 1784},
		labels:      LabelLayout{Supported: true, Map: true},
		waitReasons: []string{"", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap", "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)", "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait", "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)", "GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world", "flushing proc caches", "trace goroutine status", "trace proc status", "page trace flush", "coroutine", "GC weak to strong wait"}}
}

// Go 1.24 (offsets and wait reasons from the DWARF and data of a go1.24.13 binary).
func table124() *versionTable {
	return &versionTable{
		version: "go1.24",
		g: GOffsets{StackLo: 0, StackHi: 8, SchedSP: 56, SchedPC: 64, SchedBP: 104, SchedLR: 96, SyscallSP: 112, SyscallPC: 120,
			M: 48, Status: 152, Goid: 160, WaitSince: 176, WaitReason: 184, LockedM: 216, ParentGoid: 280,
			GoPC: 288, StartPC: 304, Labels: 352, Size: 440},
		m:           MOffsets{ProcID: 72, CurG: 192, Size: 1832},
		labels:      LabelLayout{Supported: true},
		waitReasons: []string{"", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap", "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)", "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait", "force gc (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "sync.WaitGroup.Wait", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)", "GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world", "flushing proc caches", "trace goroutine status", "trace proc status", "page trace flush", "coroutine", "GC weak to strong wait", "synctest.Run", "synctest.Wait", "chan receive (synctest)", "chan send (synctest)", "select (synctest)"}}
}

// Go 1.25 (offsets and wait reasons from the DWARF and data of a go1.25.14 binary).
func table125() *versionTable {
	return &versionTable{
		version: "go1.25",
		g: GOffsets{StackLo: 0, StackHi: 8, SchedSP: 56, SchedPC: 64, SchedBP: 96, SchedLR: 88, SyscallSP: 104, SyscallPC: 112,
			M: 48, Status: 144, Goid: 152, WaitSince: 168, WaitReason: 176, LockedM: 208, ParentGoid: 272,
			GoPC: 280, StartPC: 296, Labels: 344, Size: 440},
		m:           MOffsets{ProcID: 64, CurG: 184, Size: 1816},
		labels:      LabelLayout{Supported: true},
		waitReasons: []string{"", "GC assist marking", "IO wait", "chan receive (nil chan)", "chan send (nil chan)", "dumping heap", "garbage collection", "garbage collection scan", "panicwait", "select", "select (no cases)", "GC assist wait", "GC sweep wait", "GC scavenge wait", "chan receive", "chan send", "finalizer wait", "force gc (idle)", "GOMAXPROCS updater (idle)", "semacquire", "sleep", "sync.Cond.Wait", "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock", "sync.WaitGroup.Wait", "trace reader (blocked)", "wait for GC cycle", "GC worker (idle)", "GC worker (active)", "preempted", "debug call", "GC mark termination", "stopping the world", "flushing proc caches", "trace goroutine status", "trace proc status", "page trace flush", "coroutine", "GC weak to strong wait", "synctest.Run", "synctest.Wait", "chan receive (durable)", "chan send (durable)", "select (durable)", "sync.WaitGroup.Wait (durable)", "cleanup wait"}}
}
