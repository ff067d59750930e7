// SPDX-License-Identifier: GPL-2.0
//
// CPython frames at sample time, included by unwind.bpf.c after its walk.
//
// Since 3.11 one _PyEval_EvalFrameDefault activation runs many Python
// calls whose frames live in the heap, not on the native stack. When a
// walked stack holds activations of the evaluation loop (user space gives
// the function's address range per process in `pyprocs`), the thread's
// interpreter frames are walked from its thread state: (code object,
// instruction) pairs, innermost first, each marked with the activation
// that runs it, as many activations as the native stack shows. User space
// symbolizes them (package cpython) and splices each activation's frames
// above its native frame.
//
// The thread state: user space keeps tid -> thread state in `pythreads`
// (read from the interpreter's thread list when it describes the process,
// again when a Python process's stacks are read, and when this program
// meets a thread it has no state for: notice kind 3, at most every
// 100 ms per process); 3.11 also names the thread holding the GIL in
// _PyRuntime.gilstate.tstate_current, which covers threads started since.
// Either is taken only when its native_thread_id is the sampled thread's,
// so a stale entry gives no frames rather than another thread's.

#define PY_MAX_FRAMES 128 // Python frames kept per stack
#define PY_MAX_STEPS 160 // interpreter frames followed (entry frames too)

// Where the walk finds what it needs (package cpython's layout).
struct py_proc {
	__u64 eval_start, eval_end; // _PyEval_EvalFrameDefault, runtime addresses
	__u64 tstate_current;       // &_PyRuntime.gilstate.tstate_current (3.11), 0: none
	__u32 ts_tid, ts_frame;     // PyThreadState.native_thread_id, cframe/current_frame
	__u32 cframe_current;       // _PyCFrame.current_frame
	__u32 via_cframe;           // 1: ts_frame is a _PyCFrame (3.11, 3.12)
	__u32 frame_prev, frame_code, frame_instr, frame_owner;
	__s32 frame_is_entry;       // 3.11's is_entry, -1 otherwise
	__u32 code_qualname;        // PyCodeObject.co_qualname
	__u8 owner_cstack, owner_cstack2; // entry frames' owner values (0xff: none)
	__u8 _pad[6];
};

// One Python frame: code object, its co_qualname (so that user space
// sees whether the object at that address is still the one that ran: a
// freed code object's memory is reused) and its instruction pointer's
// distance from the code object in bytes.
struct py_frame {
	__u64 code;
	__u64 qualname;
	__u32 instr;
	__u16 act;   // activation, 0 the innermost
	__u16 _pad;
};

struct py_stack {
	__u32 n;
	__u8 end;    // 0 complete, 1 unreadable, 2 PY_MAX_FRAMES/STEPS reached, 3 no thread state
	__u8 acts;   // activations found on the native stack
	__u8 _pad[2];
	struct py_frame f[PY_MAX_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct py_proc);
} pyprocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u64);
} pythreads SEC(".maps");

// Keyed like stacks (the key hashes the Python frames too); user space
// deletes what it read.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STACKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct py_stack);
} pystacks SEC(".maps");

// When each Python process was last asked to read its thread list again.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} pyasked SEC(".maps");

// py_notify asks user space to read process tgid's thread states again.
static __always_inline void py_notify(__u32 tgid)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *last = bpf_map_lookup_elem(&pyasked, &tgid);
	if (last && now - *last < 100000000ULL)
		return;
	bpf_map_update_elem(&pyasked, &tgid, &now, BPF_ANY);
	struct notice n = {.pid = tgid, .kind = 3};
	if (bpf_ringbuf_output(&notices, &n, sizeof(n), 0) != 0)
		bump(3);
}

struct py_walk {
	__u64 frame;
	__u32 tid;
	__u8 has;    // a Python stack is in ps
	__u8 _pad[3];
	struct py_stack ps;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_walk);
} pyscratch SEC(".maps");

struct py_count_ctx {
	struct walk *w;
	struct py_proc *pp;
	__u32 acts;
};

static long py_count_one(__u32 i, struct py_count_ctx *c)
{
	if (!c->w || !c->pp || i >= c->w->st.n)
		return 1;
	__u64 pc = c->w->st.pcs[i & (MAX_FRAMES - 1)];
	if (pc >= c->pp->eval_start && pc < c->pp->eval_end)
		c->acts++;
	return 0;
}

struct py_ctx {
	struct walk *w;
	struct py_walk *pw;
	struct py_proc *pp;
	__u32 act;
};

static __always_inline int py_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

static long py_step(__u32 i, struct py_ctx *c)
{
	struct py_walk *pw = c->pw;
	struct py_proc *pp = c->pp;
	if (!pw || !pp || !c->w)
		return 1;
	__u64 frame = pw->frame;
	if (frame == 0)
		return 1;
	__u64 prev = 0, code = 0, instr = 0;
	__u8 owner = 0, entry = 0;
	if (py_read(&prev, 8, frame + pp->frame_prev) || py_read(&code, 8, frame + pp->frame_code) ||
	    py_read(&owner, 1, frame + pp->frame_owner)) {
		pw->ps.end = 1;
		return 1;
	}
	pw->frame = prev;
	if (owner == pp->owner_cstack || owner == pp->owner_cstack2) {
		// The entry frame of an activation (3.12+): the frames after
		// it are the next one's.
		c->act++;
	} else {
		if (py_read(&instr, 8, frame + pp->frame_instr)) {
			pw->ps.end = 1;
			return 1;
		}
		__u32 n = pw->ps.n;
		if (n >= PY_MAX_FRAMES) {
			pw->ps.end = 2;
			return 1;
		}
		code &= ~3ULL; // 3.14 tags its stack references
		__u64 qualname = 0;
		if (py_read(&qualname, 8, code + pp->code_qualname)) {
			pw->ps.end = 1;
			return 1;
		}
		struct py_frame *f = &pw->ps.f[n & (PY_MAX_FRAMES - 1)];
		f->code = code;
		f->qualname = qualname;
		f->instr = (__u32)(instr - code);
		f->act = c->act;
		f->_pad = 0;
		pw->ps.n = n + 1;
		c->w->hash = (c->w->hash ^ code ^ (instr << 20)) * 0x100000001b3ULL;
		if (pp->frame_is_entry >= 0) {
			if (py_read(&entry, 1, frame + (__u32)pp->frame_is_entry)) {
				pw->ps.end = 1;
				return 1;
			}
			if (entry)
				c->act++; // 3.11: this frame entered its activation
		}
	}
	// The activations the native stack shows are all walked.
	if (c->act >= pw->ps.acts)
		return 1;
	return 0;
}

// py_thread_state finds the thread state of thread tid (0: none).
static __always_inline __u64 py_thread_state(struct py_proc *pp, __u32 tid)
{
	__u64 ts = 0;
	__u32 ntid = 0;
	__u64 *known = bpf_map_lookup_elem(&pythreads, &tid);
	if (known) {
		ts = *known;
		if (ts && py_read(&ntid, 4, ts + pp->ts_tid) == 0 && ntid == tid)
			return ts;
	}
	if (pp->tstate_current && py_read(&ts, 8, pp->tstate_current) == 0 && ts &&
	    py_read(&ntid, 4, ts + pp->ts_tid) == 0 && ntid == tid)
		return ts;
	return 0;
}

// py_walk_stack walks the current thread's Python frames when the native
// stack in w runs the evaluation loop, and mixes them into w->hash.
static __always_inline void py_walk_stack(struct walk *w)
{
	__u32 zero = 0;
	struct py_walk *pw = bpf_map_lookup_elem(&pyscratch, &zero);
	if (!pw)
		return;
	pw->has = 0;
	__u32 tgid = w->tgid;
	struct py_proc *pp = bpf_map_lookup_elem(&pyprocs, &tgid);
	if (!pp)
		return;
	struct py_count_ctx cc = {.w = w, .pp = pp};
	bpf_loop(MAX_FRAMES, py_count_one, &cc, 0);
	if (cc.acts == 0)
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	pw->has = 1;
	pw->ps.n = 0;
	pw->ps.end = 0;
	pw->ps.acts = cc.acts > 255 ? 255 : cc.acts;
	__u64 ts = py_thread_state(pp, tid);
	__u64 frame = 0;
	if (ts == 0 || py_read(&frame, 8, ts + pp->ts_frame) != 0 ||
	    (pp->via_cframe && frame && py_read(&frame, 8, frame + pp->cframe_current) != 0)) {
		pw->ps.end = 3;
		if (ts == 0)
			py_notify(tgid);
		w->hash = (w->hash ^ 0x5079) * 0x100000001b3ULL;
		return;
	}
	pw->frame = frame;
	struct py_ctx c = {.w = w, .pw = pw, .pp = pp};
	bpf_loop(PY_MAX_STEPS, py_step, &c, 0);
	if (pw->ps.end == 0 && pw->frame != 0 && c.act < pw->ps.acts)
		pw->ps.end = 2;
	w->hash = (w->hash ^ 0x5079 ^ pw->ps.end) * 0x100000001b3ULL;
}

// py_store keeps the Python frames walked for the stack stored at key.
static __always_inline void py_store(__u64 key)
{
	__u32 zero = 0;
	struct py_walk *pw = bpf_map_lookup_elem(&pyscratch, &zero);
	if (!pw || !pw->has)
		return;
	// A stack kept already has these frames (its key hashes them): not
	// copied again.
	long r = bpf_map_update_elem(&pystacks, &key, &pw->ps, BPF_NOEXIST);
	if (r != 0 && r != -17) // -EEXIST
		bump(1);
}
