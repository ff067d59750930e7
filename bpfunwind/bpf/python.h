// SPDX-License-Identifier: GPL-2.0
//
// CPython frames at sample time, included by unwind.bpf.c after its walk.
//
// Since 3.11 one _PyEval_EvalFrameDefault activation runs many Python
// calls whose frames live in the heap, not on the native stack. When a
// walked stack holds activations of the evaluation loop (user space gives
// the function's address range per process in `pyprocs`), the thread's
// interpreter frames are walked from its thread state: (code object,
// instruction) pairs (interp.h), innermost first, each marked with the
// activation that runs it, as many activations as the native stack
// shows. User space
// symbolizes them (package cpython) and splices each activation's frames
// above its native frame.
//
// The thread state: user space keeps tid -> thread state in `pythreads`
// (read from the interpreter's thread list when it describes the process,
// again when a Python process's stacks are read, and when this program
// meets a thread it has no state for: notice kind 3, i_notify); 3.11
// also names the thread holding the GIL in
// _PyRuntime.gilstate.tstate_current, which covers threads started since.
// Either is taken only when its native_thread_id is the sampled thread's,
// so a stale entry gives no frames rather than another thread's.

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
	__u64 body_start, body_end; // the loop's body, split out of the function (0: none)
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

#define PY_MAX_STEPS 160 // interpreter frames followed (entry frames too)

struct py_ctx {
	struct walk *w;
	struct iwalk *iw;
	struct py_proc *pp;
	__u32 act;
};

static long py_step(__u32 i, struct py_ctx *c)
{
	struct iwalk *iw = c->iw;
	struct py_proc *pp = c->pp;
	if (!iw || !pp || !c->w)
		return 1;
	__u64 frame = iw->cur;
	if (frame == 0)
		return 1;
	__u64 prev = 0, code = 0, instr = 0;
	__u8 owner = 0, entry = 0;
	if (i_read(&prev, 8, frame + pp->frame_prev) || i_read(&code, 8, frame + pp->frame_code) ||
	    i_read(&owner, 1, frame + pp->frame_owner)) {
		iw->is.end = I_END_UNREADABLE;
		return 1;
	}
	iw->cur = prev;
	if (owner == pp->owner_cstack || owner == pp->owner_cstack2) {
		// The entry frame of an activation (3.12+): the frames after
		// it are the next one's.
		c->act++;
	} else {
		if (i_read(&instr, 8, frame + pp->frame_instr)) {
			iw->is.end = I_END_UNREADABLE;
			return 1;
		}
		code &= ~3ULL; // 3.14 tags its stack references
		__u64 qualname = 0;
		if (i_read(&qualname, 8, code + pp->code_qualname)) {
			iw->is.end = I_END_UNREADABLE;
			return 1;
		}
		if (!i_push(c->w, iw, code, qualname, (__u32)(instr - code), c->act, 0))
			return 1;
		if (pp->frame_is_entry >= 0) {
			if (i_read(&entry, 1, frame + (__u32)pp->frame_is_entry)) {
				iw->is.end = I_END_UNREADABLE;
				return 1;
			}
			if (entry)
				c->act++; // 3.11: this frame entered its activation
		}
	}
	// The activations the native stack shows are all walked.
	if (c->act >= iw->is.acts)
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
		if (ts && i_read(&ntid, 4, ts + pp->ts_tid) == 0 && ntid == tid)
			return ts;
	}
	if (pp->tstate_current && i_read(&ts, 8, pp->tstate_current) == 0 && ts &&
	    i_read(&ntid, 4, ts + pp->ts_tid) == 0 && ntid == tid)
		return ts;
	return 0;
}

// py_walk_stack walks the current thread's Python frames into iw when
// the native stack in w runs the evaluation loop.
static __always_inline void py_walk_stack(struct walk *w, struct iwalk *iw)
{
	__u32 tgid = w->tgid;
	struct py_proc *pp = bpf_map_lookup_elem(&pyprocs, &tgid);
	if (!pp)
		return;
	__u32 acts = i_count(w, pp->eval_start, pp->eval_end, pp->body_start, pp->body_end);
	if (acts == 0)
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	i_begin(iw, I_KIND_PYTHON, acts);
	__u64 ts = py_thread_state(pp, tid);
	__u64 frame = 0;
	if (ts == 0 || i_read(&frame, 8, ts + pp->ts_frame) != 0 ||
	    (pp->via_cframe && frame && i_read(&frame, 8, frame + pp->cframe_current) != 0)) {
		iw->is.end = I_END_NO_THREAD;
		if (ts == 0)
			i_notify(tgid);
		i_finish(w, iw);
		return;
	}
	iw->cur = frame;
	struct py_ctx c = {.w = w, .iw = iw, .pp = pp};
	bpf_loop(PY_MAX_STEPS, py_step, &c, 0);
	if (iw->is.end == I_END_COMPLETE && iw->cur != 0 && c.act < iw->is.acts)
		iw->is.end = I_END_DEPTH;
	i_finish(w, iw);
}
