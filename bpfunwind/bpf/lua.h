// SPDX-License-Identifier: GPL-2.0
//
// LuaJIT 2.1 frames at sample time, included by unwind.bpf.c with the
// other runtime parts (interp.h).
//
// A LuaJIT state runs its Lua frames on its own stack of TValues in the
// heap; the native stack shows one VM frame per activation (C calling
// into Lua: lua_pcall, lua_call, lua_resume). User space gives, per
// process (`luaprocs`), the address of the global_State it found and the
// VM's code range. At sample time the running lua_State is G->cur_L, and
// the base of the innermost frame is
// - G->jit_base inside a compiled trace (G->vmstate >= 0: the trace's
//   number); the frames the trace inlined are not on the Lua stack, so
//   the innermost one shown is the trace's start (flag LUA_F_TRACE);
// - the BASE register (rdx) when the sampled PC is in the interpreter;
// - L->base otherwise (the VM stored it before calling C).
// From the base, each frame's link below it gives its function and either
// the return PC into its caller (a Lua frame, whose call instruction's A
// operand gives the caller's base) or a frame type and size; a C or
// cpcall link ends an activation. Each frame is recorded as (function,
// link, frame type): user space lays the links out again and names the
// frames from the functions' prototypes and bytecode (package luajit).
//
// A sample inside a trace's machine code has no native frame the walk
// can unwind (traces keep no frame pointer nor unwind table): the walk
// starts again from the VM frame that entered the trace (L->cframe),
// after the sampled PC and a frame in the VM standing for that
// activation.

#define LUA_MAX_STEPS 200 // Lua stack frames followed (continuation and vararg links too)

#define LUA_F_TRACE 0x100  // the innermost frame shown runs a compiled trace
#define LUA_F_LEAFPC 0x200 // off holds the innermost frame's bytecode PC (low 32 bits)

struct lua_proc {
	__u64 g;                // global_State
	__u64 vm_start, vm_end; // the VM's code (lj_vm_asm_begin's range)
	__u32 g_cur_l, g_jit_base, g_vmstate;
	__u32 l_base, l_stack, l_cframe;
	__u32 cf_ret, cf_cfa, cf_rbp; // the VM frame: return address, CFA and saved rbp from L->cframe
	__u8 fr2;               // 1: GC64, 64-bit references and two-slot frame links
	__u8 _pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct lua_proc);
} luaprocs SEC(".maps");

// lua_ref reads a GC or memory reference: 8 bytes (GC64, the low 47 bits
// of a tagged value) or 4.
static __always_inline int lua_ref(struct lua_proc *lp, __u64 addr, __u64 *v)
{
	*v = 0;
	if (lp->fr2) {
		if (i_read(v, 8, addr))
			return -1;
		*v &= (1ULL << 47) - 1;
		return 0;
	}
	__u32 r = 0;
	if (i_read(&r, 4, addr))
		return -1;
	*v = r;
	return 0;
}

// lua_running returns the running state's L and whether it runs a trace.
static __always_inline __u64 lua_running(struct lua_proc *lp, bool *trace)
{
	__u64 L = 0;
	__s32 vmstate = -1;
	*trace = false;
	if (lua_ref(lp, lp->g + lp->g_cur_l, &L) || L == 0)
		return 0;
	if (i_read(&vmstate, 4, lp->g + lp->g_vmstate) == 0 && vmstate >= 0)
		*trace = true;
	return L;
}

// lua_pre_walk starts the native walk of a sample inside a trace's
// machine code: the sampled PC, a VM frame for the activation that runs
// the trace, then the VM frame's caller, from L->cframe. It returns the
// frames it pushed.
static __always_inline __u32 lua_pre_walk(struct walk *w, struct proc *p)
{
	__u32 tgid = w->tgid;
	struct lua_proc *lp = bpf_map_lookup_elem(&luaprocs, &tgid);
	if (!lp || !p)
		return 0;
	if (w->pc >= lp->vm_start && w->pc < lp->vm_end)
		return 0;
	__u32 hint = 0;
	struct mapping *m = find_mapping(p, w->pc, &hint);
	if (m && m->file != ANON_FILE)
		return 0;
	bool trace = false;
	__u64 L = lua_running(lp, &trace);
	if (!L || !trace)
		return 0;
	__u64 cf = 0, ret = 0, fp = 0;
	if (i_read(&cf, 8, L + lp->l_cframe) || cf == 0)
		return 0;
	cf &= ~7ULL; // CFRAME_RESUME, CFRAME_UNWIND_FF
	if (i_read(&ret, 8, cf + lp->cf_ret) || i_read(&fp, 8, cf + lp->cf_rbp) || ret == 0)
		return 0;
	w->st.pcs[0] = w->pc;
	w->st.pcs[1] = lp->vm_start + 1;
	w->st.n = 2;
	w->hash = (w->hash ^ w->pc) * 0x100000001b3ULL;
	w->hash = (w->hash ^ (lp->vm_start + 1)) * 0x100000001b3ULL;
	w->pc = ret;
	w->sp = cf + lp->cf_cfa;
	w->fp = fp;
	w->fpreg = 0;
	w->nocache = 1;
	return 2;
}

struct lua_ctx {
	struct walk *w;
	struct iwalk *iw;
	struct lua_proc *lp;
	__u64 stack; // L->stack: no frame below
	__u32 act;
	__u16 flags; // for the next frame pushed
	__u32 off;
};

static long lua_step(__u32 i, struct lua_ctx *c)
{
	struct iwalk *iw = c->iw;
	struct lua_proc *lp = c->lp;
	if (!iw || !lp || !c->w)
		return 1;
	__u64 base = iw->cur;
	__u64 slot = 8;
	__u64 link = base - slot; // the frame's link: PC or type and size
	__u64 fnslot = lp->fr2 ? base - 2 * slot : link;
	if (fnslot <= c->stack) {
		return 1; // the bottom frame (the state's dummy) reached
	}
	__u64 fn = 0, ftsz = 0;
	if (lua_ref(lp, fnslot, &fn)) {
		iw->is.end = I_END_UNREADABLE;
		return 1;
	}
	if (lp->fr2) {
		if (i_read(&ftsz, 8, link)) {
			iw->is.end = I_END_UNREADABLE;
			return 1;
		}
	} else {
		__s32 v = 0;
		if (i_read(&v, 4, link + 4)) {
			iw->is.end = I_END_UNREADABLE;
			return 1;
		}
		ftsz = (__u64)(__s64)v;
	}
	__u32 type = ftsz & 3;
	__u32 typep = ftsz & 7;
	// Every link, vararg and continuation ones too: user space lays the
	// links out again as they were, to name the frames as a dump does.
	// A continuation (a trace stitched over a C function's call, a
	// metamethod) keeps the PC it returns to below its function: its low
	// 32 bits go with it.
	if (typep == 2) {
		__u32 cpc = 0;
		if (i_read(&cpc, 4, lp->fr2 ? base - 3 * slot : base - 2 * slot + 4)) {
			iw->is.end = I_END_UNREADABLE;
			return 1;
		}
		c->off = cpc;
	}
	if (!i_push(c->w, iw, fn, ftsz, c->off, c->act, c->flags | (__u16)typep))
		return 1;
	c->flags = 0;
	c->off = 0;
	__u64 prev;
	if (type == 0) {
		// A Lua frame: the caller's base is below the call slot, which
		// the call instruction (before the return PC) names.
		__u32 ins = 0;
		if (i_read(&ins, 4, ftsz - 4)) {
			iw->is.end = I_END_UNREADABLE;
			return 1;
		}
		prev = base - slot * (1 + lp->fr2 + ((ins >> 8) & 0xff));
	} else {
		if (typep == 1 || typep == 5) // C, cpcall: the activation's first frame
			c->act++;
		prev = base - (ftsz & ~7ULL);
	}
	if (prev >= base || prev <= c->stack) {
		if (prev >= base)
			iw->is.end = I_END_UNREADABLE;
		return 1;
	}
	iw->cur = prev;
	if (c->act >= iw->is.acts)
		return 1;
	return 0;
}

// lua_walk_stack walks the current thread's Lua frames into iw when the
// native stack in w runs LuaJIT's VM.
static __always_inline void lua_walk_stack(struct walk *w, struct iwalk *iw)
{
	__u32 tgid = w->tgid;
	struct lua_proc *lp = bpf_map_lookup_elem(&luaprocs, &tgid);
	if (!lp)
		return;
	__u32 acts = i_count(w, lp->vm_start, lp->vm_end, 0, 0);
	if (acts == 0)
		return;
	i_begin(iw, I_KIND_LUA, acts);
	bool trace = false;
	__u64 L = lua_running(lp, &trace);
	__u64 base = 0, stack = 0;
	if (!L || lua_ref(lp, L + lp->l_stack, &stack)) {
		iw->is.end = I_END_NO_THREAD;
		i_finish(w, iw);
		return;
	}
	struct lua_ctx c = {.w = w, .iw = iw, .lp = lp, .stack = stack};
	__u64 leaf = w->leaf;
	if (trace) {
		c.flags = LUA_F_TRACE;
		if (lua_ref(lp, lp->g + lp->g_jit_base, &base) || base == 0)
			base = 0;
	} else if (leaf >= lp->vm_start && leaf < lp->vm_end) {
		// The interpreter keeps BASE in rdx and the next instruction's
		// PC in rbx.
		base = w->dx;
		c.off = (__u32)w->bx;
		c.flags = LUA_F_LEAFPC;
	}
	if (base == 0 && i_read(&base, 8, L + lp->l_base)) {
		iw->is.end = I_END_UNREADABLE;
		i_finish(w, iw);
		return;
	}
	iw->cur = base;
	bpf_loop(LUA_MAX_STEPS, lua_step, &c, 0);
	i_finish(w, iw);
}
