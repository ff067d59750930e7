// SPDX-License-Identifier: GPL-2.0
//
// Interpreted frames at sample time: what the runtimes' parts share.
// Included by unwind.bpf.c after its native walk; each runtime's part
// (python.h, lua.h, ruby.h) finds the sampled thread's interpreter frames
// from its own per-process description and records them here, as
// (code object, check word, offset) triples that user space names, each
// with the native activation (entry frame) that runs it. One stack of
// interpreted frames is kept per native stack, by the runtime that found
// frames first.

#define I_MAX_FRAMES 128 // interpreted frames kept per stack

// Which part walked a stack (istack.kind).
#define I_KIND_PYTHON 1
#define I_KIND_LUA 2
#define I_KIND_RUBY 3

// Why a part's walk stopped (istack.end).
#define I_END_COMPLETE 0
#define I_END_UNREADABLE 1
#define I_END_DEPTH 2
#define I_END_NO_THREAD 3 // no interpreter state for the thread
#define I_END_TRACE 4     // LuaJIT: inside a compiled trace, whose inlined frames are not on the Lua stack

// One interpreted frame: its code object (or function), a word that lets
// user space check that the object at that address is still the one that
// ran (a freed object's memory is reused), and an offset or flags.
struct iframe {
	__u64 code;
	__u64 check;
	__u32 off;
	__u16 act;   // activation, 0 the innermost
	__u16 flags; // the part's own
};

struct istack {
	__u32 n;
	__u8 end;    // I_END_*
	__u8 acts;   // activations found on the native stack
	__u8 kind;   // I_KIND_*
	__u8 _pad;
	struct iframe f[I_MAX_FRAMES];
};

// Keyed like stacks (the key hashes the interpreted frames too); user
// space deletes what it read.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STACKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct istack);
} istacks SEC(".maps");

// The walk's interpreted stack, before it is stored with its native one.
struct iwalk {
	__u64 cur;   // the part's cursor (the next frame to read)
	__u64 limit; // ... and where its frames end (0: unknown)
	__u8 has;    // an interpreted stack is in is
	__u8 _pad[7];
	struct istack is;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iwalk);
} iscratch SEC(".maps");

// When each interpreter process was last asked to read its thread list
// again.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} iasked SEC(".maps");

// i_notify asks user space to read process tgid's interpreter thread
// states again (notice kind 3), at most every 100 ms per process.
static __always_inline void i_notify(__u32 tgid)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *last = bpf_map_lookup_elem(&iasked, &tgid);
	if (last && now - *last < 100000000ULL)
		return;
	bpf_map_update_elem(&iasked, &tgid, &now, BPF_ANY);
	struct notice n = {.pid = tgid, .kind = 3};
	if (bpf_ringbuf_output(&notices, &n, sizeof(n), 0) != 0)
		bump(3);
}

static __always_inline int i_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

// i_push records one frame; false when the stack is full (end set).
static __always_inline bool i_push(struct walk *w, struct iwalk *iw, __u64 code, __u64 check, __u32 off, __u16 act, __u16 flags)
{
	__u32 n = iw->is.n;
	if (n >= I_MAX_FRAMES) {
		iw->is.end = I_END_DEPTH;
		return false;
	}
	struct iframe *f = &iw->is.f[n & (I_MAX_FRAMES - 1)];
	f->code = code;
	f->check = check;
	f->off = off;
	f->act = act;
	f->flags = flags;
	iw->is.n = n + 1;
	w->hash = (w->hash ^ code ^ ((__u64)off << 20) ^ ((__u64)flags << 52)) * 0x100000001b3ULL;
	return true;
}

// i_begin starts an interpreted stack of kind with acts activations.
static __always_inline void i_begin(struct iwalk *iw, __u8 kind, __u32 acts)
{
	iw->has = 1;
	iw->is.n = 0;
	iw->is.end = I_END_COMPLETE;
	iw->is.kind = kind;
	iw->is.acts = acts > 255 ? 255 : acts;
}

// i_finish mixes the end and kind into the native stack's hash.
static __always_inline void i_finish(struct walk *w, struct iwalk *iw)
{
	w->hash = (w->hash ^ 0x5079 ^ iw->is.end ^ ((__u64)iw->is.kind << 8)) * 0x100000001b3ULL;
}

struct i_count_ctx {
	struct walk *w;
	__u64 start, end;
	__u64 start2, end2;
	__u32 acts;
};

static long i_count_one(__u32 i, struct i_count_ctx *c)
{
	if (!c->w || i >= c->w->st.n)
		return 1;
	__u64 pc = c->w->st.pcs[i & (MAX_FRAMES - 1)];
	if ((pc >= c->start && pc < c->end) || (pc >= c->start2 && pc < c->end2))
		c->acts++;
	return 0;
}

// i_count returns how many native frames of w lie in [start, end) or
// [start2, end2): the activations of an interpreter whose entry function
// is there (the second range: a body the compiler split out of it).
static __always_inline __u32 i_count(struct walk *w, __u64 start, __u64 end, __u64 start2, __u64 end2)
{
	struct i_count_ctx cc = {.w = w, .start = start, .end = end, .start2 = start2, .end2 = end2};
	if (start < end)
		bpf_loop(MAX_FRAMES, i_count_one, &cc, 0);
	return cc.acts;
}

// i_store keeps the interpreted frames walked for the stack stored at key.
static __always_inline void i_store(__u64 key)
{
	__u32 zero = 0;
	struct iwalk *iw = bpf_map_lookup_elem(&iscratch, &zero);
	if (!iw || !iw->has)
		return;
	// A stack kept already has these frames (its key hashes them): not
	// copied again.
	long r = bpf_map_update_elem(&istacks, &key, &iw->is, BPF_NOEXIST);
	if (r != 0 && r != -17) // -EEXIST
		bump(1);
}
