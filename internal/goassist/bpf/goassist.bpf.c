// SPDX-License-Identifier: GPL-2.0
//
// rewind's Go stack-switch assist for perf samples (x86-64).
//
// A perf sample copies the sampled thread's stack from its SP. On a Go
// thread's system stack (g0: runtime.newstack under runtime.morestack, a
// function runtime.systemstack called) that copy is g0's stack alone: the
// goroutine whose frames lie above the switch left its registers in its g
// (curg.sched), and its frames on its own stack, neither of which the copy
// holds. This program runs on each sample (PERF_EVENT_IOC_SET_BPF on the
// sampling events) before the sample is written and, for a process user
// space described in `procs` whose thread is on g0 (the g in r14, the Go
// ABI's g register, is its m's g0, or still the goroutine while SP is
// off its stack), copies what a walk needs to cross:
// g0's g, the m's g0 and curg words, curg's g and curg's stack from
// curg.sched.sp. The copy goes to `events` with the thread and the time
// (CLOCK_MONOTONIC, the clock the sampling events stamp with), and user
// space lays it beside the sample's stack copy. It never drops a sample.
//
// On arm64 the g register is x28 and the layout is the same; only this
// file's register read would differ.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_user)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)112;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;
static void *(*bpf_get_current_task_btf)(void) = (void *)158;

struct pt_regs {
	unsigned long r14;
	unsigned long sp;
} __attribute__((preserve_access_index));
struct task_struct {
	int pid;
} __attribute__((preserve_access_index));
static struct pt_regs *(*bpf_task_pt_regs)(struct task_struct *task) = (void *)175;

// The perf event program's context (uapi: struct bpf_perf_event_data).
struct bpf_perf_event_data {
	unsigned long regs[21];
	__u64 sample_period;
	__u64 addr;
};

#define MAX_PROCS 4096
#define G_BYTES 256         // of a g copied: its stack bounds, m and sched
#define STACK_BYTES 65536   // of the goroutine's stack copied, at most
#define PAGE 4096

// What user space says of a Go process (internal/goruntime's offsets).
struct goproc {
	__u16 g_m, g_sched_sp, g_stack_lo, g_stack_hi;
	__u16 m_g0, m_curg;
	__u16 g_len; // bytes of a g to copy: past every field above, <= G_BYTES
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__type(key, __u32); // tgid
	__type(value, struct goproc);
} procs SEC(".maps");

// One record; the stack's bytes end it (stack_len of them are sent).
struct record {
	__u32 tid, tgid;
	__u64 time;
	__u64 g, m, curg;
	__u64 m_g0, m_curg; // the words at m + m_g0 and m + m_curg
	__u64 stack_addr;
	__u32 stack_len;
	__u16 g_len;
	__u16 flags; // REC_*
	__u64 sp;    // the sample's user SP: the record's sample is the one with it
	__u8 gbytes[G_BYTES];
	__u8 curgbytes[G_BYTES];
	__u8 stack[STACK_BYTES];
};
#define REC_CURG 1 // curgbytes hold curg's g

// A record per CPU to build the next one in (a per-CPU array's values
// are limited to 32 KiB): user space sizes it to the possible CPUs.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct record);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24); // user space may set another size
} events SEC(".maps");

// Counters user space reads: records sent, records the ring had no room
// for, g0 samples whose g or m could not be read.
enum { ST_SENT, ST_FULL, ST_UNREADABLE, ST_NOT_G, ST_ON_G, ST_N };
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ST_N);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static inline __attribute__((always_inline)) void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&stats, &which);
	if (n)
		*n += 1;
}

static inline __attribute__((always_inline)) int read_word(__u64 addr, __u64 *v)
{
	return bpf_probe_read_user(v, sizeof(*v), (const void *)addr);
}

#define HDR_BYTES __builtin_offsetof(struct record, stack)

SEC("perf_event")
int go_assist(struct bpf_perf_event_data *ctx)
{
	__u64 now = bpf_ktime_get_ns(); // first: as near the sample's own time as can be
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct goproc *gp = bpf_map_lookup_elem(&procs, &tgid);
	if (!gp)
		return 1;
	struct pt_regs *regs = bpf_task_pt_regs(bpf_get_current_task_btf());
	__u64 g = regs->r14;
	if (g == 0 || (g & 7)) {
		count(ST_NOT_G);
		return 1;
	}
	__u64 m, g0, curg;
	if (read_word(g + gp->g_m, &m) || m == 0 || (m & 7)) {
		count(ST_NOT_G);
		return 1; // not a g: C code, or the window before r14 is set
	}
	if (read_word(m + gp->m_g0, &g0) || read_word(m + gp->m_curg, &curg)) {
		count(ST_UNREADABLE);
		return 1;
	}
	if (g != g0) {
		// On a goroutine's stack the sample's copy has what the walk
		// needs, but for the few instructions of runtime.morestack
		// after it moved SP to g0's stack and before r14 follows.
		__u64 lo, hi, sp = regs->sp;
		if (g != curg || read_word(g + gp->g_stack_lo, &lo) || read_word(g + gp->g_stack_hi, &hi) ||
		    (sp >= lo && sp < hi)) {
			count(ST_ON_G);
			return 1;
		}
	}

	__u32 cpu = bpf_get_smp_processor_id();
	struct record *r = bpf_map_lookup_elem(&scratch, &cpu);
	if (!r)
		return 1;
	__u32 glen = gp->g_len;
	if (glen > G_BYTES)
		glen = G_BYTES;
	if (glen < 8)
		glen = 8;
	r->tid = (__u32)id;
	r->tgid = tgid;
	r->g_len = glen;
	r->time = now;
	r->sp = regs->sp;
	r->g = g;
	r->m = m;
	r->curg = curg;
	r->m_g0 = g0;
	r->m_curg = curg;
	r->flags = 0;
	r->stack_addr = 0;
	r->stack_len = 0;
	if (bpf_probe_read_user(r->gbytes, glen, (const void *)g)) {
		count(ST_UNREADABLE);
		return 1;
	}
	if (curg != 0 && curg != g0 && (curg & 7) == 0 &&
	    (curg == g || bpf_probe_read_user(r->curgbytes, glen, (const void *)curg) == 0)) {
		if (curg != g)
			r->flags |= REC_CURG;
		__u64 sp, lo, hi;
		if (read_word(curg + gp->g_sched_sp, &sp) == 0 && read_word(curg + gp->g_stack_lo, &lo) == 0 &&
		    read_word(curg + gp->g_stack_hi, &hi) == 0 && sp >= lo && sp < hi) {
			__u64 n = hi - sp;
			if (n > STACK_BYTES)
				n = STACK_BYTES;
			// The whole span, else what its first page holds (a
			// page further up not faulted in fails the read).
			if (bpf_probe_read_user(r->stack, n, (const void *)sp) != 0) {
				n = PAGE - (sp & (PAGE - 1));
				if (n > STACK_BYTES)
					n = STACK_BYTES;
				if (bpf_probe_read_user(r->stack, n, (const void *)sp) != 0)
					n = 0;
			}
			r->stack_addr = sp;
			r->stack_len = n;
		}
	}
	__u64 size = HDR_BYTES + r->stack_len;
	if (size > sizeof(*r))
		size = sizeof(*r);
	if (bpf_ringbuf_output(&events, r, size, 0) == 0)
		count(ST_SENT);
	else
		count(ST_FULL);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
