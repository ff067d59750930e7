// SPDX-License-Identifier: GPL-2.0
//
// Ruby 3.x frames at sample time, included by unwind.bpf.c with the
// other runtime parts (interp.h).
//
// Ruby runs its methods' frames on a thread's VM stack: control frames
// laid down from the stack's end, the innermost at ec->cfp. The native
// stack shows one activation of the VM's entry (rb_vm_exec: user space
// gives its range per process, `rbprocs`) for each time C called into
// Ruby; the control frame that such an entry pushed carries the FINISH
// flag, so the frames after it are the next activation's. User space
// keeps tid -> rb_thread_t in `rbthreads` (read from the VM's thread list
// when it describes the process, and when this program meets a thread it
// has none for: i_notify); the execution context is read from the thread
// at sample time (a Fiber switches it). Each control frame is recorded as
// (iseq, pc, flags), a C method's as (method entry, 0, flags): user space
// names them from the iseqs' line tables (package ruby).

#define RB_MAX_STEPS 160 // control frames followed

#define RB_FLAG_FINISH 0x0020         // VM_FRAME_FLAG_FINISH
#define RB_MAGIC_MASK 0x7fff0001      // VM_FRAME_MAGIC_MASK
#define RB_MAGIC_CFUNC 0x55550001     // VM_FRAME_MAGIC_CFUNC

struct rb_proc {
	__u64 entry_start, entry_end; // rb_vm_exec
	__u32 th_ec;                  // rb_thread_t.ec
	__s32 th_tid;                 // rb_thread_t's kernel thread id (-1: not kept)
	__u32 ec_stack, ec_stack_size, ec_cfp; // rb_execution_context_t
	__u32 cfp_size, cfp_pc, cfp_iseq, cfp_ep; // rb_control_frame_t
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct rb_proc);
} rbprocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u64);
} rbthreads SEC(".maps");

struct rb_ctx {
	struct walk *w;
	struct iwalk *iw;
	struct rb_proc *rp;
	__u32 act;
};

static long rb_step(__u32 i, struct rb_ctx *c)
{
	struct iwalk *iw = c->iw;
	struct rb_proc *rp = c->rp;
	if (!iw || !rp || !c->w)
		return 1;
	__u64 cfp = iw->cur;
	if (cfp + rp->cfp_size > iw->limit)
		return 1; // the end of the control frames
	__u64 pc = 0, iseq = 0, ep = 0, flags = 0;
	if (i_read(&pc, 8, cfp + rp->cfp_pc) || i_read(&iseq, 8, cfp + rp->cfp_iseq) ||
	    i_read(&ep, 8, cfp + rp->cfp_ep) || ep == 0 || i_read(&flags, 8, ep)) {
		iw->is.end = I_END_UNREADABLE;
		return 1;
	}
	iw->cur = cfp + rp->cfp_size;
	if ((flags & RB_MAGIC_MASK) == RB_MAGIC_CFUNC) {
		// A C method: its method entry is in ep[-2] (VM_ENV_DATA_INDEX_ME_CREF).
		__u64 me = 0;
		if (i_read(&me, 8, ep - 16)) {
			iw->is.end = I_END_UNREADABLE;
			return 1;
		}
		if (!i_push(c->w, iw, me, 0, (__u32)flags, c->act, 1))
			return 1;
	} else if (iseq != 0 && pc != 0) {
		if (!i_push(c->w, iw, iseq, pc, (__u32)flags, c->act, 0))
			return 1;
	}
	if (flags & RB_FLAG_FINISH) {
		c->act++;
		if (c->act >= iw->is.acts)
			return 1;
	}
	return 0;
}

// rb_walk_stack walks the current thread's Ruby frames into iw when the
// native stack in w runs the VM.
static __always_inline void rb_walk_stack(struct walk *w, struct iwalk *iw)
{
	__u32 tgid = w->tgid;
	struct rb_proc *rp = bpf_map_lookup_elem(&rbprocs, &tgid);
	if (!rp)
		return;
	__u32 acts = i_count(w, rp->entry_start, rp->entry_end, 0, 0);
	if (acts == 0)
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	i_begin(iw, I_KIND_RUBY, acts);
	__u64 *known = bpf_map_lookup_elem(&rbthreads, &tid);
	__u64 th = known ? *known : 0;
	__s32 ktid = 0;
	__u64 ec = 0, stack = 0, size = 0, cfp = 0;
	if (th == 0 || (rp->th_tid >= 0 && (i_read(&ktid, 4, th + (__u32)rp->th_tid) || ktid != (__s32)tid)) ||
	    i_read(&ec, 8, th + rp->th_ec) || ec == 0) {
		iw->is.end = I_END_NO_THREAD;
		i_notify(tgid);
		i_finish(w, iw);
		return;
	}
	if (i_read(&stack, 8, ec + rp->ec_stack) || i_read(&size, 8, ec + rp->ec_stack_size) ||
	    i_read(&cfp, 8, ec + rp->ec_cfp) || size > (1ULL << 28) || cfp < stack) {
		iw->is.end = I_END_UNREADABLE;
		i_finish(w, iw);
		return;
	}
	iw->cur = cfp;
	iw->limit = stack + size * 8;
	struct rb_ctx c = {.w = w, .iw = iw, .rp = rp};
	bpf_loop(RB_MAX_STEPS, rb_step, &c, 0);
	if (iw->is.end == I_END_COMPLETE && iw->cur + rp->cfp_size <= iw->limit && c.act < iw->is.acts)
		iw->is.end = I_END_DEPTH;
	i_finish(w, iw);
}
