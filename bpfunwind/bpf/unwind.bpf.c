// SPDX-License-Identifier: GPL-2.0
//
// rewind's in-kernel user-stack unwinder (x86-64).
//
// User space (package bpfunwind) compiles each executable file's unwind
// table (rewind's unwindtable rows, built from .eh_frame/.debug_frame) into
// fixed-size rows in the `rows` array, once per file, and describes every
// traced process's executable mappings in `procs` (address -> file + bias).
// A sample (perf event) or a thread blocking (sched_switch) walks the
// thread's user stack with those rows, up to MAX_FRAMES frames, hashes the
// PCs, keeps the stack in `stacks` and adds 1 (on-CPU) or the nanoseconds
// off CPU (off-CPU) to the active one of two count maps. Nothing per event
// crosses to user space; only "please describe process N" notices do, rate
// limited, through `notices`.
//
// No headers beyond the compiler's: the few kernel types are declared here
// with preserve_access_index, so that CO-RE relocates their fields against
// the running kernel's BTF.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef _Bool bool;
#define true 1
#define false 0

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name
#define __always_inline inline __attribute__((always_inline))
#define NULL ((void *)0)

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC 1

// Helpers, by their stable numbers (uapi/linux/bpf.h).
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_get_stackid)(void *ctx, void *map, __u64 flags) = (void *)27;
static long (*bpf_get_stack)(void *ctx, void *buf, __u32 size, __u64 flags) = (void *)67;
static long (*bpf_probe_read_user)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)112;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;
static void *(*bpf_get_current_task_btf)(void) = (void *)158;
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags) = (void *)181;
static long (*bpf_find_vma)(void *task, __u64 addr, void *callback_fn, void *callback_ctx, __u64 flags) = (void *)180;

// Kernel types, only the fields used; CO-RE finds them by name.
struct pt_regs {
	unsigned long bx;
	unsigned long dx;
	unsigned long r13;
	unsigned long bp;
	unsigned long r10;
	unsigned long ip;
	unsigned long cs;
	unsigned long sp;
} __attribute__((preserve_access_index));

struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int __state;
	unsigned int flags;
	int pid;
	int tgid;
	void *mm;
	struct task_struct *real_parent;
	struct thread_struct thread;
} __attribute__((preserve_access_index));

struct super_block {
	unsigned int s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct vm_area_struct {
	unsigned long vm_start;
	unsigned long vm_end;
	unsigned long vm_flags; // (in an anonymous union since 6.3: CO-RE finds it there)
	unsigned long vm_pgoff;
	struct file *vm_file;
} __attribute__((preserve_access_index));

#define VM_EXEC 0x4

static struct pt_regs *(*bpf_task_pt_regs)(struct task_struct *task) = (void *)175;

// The perf event program's context (uapi: struct bpf_perf_event_data);
// the verifier rewrites these accesses, so no CO-RE here.
struct user_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
struct bpf_perf_event_data {
	struct user_regs regs;
	__u64 sample_period;
	__u64 addr;
};

#define PF_KTHREAD 0x00200000
#define PF_EXITING 0x00000004

// Sizes, documented in package bpfunwind: the most a run may ask for
// (bpfunwind.Sizes sets rows, stacks, counts and kernel stacks at load).
#define MAX_FRAMES 128
#define MAX_MAPS 256      // executable mappings per process
#define MAX_PROCS 8192    // processes described at once
#define MAX_FILES 4096    // files with rows
#define ANON_FILE MAX_FILES // the file of described anonymous executable memory (a JIT's code)
#define MAX_ROWS (3 << 20) // rows of all files (8 bytes each)
#define MAX_RULES (1 << 16) // distinct rules of all files (16 bytes each)
#define MAX_STACKS 32768  // distinct user stacks kept
#define MAX_COUNTS 65536  // distinct (thread, stack) counted per period
#define MAX_KSTACKS 16384 // distinct kernel stacks, in each of two maps

// Rule kinds (bpfunwind/rows.go writes them).
#define CFA_SP 1
#define CFA_FP 2
#define CFA_PLT 3
#define CFA_SIGNAL 4 // x86-64 rt_sigreturn frame: restore from the ucontext at SP
#define CFA_UNSUPPORTED 5
#define CFA_DEREF_FP 6 // CFA = *(FP + off): GCC's stack realignment (DRAP)
#define CFA_REG 7       // CFA = r10 or r13 (DWARF number in the flags' high nibble) + off: DRAP's prologue, leaf frame only
#define CFA_NONE 0

#define REG_SAME 0
#define REG_UNDEFINED 1
#define REG_AT_CFA 2
#define REG_AT_FP 3 // saved at FP + off (DRAP's frame pointer)

#define ROW_ROOT 1   // a thread's entry function: this is the last frame
#define ROW_GOTOP 2  // a Go top frame (runtime.goexit, mstart, mcall; morestack where go_jump does not cross): last frame
#define ROW_GOFP 4   // a Go stack switch (systemstack where go_jump does not cross, gogo, vDSO callers): frame pointers lead back
#define ROW_SIGNAL 8 // a signal restorer without CFI saying so (Go's sigreturn__sigaction)

// End reasons (bpfunwind.End* mirror them).
enum end_reason {
	END_NONE = 0,
	END_ROOT,        // reached a thread root (complete)
	END_RA_UNDEF,    // CFI marks the return address undefined (complete)
	END_ZERO,        // zero return address or frame pointer (outermost)
	END_UNKNOWN_PROC, // the process was not described yet
	END_NO_MAPPING,  // PC outside every described mapping
	END_FILE_NOT_LOADED, // (no longer: a file without rows is walked by frame pointers, st.norows)
	END_UNREADABLE,  // user memory could not be read
	END_UNSUPPORTED, // a rule the BPF walk cannot apply (DWARF expression, ...)
	END_NO_PROGRESS, // SP did not increase
	END_DEPTH,       // MAX_FRAMES reached
	END_BAD_FP,      // frame-pointer fallback found a bad frame pointer
	END_KERNEL_THREAD, // no user stack
};

// A row is where a rule starts; rows share their rules (a compiler's
// million rows have a few thousand distinct ones), so that three times
// as many rows fit in the memory of whole rules per row.
struct row {
	__u32 pc;   // start, in the file's own addresses less the file's base
	__u32 rule; // index in rules
};

struct rule {
	__s32 cfa_off;
	__s32 ra_off;
	__s32 fp_off;
	__u8 cfa;       // CFA_*
	__u8 ra;        // REG_*
	__u8 fp;        // REG_*
	__u8 flags;     // ROW_*; the high nibble: CFA_PLT's threshold, CFA_REG's register
};

struct file_rows {
	__u32 first; // index of the file's first row in rows
	__u32 count; // 0: not loaded
	__u64 base;  // the file address rows' pc are relative to
	// used is when a walk last used the file's rows (CLOCK_MONOTONIC
	// in units of 2^20 ns): user space evicts the least recently used
	// files when the rows map is short of room.
	__u64 used;
};

// A loaded file by device and inode, for mappings not described yet: the
// walk finds the PC's VMA (bpf_find_vma) and its file here.
struct inode_key {
	__u64 dev; // the kernel's s_dev (major << 20 | minor)
	__u64 ino;
};

struct inode_file {
	__u32 file;
	__u32 _pad;
	__s64 delta; // p_vaddr - p_offset of the file's executable segment
};

struct mapping {
	__u64 start, end; // runtime addresses
	__u64 bias;       // runtime = file address + bias
	__u32 file;       // index into files
	__u32 _pad;
};

#define GEN_STALE 0x80000000 // the description was dropped (unmapped): walks found their files through the VMAs

struct proc {
	__u32 n;
	__u32 gen; // user space's count of the process's descriptions; GEN_STALE
	struct mapping m[MAX_MAPS]; // sorted by start, not overlapping
};

struct stack {
	__u32 n;       // PCs
	__u8 end;      // enum end_reason
	__u8 gojump;   // the first frame found at a goroutine's saved registers (go_jump), 0: none
	__u8 norows;   // 1: frame pointers walked a file whose rows were not loaded yet
	__u8 _pad;
	__u32 gen;     // the description the walk used (0: none): user space names the PCs with it
	__u32 _pad2;
	__u64 fpmask[2]; // bit i: frame i was found by frame pointers
	__u64 pcs[MAX_FRAMES];
};

struct count_key {
	__u32 pid, tid;
	__u64 stack;   // hash of the user stack (key of stacks), 0: none
	__s32 kstack;  // kernel stack id, < 0: none
	__u32 kind;    // KIND_*: 0 on-CPU sample, 1 off-CPU interval; KSTACKS1: kstack is in kstacks1
};

#define KIND_OFFCPU 1
#define KSTACKS1 0x100

struct notice {
	__u32 pid;
	__u32 kind; // 1: describe (new, exec, unknown PC), 2: exited
};

struct offstart {
	__u64 ts;
	struct count_key key;
};

struct config {
	__u32 active;   // count map taking adds: 0 or 1
	__u32 filter;   // 1: only processes in pids
	__u64 min_block_ns;
	__u32 period;   // user space's count of map switches
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_ROWS);
	__type(key, __u32);
	__type(value, struct row);
} rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_FILES);
	__type(key, __u32);
	__type(value, struct file_rows);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct proc);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FILES);
	__type(key, struct inode_key);
	__type(value, struct inode_file);
} inodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PROCS);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_STACKS);
	__type(key, __u64);
	__type(value, struct stack);
} stacks SEC(".maps");

// Kernel stacks, in the map of the period they were taken in (the count
// map's twin): user space empties the map of a period once it has read
// its counts, keeping the stacks of blocked intervals still open.
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, MAX_KSTACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} kstacks0 SEC(".maps"), kstacks1 SEC(".maps");

// A count: the sum of the values (1 per sample, or nanoseconds off CPU)
// and the number of events.
struct count {
	__u64 value;
	__u64 events;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_COUNTS);
	__type(key, struct count_key);
	__type(value, struct count);
} counts0 SEC(".maps"), counts1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct offstart);
} offcpu SEC(".maps");

// Counters of what could not be counted: 0 count map full, 1 stacks map
// update failed, 2 off-CPU start map full, 3 notices dropped, 4 kernel
// stacks not kept (their hash bucket was taken: the map is too small).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, __u64);
} errors SEC(".maps");

// Per process, the soonest time (bpf_ktime_get_ns) a walk may ask for it
// to be described again.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} asked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} notices SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

// The user memory words a walk read, for the walk cache (below).
#define UC_READS 32

struct walk {
	__u64 pc, sp, fp;
	__u64 r10, r13; // the sampled registers: known in the leaf frame only
	__u64 bx, dx, leaf; // ... and for the runtime parts (interp.h)
	__u64 fsbase;   // the thread pointer (the Go runtime keeps its g at an offset from it)
	__u32 tgid;
	__u32 mhint; // the mapping of the previous frame (index into the proc's)
	__u64 hash;
	struct mapping vm; // a mapping found through the VMA (end 0: none)
	__u64 vc_start, vc_end; // the VMA bpf_find_vma found last
	__u32 vc_kind;          // ... and what is there (VMA_*)
	__u32 _vpad;
	__u32 nreads;  // words read (UC_READS + 1: more)
	__u32 nocache; // the walk used something the cache cannot check
	__u32 fpreg;   // fp is still the sampled register's value
	__u32 usedfp;  // ... and the walk used it
	__u64 raddr[UC_READS];
	__u64 rval[UC_READS];
	struct stack st;
};

struct vma_ctx {
	__u64 start, end, pgoff, dev, ino, flags;
};

static long vma_cb(void *task, struct vm_area_struct *vma, struct vma_ctx *c)
{
	c->start = vma->vm_start;
	c->end = vma->vm_end;
	c->pgoff = vma->vm_pgoff;
	c->flags = vma->vm_flags;
	struct file *f = vma->vm_file;
	if (!f)
		return 0;
	struct inode *in = f->f_inode;
	if (!in)
		return 0;
	c->ino = in->i_ino;
	struct super_block *sb = in->i_sb;
	if (sb)
		c->dev = sb->s_dev;
	return 0;
}

// What vma_mapping found at a PC without a mapping of its own.
enum {
	VMA_NONE = 0, // no executable memory: not a return address
	VMA_ANON,     // anonymous executable memory (a JIT's code): no rows, ever
	VMA_FILE,     // an executable file not loaded (yet)
};

// vma_mapping finds the mapping of pc through the current task's VMA,
// when the file mapped there is loaded; user space is asked to describe
// the process meanwhile. Otherwise *kind says what is there.
static __always_inline struct mapping *vma_mapping(struct walk *w, __u64 pc, int *kind)
{
	// The VMA found last (bpf_find_vma finds one a run in a perf
	// event's NMI: its lock is let go later, by irq_work), for the
	// frames in the same one.
	if (pc >= w->vc_start && pc < w->vc_end) {
		*kind = w->vc_kind;
		return w->vc_kind == VMA_FILE && w->vm.end != 0 ? &w->vm : NULL;
	}
	struct vma_ctx c = {};
	*kind = VMA_NONE;
	if (bpf_find_vma(bpf_get_current_task_btf(), pc, vma_cb, &c, 0) != 0)
		return NULL;
	w->vc_start = c.start;
	w->vc_end = c.end;
	w->vc_kind = VMA_NONE;
	w->vm.end = 0;
	if (!(c.flags & VM_EXEC))
		return NULL;
	*kind = w->vc_kind = VMA_ANON;
	if (c.ino == 0)
		return NULL;
	*kind = w->vc_kind = VMA_FILE;
	struct inode_key k = {.dev = c.dev, .ino = c.ino};
	struct inode_file *f = bpf_map_lookup_elem(&inodes, &k);
	if (!f)
		return NULL;
	w->vm.start = c.start;
	w->vm.end = c.end;
	w->vm.bias = c.start - c.pgoff * 4096 - f->delta;
	w->vm.file = f->file;
	w->nocache = 1;
	return &w->vm;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk);
} scratch SEC(".maps");

static __always_inline void bump(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&errors, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

// notify asks user space to (re)describe process pid, at most every 10 ms.
static __always_inline void notify(__u32 pid, __u32 kind)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *quiet = bpf_map_lookup_elem(&asked, &pid);
	if (kind == 1 && quiet && now < *quiet)
		return;
	if (kind == 3)
		kind = 1; // an exec or a change of mappings: always told
	// Asked again in 10 ms at the soonest; user space makes that longer
	// for a process it found unchanged.
	__u64 next = now + 10000000ULL;
	bpf_map_update_elem(&asked, &pid, &next, BPF_ANY);
	struct notice n = {.pid = pid, .kind = kind};
	if (bpf_ringbuf_output(&notices, &n, sizeof(n), 0) != 0)
		bump(3);
}

// The binary searches run under bpf_loop, so that the verifier checks one
// step of each once instead of every path through all of them.
struct msearch {
	struct proc *p;
	__u64 key;
	__u32 lo, hi;
};

static long msearch_step(__u32 i, struct msearch *c)
{
	if (c->lo >= c->hi || !c->p)
		return 1;
	__u32 mid = (c->lo + c->hi) / 2;
	if (c->p->m[mid & (MAX_MAPS - 1)].start <= c->key)
		c->lo = mid + 1;
	else
		c->hi = mid;
	return 0;
}

static __always_inline struct mapping *find_mapping(struct proc *p, __u64 pc, __u32 *hint)
{
	// The previous frame's mapping first (a caller is most often in the
	// same file): the mappings are sorted and disjoint, so one that holds
	// pc is the one the search would find.
	__u32 h = *hint;
	if (h < p->n && h < MAX_MAPS) {
		struct mapping *m = &p->m[h & (MAX_MAPS - 1)];
		if (m->start <= pc && pc < m->end)
			return m;
	}
	struct msearch c = {.p = p, .key = pc, .lo = 0, .hi = p->n};
	if (c.hi > MAX_MAPS)
		c.hi = MAX_MAPS;
	bpf_loop(10, msearch_step, &c, 0);
	// c.lo: the first mapping starting after pc.
	if (c.lo == 0 || c.lo > MAX_MAPS)
		return NULL;
	struct mapping *m = &p->m[(c.lo - 1) & (MAX_MAPS - 1)];
	if (pc >= m->end)
		return NULL;
	*hint = c.lo - 1;
	return m;
}

struct rsearch {
	__u32 key;
	__u32 lo, hi;
};

static long rsearch_step(__u32 i, struct rsearch *c)
{
	if (c->lo >= c->hi)
		return 1;
	__u32 mid = c->lo + (c->hi - c->lo) / 2;
	struct row *r = bpf_map_lookup_elem(&rows, &mid);
	if (!r)
		return 1;
	if (r->pc <= c->key)
		c->lo = mid + 1;
	else
		c->hi = mid;
	return 0;
}

// rowcache remembers, per CPU, which row the search found for a file's
// address (a thread blocking in one place walks the same frames each
// time). It is a hint only: a hit is checked against the rows themselves
// (the row starts at or before the address and the next one of the file
// after it), so a slot overwritten halfway by a program interrupting
// this one on the same CPU can cost a search, never give a wrong row.
#define ROWCACHE 1024

struct rowhint {
	__u64 addr;  // file address looked up
	__u32 first; // the file's first row
	__u32 row;   // the row found
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ROWCACHE);
	__type(key, __u32);
	__type(value, struct rowhint);
} rowcache SEC(".maps");

// find_row returns the rule of the file's row holding file address addr,
// NULL where none does.
static __always_inline struct rule *find_row(struct file_rows *f, __u64 faddr)
{
	__u32 first = f->first, end = first + f->count;
	if (faddr < f->base || faddr - f->base > 0xffffffffULL)
		return NULL;
	__u32 addr = (__u32)(faddr - f->base);
	__u32 slot = (__u32)(((faddr ^ ((__u64)first << 32)) * 0x9e3779b97f4a7c15ULL) >> 54) & (ROWCACHE - 1);
	struct rowhint *h = bpf_map_lookup_elem(&rowcache, &slot);
	if (h && h->addr == faddr && h->first == first) {
		__u32 i = h->row;
		if (i >= first && i < end) {
			struct row *r = bpf_map_lookup_elem(&rows, &i);
			if (r && r->pc <= addr) {
				__u32 j = i + 1;
				struct row *nr = j < end ? bpf_map_lookup_elem(&rows, &j) : NULL;
				if (j >= end || (nr && nr->pc > addr))
					return bpf_map_lookup_elem(&rules, &r->rule);
			}
		}
	}
	struct rsearch c = {.key = addr, .lo = first, .hi = end};
	bpf_loop(22, rsearch_step, &c, 0);
	if (c.lo == first)
		return NULL;
	__u32 i = c.lo - 1;
	if (h) {
		h->addr = faddr;
		h->first = first;
		h->row = i;
	}
	struct row *r = bpf_map_lookup_elem(&rows, &i);
	return r ? bpf_map_lookup_elem(&rules, &r->rule) : NULL;
}

// read_u64 reads a word of the walked stack, and notes it for the cache.
static __always_inline int read_u64(struct walk *w, __u64 addr, __u64 *v)
{
	long e = bpf_probe_read_user(v, sizeof(*v), (const void *)addr);
	if (e != 0)
		return e;
	__u32 n = w->nreads;
	if (n < UC_READS) {
		w->raddr[n & (UC_READS - 1)] = addr;
		w->rval[n & (UC_READS - 1)] = *v;
	}
	if (n <= UC_READS)
		w->nreads = n + 1;
	return 0;
}

// Go stack switches (user space's goInfo): a Go thread runs runtime code
// on its system stack (g0) on behalf of the goroutine its m runs (m.curg).
// Where the walk meets runtime.morestack on g0 (it saved the goroutine's
// registers in curg.sched, cleared the frame pointer and called newstack
// there) it continues at curg.sched's pc, sp and bp; where it meets
// runtime.systemstack on g0 (the function it called runs there) it
// continues at systemstack's own frame on the goroutine's stack, at
// curg.sched's sp and bp: as the Go runtime's own traceback does for its
// CPU profiler (unwindJumpStack). The g the thread runs is in its TLS, at
// tls_g from the thread pointer (arm64, not built, keeps it in x28 of the
// user registers); the offsets of the runtime's g and m fields are the
// binary's (internal/goruntime). The crossing is taken only
// when the TLS's g is its m's g0 and m.curg is a goroutine of that m, and
// what curg.sched holds is what the switch saved (for morestack a return
// from a call of it; for systemstack a pc in systemstack_switch). Where
// the scheduler descheduled the goroutine under newstack (m.curg no longer
// it), the walk goes on at morestack to g0's own frames instead: morestack
// called newstack at g0.sched.sp, the label mstart1 left, so mstart0's
// frame is above it, returning to g0.sched.pc (taken when the morestack
// frame is at g0.sched.sp and g0.sched.pc returns from a call of mstart1);
// Go's traceback ends there. runtime.mcall stays a root, as in Go's.
struct go_file {
	// File addresses: runtime.morestack, runtime.systemstack (extents),
	// runtime.systemstack_switch (extent), the entries of morestack,
	// morestack_noctxt and mstart1.
	__u64 ms_lo, ms_hi, ss_lo, ss_hi, sw_lo, sw_hi, ms_entry, msnc_entry, mstart1;
	__s64 tls_g;
	__u16 g_m, g_sched_sp, g_sched_pc, g_sched_bp, g_stack_lo, g_stack_hi, m_g0, m_curg;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FILES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct go_file);
} gofiles SEC(".maps");

// go_jump's results.
#define GO_NONE 0   // not a crossing: the row decides
#define GO_JUMPED 1 // w holds the goroutine's frame
#define GO_ON_G 2   // morestack before its move to g0: the row's rule applies, not the end
#define GO_GONE 3   // morestack on g0 whose goroutine is no longer the thread's (Go's traceback ends there)
#define GO_SYSTEMSTACK 4 // w holds systemstack's frame on the goroutine's stack: its row goes on

static __always_inline int read_user(__u64 addr, __u64 *v)
{
	return bpf_probe_read_user(v, sizeof(*v), (const void *)addr);
}

// call_target returns the file address a direct call (E8 rel32) that
// returns to pc calls, 0 when the instruction before pc is not one.
static __always_inline __u64 call_target(__u64 pc, struct mapping *m)
{
	__u8 code[5];
	if (bpf_probe_read_user(code, sizeof(code), (const void *)(pc - 5)) != 0 || code[0] != 0xe8)
		return 0;
	__s32 rel = (__s32)((__u32)code[1] | (__u32)code[2] << 8 | (__u32)code[3] << 16 | (__u32)code[4] << 24);
	return pc + (__s64)rel - m->bias;
}

// go_g0_label moves the walk at morestack (frame i, on g0 at w->sp) to
// g0's own frames at g0.sched, for a goroutine the scheduler descheduled.
static __always_inline int go_g0_label(struct walk *w, struct mapping *m, struct go_file *gf, __u64 g0, __u32 i)
{
	__u64 pc, sp;
	if (gf->mstart1 == 0 || read_user(g0 + gf->g_sched_pc, &pc) || read_user(g0 + gf->g_sched_sp, &sp) ||
	    sp != w->sp || call_target(pc, m) != gf->mstart1)
		return GO_GONE;
	w->pc = pc;
	w->fp = 0; // (mstart1 saved none: mstart0's rows do not need it)
	w->fpreg = 0;
	if (w->st.gojump == 0)
		w->st.gojump = i + 1;
	return GO_JUMPED;
}

// go_jump crosses from g0 at frame i (in the file at index fi, at file
// address fa of runtime.morestack or runtime.systemstack) to the goroutine:
// for morestack to the goroutine's frame that called it, for systemstack
// to its own frame on the goroutine's stack.
static __always_inline int go_jump(struct walk *w, struct mapping *m, __u32 fi, __u64 fa, __u32 i)
{
	struct go_file *gf = bpf_map_lookup_elem(&gofiles, &fi);
	if (!gf || w->fsbase == 0)
		return GO_NONE;
	bool ms = fa >= gf->ms_lo && fa < gf->ms_hi;
	bool ss = fa >= gf->ss_lo && fa < gf->ss_hi;
	if (!ms && !(ss && i != 0))
		return GO_NONE;
	__u64 g, mp, g0, curg, cm;
	w->nocache = 1; // (the g's fields are not the walked stack's words)
	if (read_user(w->fsbase + gf->tls_g, &g) || g == 0 || read_user(g + gf->g_m, &mp) || mp == 0 ||
	    read_user(mp + gf->m_g0, &g0) || read_user(mp + gf->m_curg, &curg))
		return GO_NONE;
	if (g != g0) {
		// Still the goroutine's: morestack before its move.
		return ms && i == 0 && g == curg ? GO_ON_G : GO_NONE;
	}
	if (curg == 0 || curg == g0 || read_user(curg + gf->g_m, &cm) || cm != mp)
		return ms ? go_g0_label(w, m, gf, g0, i) : GO_NONE;
	__u64 pc, sp, bp, lo, hi;
	if (read_user(curg + gf->g_sched_pc, &pc) || read_user(curg + gf->g_sched_sp, &sp) ||
	    read_user(curg + gf->g_sched_bp, &bp) || read_user(curg + gf->g_stack_lo, &lo) ||
	    read_user(curg + gf->g_stack_hi, &hi) || sp < lo || sp >= hi)
		return ms ? GO_GONE : GO_NONE;
	if (ms) {
		// curg.sched.pc returns from the goroutine's call of
		// morestack (or morestack_noctxt).
		__u64 target = call_target(pc, m);
		if (target == 0 || (target != gf->ms_entry && target != gf->msnc_entry))
			return GO_GONE;
		w->pc = pc;
		w->sp = sp;
		w->fp = bp;
		w->fpreg = 0;
		if (w->st.gojump == 0)
			w->st.gojump = i + 1;
		return GO_JUMPED;
	}
	// gosave_systemstack_switch pointed sched.pc into systemstack_switch
	// (systemstack zeroes sched.sp when it switches back). systemstack's
	// frame is at sched.sp, its frame pointer sched.bp: the row (the frame
	// pointer, ROW_GOFP) finds its caller from there. (Not from the walk's
	// fp: Go's CFI does not say where a function saved its caller's, so
	// the fp the walk carried up from the sample is an inner frame's.)
	if (pc - m->bias < gf->sw_lo || pc - m->bias >= gf->sw_hi)
		return GO_NONE;
	w->sp = sp;
	w->fp = bp;
	w->fpreg = 0;
	if (w->st.gojump == 0)
		w->st.gojump = i + 1;
	return GO_SYSTEMSTACK;
}

// step finds the caller of frame w->st.n - 1; it returns END_NONE to go on.
static __always_inline int step(struct walk *w, struct proc *p, __u32 i)
{
	__u64 pc = w->pc;
	// Return addresses are looked up one byte back (in the call).
	__u64 lookup = i == 0 ? pc : pc - 1;
	struct mapping *m = p ? find_mapping(p, lookup, &w->mhint) : NULL;
	struct rule *r = NULL;
	__u32 fi = 0;
	if (!m) {
		notify(w->tgid, 1);
		int vk;
		m = vma_mapping(w, lookup, &vk);
		if (!m && vk == VMA_NONE)
			return END_NO_MAPPING;
		// Executable memory without rows: a JIT's code (V8 and
		// HotSpot keep frame pointers) or a file not described yet,
		// walked by frame pointers below.
		if (!m) {
			w->nocache = 1;
			if (vk == VMA_FILE)
				w->st.norows = 1;
		}
	}
	if (m && m->file == ANON_FILE) {
		// A JIT's code: frame pointers below.
		w->nocache = 1;
	} else if (m) {
		fi = m->file;
		struct file_rows *f = bpf_map_lookup_elem(&files, &fi);
		if (!f || f->count == 0) {
			// User space loads again a file it evicted when asked
			// about the process (a file queued or too big: asked
			// less often); meanwhile frame pointers, marked.
			notify(w->tgid, 1);
			w->nocache = 1;
			w->st.norows = 1;
		} else {
			// Stored only when it changed: a hot file's cache line
			// is not written by every frame of every CPU.
			__u64 now = bpf_ktime_get_ns() >> 20;
			if (f->used != now)
				f->used = now;
			r = find_row(f, lookup - m->bias);
		}
	}
	__u64 cfa, ra = 0, fp = w->fp;
	bool ong = false;
	if (r && (r->flags & (ROW_GOTOP | ROW_GOFP))) {
		// A Go stack switch on g0: on to the goroutine.
		int g = go_jump(w, m, fi, lookup - m->bias, i);
		if (g == GO_JUMPED)
			return END_NONE;
		if (g == GO_GONE)
			return END_ROOT;
		ong = g == GO_ON_G;
	}
	// A thread's entry or a Go top frame is the last frame, whatever
	// is above it.
	if (r && (r->flags & (ROW_ROOT | ROW_GOTOP)) && !ong)
		return END_ROOT;
	// A Go stack switch crosses to another stack: the frame pointer may
	// be below the stack pointer there.
	bool cross = r && (r->flags & ROW_GOFP);
	__u8 kind = r ? r->cfa : CFA_NONE;
	if (r && (r->flags & ROW_SIGNAL))
		kind = CFA_SIGNAL;
	// The sampled FP is used only where a rule says so (without frame
	// pointers it is any value): the cache compares it only then.
	if (w->fpreg && (kind == CFA_NONE || cross || kind == CFA_FP || kind == CFA_DEREF_FP || r->fp == REG_AT_FP))
		w->usedfp = 1;
	if (kind == CFA_NONE || cross) {
		// No row: frame pointers, marked.
		if (w->fp == 0)
			return END_ZERO;
		if ((!cross && w->fp < w->sp) || (w->fp & 7))
			return END_BAD_FP;
		cfa = w->fp + 16;
		if (read_u64(w, cfa - 8, &ra) || read_u64(w, cfa - 16, &fp))
			return END_UNREADABLE;
		w->fpreg = 0;
		w->st.fpmask[(i >> 6) & 1] |= 1ULL << (i & 63);
		goto next;
	}
	switch (kind) {
	case CFA_SP:
		cfa = w->sp + (__s64)r->cfa_off;
		break;
	case CFA_FP:
		cfa = w->fp + (__s64)r->cfa_off;
		break;
	case CFA_REG:
		if (i != 0)
			return END_UNSUPPORTED;
		w->nocache = 1; // (the cache does not compare r10 and r13)
		cfa = (r->flags >> 4) == 10 ? w->r10 : w->r13;
		cfa += (__s64)r->cfa_off;
		break;
	case CFA_DEREF_FP:
		if (read_u64(w, w->fp + (__s64)r->cfa_off, &cfa))
			return END_UNREADABLE;
		break;
	case CFA_PLT:
		cfa = w->sp + (__s64)r->cfa_off + (((lookup & 15) >= (__u64)(r->flags >> 4)) ? 8 : 0);
		break;
	case CFA_SIGNAL: {
		// SP points at the kernel's ucontext: uc_mcontext at 40; rbp,
		// rsp, rip at 80, 120, 128 in the sigcontext.
		__u64 sp = w->sp;
		if (read_u64(w, sp + 40 + 80, &fp) || read_u64(w, sp + 40 + 120, &cfa) || read_u64(w, sp + 40 + 128, &ra))
			return END_UNREADABLE;
		w->fp = fp;
		w->fpreg = 0;
		w->sp = cfa;
		// The interrupted PC is exact: add 1 so that the next
		// lookup (pc - 1) finds it.
		w->pc = ra + 1;
		return END_NONE;
	}
	default:
		return END_UNSUPPORTED;
	}
	if (r->ra == REG_UNDEFINED)
		return END_RA_UNDEF;
	if (r->ra != REG_AT_CFA)
		return END_UNSUPPORTED;
	if (read_u64(w, cfa + (__s64)r->ra_off, &ra))
		return END_UNREADABLE;
	if (r->fp == REG_AT_CFA) {
		if (read_u64(w, cfa + (__s64)r->fp_off, &fp))
			return END_UNREADABLE;
		w->fpreg = 0;
	} else if (r->fp == REG_AT_FP) {
		if (read_u64(w, w->fp + (__s64)r->fp_off, &fp))
			return END_UNREADABLE;
		w->fpreg = 0;
	} else if (r->fp != REG_SAME) {
		return END_UNSUPPORTED;
	}
next:
	if (ra == 0)
		return END_ZERO;
	if (cfa <= w->sp && !cross)
		return END_NO_PROGRESS;
	w->pc = ra;
	w->sp = cfa;
	w->fp = fp;
	return END_NONE;
}

struct loop_ctx {
	struct walk *w;
	struct proc *p;
};

static long walk_one(__u32 i, struct loop_ctx *c)
{
	struct walk *w = c->w;
	if (!w)
		return 1;
	__u32 n = w->st.n;
	if (n >= MAX_FRAMES) {
		w->st.end = END_DEPTH;
		return 1;
	}
	w->st.pcs[n & (MAX_FRAMES - 1)] = w->pc;
	w->st.n = n + 1;
	w->hash = (w->hash ^ w->pc) * 0x100000001b3ULL;
	int e = step(w, c->p, n);
	if (e != END_NONE) {
		w->st.end = e;
		return 1;
	}
	return 0;
}

#include "interp.h"
#include "python.h"
#include "lua.h"
#include "ruby.h"

// interp_walk walks the sampled thread's interpreted frames (of the
// walk in the scratch), by the first runtime part whose process the
// native stack runs. A global function, so that the verifier checks it
// once, not along every path of the native walk before it.
__attribute__((noinline)) int interp_walk(__u32 tgid)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&scratch, &zero);
	struct iwalk *iw = bpf_map_lookup_elem(&iscratch, &zero);
	if (!w || !iw || w->tgid != tgid)
		return 0;
	iw->has = 0;
	py_walk_stack(w, iw);
	if (!iw->has)
		lua_walk_stack(w, iw);
	if (!iw->has)
		rb_walk_stack(w, iw);
	return 0;
}

// pre_walk lets a runtime part start the native walk of the scratch's
// walk (LuaJIT: a sample in a trace's machine code); global, as
// interp_walk.
__attribute__((noinline)) int pre_walk(__u32 tgid)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&scratch, &zero);
	if (!w || w->tgid != tgid)
		return 0;
	struct proc *p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	return lua_pre_walk(w, p);
}

// interp_proc reports whether process tgid runs an interpreter a part
// walks: its stacks depend on more than the walk cache checks.
static __always_inline bool interp_proc(__u32 tgid)
{
	return bpf_map_lookup_elem(&pyprocs, &tgid) != NULL || bpf_map_lookup_elem(&luaprocs, &tgid) != NULL ||
	       bpf_map_lookup_elem(&rbprocs, &tgid) != NULL;
}

// The walk cache. A thread that blocks again and again in one place
// (a loop around a system call) has its user stack walked to the same
// result every time. The walk is a function of the registers it starts
// from, the words of user memory it reads, and the process's description
// and files' rows: per CPU, a slot per thread (by TID) keeps the last
// off-CPU walk's registers, description generation, the words it read
// (address and value) and the stack's key. A walk starting from the same
// PC, SP and FP, under the same description, that reads every one of
// those words again and finds the same values would make the same steps
// and find the same stack: the key is reused, without the walk. Only
// walks that ended at a thread's root, an undefined return address or a
// zero one (all complete and final) are kept, and only those that found
// every file through the description (rows of a described file never
// change; a description that changes gets a new generation or is marked
// stale), did not use the sampled r10/r13, read at most UC_READS words,
// and were not in a CPython process (whose interpreter frames live in
// heap memory the native walk does not read).
#define UC_SLOTS 128

struct ucache {
	__u32 tid, tgid;
	__u32 gen, nreads;
	__u64 pc, sp, fp;
	__u64 key;
	__u32 usedfp; // fp is compared
	__u32 _pad;
	__u64 raddr[UC_READS];
	__u64 rval[UC_READS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UC_SLOTS);
	__type(key, __u32);
	__type(value, struct ucache);
} ucache SEC(".maps");

struct ucheck {
	struct ucache *c;
	__u32 ok;
};

static long ucheck_one(__u32 i, struct ucheck *k)
{
	struct ucache *c = k->c;
	if (!c || i >= c->nreads || i >= UC_READS) {
		k->ok = 1;
		return 1;
	}
	// (The compiler would drop a mask it can prove redundant, and the
	// verifier wants one.)
	__u32 j = i;
	asm volatile("" : "+r"(j));
	j &= UC_READS - 1;
	__u64 v;
	if (bpf_probe_read_user(&v, sizeof(v), (const void *)c->raddr[j]) != 0 || v != c->rval[j])
		return 1;
	return 0;
}

// ucache_hit returns the key of the stack the cache says a walk from regs
// would find (0: walk).
static __always_inline __u64 ucache_hit(struct ucache *c, struct pt_regs *regs, __u32 tid, __u32 tgid, struct proc *p)
{
	if (!c || !p || c->tid != tid || c->tgid != tgid || c->key == 0 || c->gen != p->gen ||
	    c->pc != regs->ip || c->sp != regs->sp || (c->usedfp && c->fp != regs->bp))
		return 0;
	struct ucheck k = {.c = c};
	bpf_loop(UC_READS + 1, ucheck_one, &k, 0);
	if (!k.ok)
		return 0;
	// The stack may have been evicted since.
	__u64 key = c->key;
	if (!bpf_map_lookup_elem(&stacks, &key))
		return 0;
	return key;
}

static __always_inline void ucache_keep(struct ucache *c, struct walk *w, struct pt_regs *regs, __u32 tid, struct proc *p, __u64 key)
{
	if (!c)
		return;
	c->key = 0;
	if (!p || w->nocache || w->nreads > UC_READS ||
	    (w->st.end != END_ROOT && w->st.end != END_RA_UNDEF && w->st.end != END_ZERO))
		return;
	c->tid = tid;
	c->tgid = w->tgid;
	c->gen = w->st.gen;
	c->nreads = w->nreads;
	c->pc = regs->ip;
	c->sp = regs->sp;
	c->fp = regs->bp;
	c->usedfp = w->usedfp;
	__builtin_memcpy(c->raddr, w->raddr, sizeof(c->raddr));
	__builtin_memcpy(c->rval, w->rval, sizeof(c->rval));
	c->key = key;
}

// walk_user unwinds the current task's user stack from regs into the
// scratch, stores it in stacks and returns its key (0: none).
static __always_inline __u64 walk_user(struct pt_regs *regs, __u32 tgid, __u32 tid, bool cached, __u64 fsbase)
{
	__u32 zero = 0;
	struct walk *w = bpf_map_lookup_elem(&scratch, &zero);
	if (!w)
		return 0;
	struct proc *p = bpf_map_lookup_elem(&procs, &tgid);
	struct ucache *uc = NULL;
	if (cached && p && !interp_proc(tgid)) {
		__u32 slot = tid & (UC_SLOTS - 1);
		uc = bpf_map_lookup_elem(&ucache, &slot);
		__u64 key = ucache_hit(uc, regs, tid, tgid, p);
		if (key)
			return key;
	}
	w->pc = regs->ip;
	w->sp = regs->sp;
	w->fp = regs->bp;
	w->r10 = regs->r10;
	w->r13 = regs->r13;
	w->fsbase = fsbase;
	w->tgid = tgid;
	w->mhint = 0;
	w->hash = 0xcbf29ce484222325ULL;
	w->nreads = 0;
	w->nocache = 0;
	w->fpreg = 1;
	w->usedfp = 0;
	w->st.n = 0;
	w->st.end = END_NONE;
	w->st.gojump = 0;
	w->st.norows = 0;
	w->vc_start = w->vc_end = 0;
	w->vm.end = 0;
	w->st.fpmask[0] = 0;
	w->st.fpmask[1] = 0;
	// An unknown process (new, or just exec'd) is walked through its
	// VMAs while user space describes it.
	if (!p)
		notify(tgid, 1);
	// Stacks of the same PCs walked under different descriptions (a
	// library unmapped and another mapped in its place) are kept apart.
	w->st.gen = p ? p->gen : 0;
	w->bx = regs->bx;
	w->dx = regs->dx;
	w->leaf = regs->ip;
	if (interp_proc(tgid))
		pre_walk(tgid);
	struct loop_ctx c = {.w = w, .p = p};
	bpf_loop(MAX_FRAMES + 1, walk_one, &c, 0);
	if (interp_proc(tgid))
		interp_walk(tgid);
	__u64 key = (((w->hash ^ w->st.gen) * 0x100000001b3ULL) ^ w->st.end) | 1;
	// A stack kept already (its key hashes its PCs, description and end)
	// is not written again: an update of the LRU map takes a free node
	// and copies the whole stack before it finds the key, which cost the
	// off-CPU program more than the walk (a thread blocking 500 times a
	// second in one place walks the same stack each time).
	struct stack *old = bpf_map_lookup_elem(&stacks, &key);
	if (old && old->n == w->st.n && old->end == w->st.end && old->gen == w->st.gen && old->gojump == w->st.gojump && old->norows == w->st.norows &&
	    old->fpmask[0] == w->st.fpmask[0] && old->fpmask[1] == w->st.fpmask[1] && old->pcs[0] == w->st.pcs[0]) {
		i_store(key);
		ucache_keep(uc, w, regs, tid, p, key);
		return key;
	}
	if (bpf_map_update_elem(&stacks, &key, &w->st, BPF_ANY) != 0) {
		bump(1);
		if (uc)
			uc->key = 0;
		return 0;
	}
	i_store(key);
	ucache_keep(uc, w, regs, tid, p, key);
	return key;
}

static __always_inline void *active_counts(struct config **cfgp)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	*cfgp = cfg;
	if (cfg && cfg->active == 1)
		return &counts1;
	return &counts0;
}

static __always_inline void add(void *map, struct count_key *k, __u64 v)
{
	struct count *c = bpf_map_lookup_elem(map, k);
	if (c) {
		__sync_fetch_and_add(&c->value, v);
		__sync_fetch_and_add(&c->events, 1);
		return;
	}
	struct count n = {.value = v, .events = 1};
	if (bpf_map_update_elem(map, k, &n, BPF_NOEXIST) != 0) {
		c = bpf_map_lookup_elem(map, k);
		if (c) {
			__sync_fetch_and_add(&c->value, v);
			__sync_fetch_and_add(&c->events, 1);
		} else {
			bump(0);
		}
	}
}

static __always_inline bool wanted(struct config *cfg, __u32 tgid)
{
	if (!cfg || !cfg->filter)
		return true;
	return bpf_map_lookup_elem(&pids, &tgid) != NULL;
}

#define EEXIST 17

// The kernel-stack cache. The kernel's own stack walk (bpf_get_stackid)
// is most of what the off-CPU program costs, and a thread that blocks
// again and again in one place has the same kernel stack each time. That
// walk (ORC on x86-64) is a function of where it starts and of the return
// addresses it reads: it starts at this program's context, which the
// tracepoint keeps on the thread's kernel stack a fixed distance below
// __schedule's frame, and each step goes from a return address (whose
// unwind entry gives the frame's size) to the next one above it. So per
// CPU, a slot per thread keeps the last walk's stack id and where each of
// its return addresses lay: all but the outermost as words above the
// context, the outermost (into the system-call entry, stored before the
// kernel moved the stack by a random offset, CONFIG_RANDOMIZE_KSTACK_OFFSET)
// as words below the thread's pt_regs. Blocking again with the same
// return address in every one of those places, the thread has the same
// kernel stack: the id is reused, without the walk. The places are found
// by looking for the walk's return addresses (bpf_get_stack, a second
// walk) among the words between the context and pt_regs, and kept only
// when each appears there exactly once and in order, so that a stale copy
// left in a frame's locals cannot stand for one. An id is reused only in
// the period (count map) it was taken in; a thread whose stack changes
// every time has KC_BUILDS entries built a period at most (entries that
// were used do not count).
#define KC_SLOTS 128
#define KC_FRAMES 32 // return addresses an entry checks
#define KC_WORDS 512 // kernel-stack words between the context and pt_regs looked at (4 KB)
#define KC_BUILDS 4

struct kcache {
	__u32 tid, period;
	__u32 n;      // return addresses checked (0: nothing kept)
	__s32 id;     // the stack's id in the period's kernel-stack map
	__u16 wasted; // entries built for tid this period and never used
	__u16 hits;   // uses of this entry
	__u16 top;    // the outermost's place: words below pt_regs
	__u16 one;    // the id is in kstacks1 (a torn read of the config cannot mix maps)
	__u16 off[KC_FRAMES]; // the others' places: words above the context
	__u64 val[KC_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, KC_SLOTS);
	__type(key, __u32);
	__type(value, struct kcache);
} kcache SEC(".maps");

// Kernel stacks the cache gave (per CPU; user space sums them).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kreused SEC(".maps");

struct kscratch {
	// Pointers stored here read back as plain numbers (a privileged
	// program may leak them into a map): the stack is measured with them.
	__u64 ctx, regs;
	__u64 minip, maxip;
	__u32 n, next, bad, _pad;
	__u16 off[KC_FRAMES];
	__u64 ips[KC_FRAMES];
	__u64 win[KC_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kscratch);
} kscratch SEC(".maps");

struct kcheck {
	struct kcache *c;
	struct kscratch *s;
	__u32 base, ok;
};

static long kcheck_one(__u32 i, struct kcheck *k)
{
	struct kcache *c = k->c;
	if (i + 1 >= c->n || i >= KC_FRAMES) {
		k->ok = 1;
		return 1;
	}
	__u32 j = i;
	asm volatile("" : "+r"(j));
	j &= KC_FRAMES - 1;
	__u32 w = c->off[j] - k->base;
	asm volatile("" : "+r"(w));
	w &= KC_WORDS - 1;
	return k->s->win[w] != c->val[j];
}

struct kscan {
	struct kscratch *s;
	__u64 v;
};

static long kmember_one(__u32 k, struct kscan *c)
{
	struct kscratch *s = c->s;
	if (k >= s->n || k >= KC_FRAMES)
		return 1;
	asm volatile("" : "+r"(k));
	if (s->ips[k & (KC_FRAMES - 1)] != c->v)
		return 0;
	s->bad = 1;
	return 1;
}

// kscan_one looks at word i of the window for the walk's return
// addresses: each must be found once, in order.
static long kscan_one(__u32 i, struct kscan *c)
{
	struct kscratch *s = c->s;
	__u32 w = i;
	asm volatile("" : "+r"(w));
	w &= KC_WORDS - 1;
	__u64 v = s->win[w];
	if (v < s->minip || v > s->maxip)
		return 0;
	__u32 next = s->next;
	if (next < KC_FRAMES && next < s->n && s->ips[next] == v) {
		s->off[next] = w;
		s->next = next + 1;
		return 0;
	}
	c->v = v;
	bpf_loop(KC_FRAMES, kmember_one, c, 0);
	return s->bad ? 1 : 0;
}

static long kbounds_one(__u32 i, struct kscan *c)
{
	struct kscratch *s = c->s;
	asm volatile("" : "+r"(i));
	__u64 v = s->ips[i & (KC_FRAMES - 1)];
	if (v < s->minip)
		s->minip = v;
	if (v > s->maxip)
		s->maxip = v;
	return 0;
}

static long kkeep_one(__u32 i, struct kcheck *k)
{
	asm volatile("" : "+r"(i));
	i &= KC_FRAMES - 1;
	k->c->off[i] = k->s->off[i];
	k->c->val[i] = k->s->ips[i];
	return 0;
}

// ctx_regs stores the context's and the thread's pt_regs addresses in s
// as numbers; it returns the words between them (0: not usable).
static __always_inline __u32 ctx_regs(struct kscratch *s, void *ctx, struct pt_regs *regs)
{
	*(volatile __u64 *)&s->ctx = (__u64)ctx;
	*(volatile __u64 *)&s->regs = (__u64)regs;
	__u64 lo = *(volatile __u64 *)&s->ctx, hi = *(volatile __u64 *)&s->regs;
	if (hi <= lo || hi - lo >= KC_WORDS * 8)
		return 0;
	return (hi - lo) / 8;
}

// kstack_cached returns the id the thread's last kernel stack had, when
// the cache shows the current one is the same; -1 otherwise.
static __always_inline long kstack_cached(struct kcache *c, struct kscratch *s, struct config *cfg, __u32 tid, __u32 words, __u16 one)
{
	if (!cfg || c->tid != tid || c->period != cfg->period || c->one != one || c->n == 0 || c->n > KC_FRAMES ||
	    c->top > words)
		return -1;
	__u64 v;
	if (bpf_probe_read_kernel(&v, sizeof(v), (const void *)(s->regs - c->top * 8)) != 0 ||
	    v != c->val[(c->n - 1) & (KC_FRAMES - 1)])
		return -1;
	if (c->n > 1) {
		__u32 lo = c->off[0], hi = c->off[(c->n - 2) & (KC_FRAMES - 1)];
		if (hi < lo || hi >= words)
			return -1;
		__u32 size = (hi - lo + 1) * 8;
		if (size > sizeof(s->win))
			return -1;
		if (bpf_probe_read_kernel(s->win, size, (const void *)(s->ctx + lo * 8)) != 0)
			return -1;
		struct kcheck k = {.c = c, .s = s, .base = lo};
		bpf_loop(KC_FRAMES, kcheck_one, &k, 0);
		if (!k.ok)
			return -1;
	}
	c->hits++;
	return c->id;
}

// kc_build keeps what the cache needs of the stack id just taken.
static __always_inline void kc_build(void *ctx, struct kcache *c, struct kscratch *s, struct config *cfg, __u32 tid, __u32 words, __u16 one, __u64 skip, long id)
{
	if (!cfg)
		return;
	if (c->tid != tid || c->period != cfg->period) {
		c->tid = tid;
		c->period = cfg->period;
		c->wasted = 0;
	} else if (c->n != 0 && c->hits == 0) {
		c->wasted++;
	}
	c->n = 0;
	c->hits = 0;
	if (id < 0 || c->wasted >= KC_BUILDS)
		return;
	long got = bpf_get_stack(ctx, s->ips, sizeof(s->ips), skip);
	if (got <= 0 || got >= (long)sizeof(s->ips)) // (full: maybe cut)
		return;
	__u32 n = (__u64)got / 8;
	s->n = n;
	s->minip = ~0ULL;
	s->maxip = 0;
	struct kscan sc = {.s = s};
	bpf_loop(n, kbounds_one, &sc, 0);
	if (bpf_probe_read_kernel(s->win, (words * 8) & (sizeof(s->win) - 1), (const void *)s->ctx) != 0)
		return;
	s->next = 0;
	s->bad = 0;
	bpf_loop(words, kscan_one, &sc, 0);
	if (s->bad || s->next != n)
		return;
	struct kcheck kc = {.c = c, .s = s};
	bpf_loop(n, kkeep_one, &kc, 0);
	c->top = words - s->off[(n - 1) & (KC_FRAMES - 1)];
	c->one = one;
	c->id = id;
	c->n = n;
}

// kernel_stack returns the current task's kernel stack id in the
// period's map (negative: none), through the kernel-stack cache when
// cached. (Not inlined: the verifier then looks at the user walk after it
// once, rather than once for each way this one went.)
#define KS_ONE 1    // the period's map is kstacks1
#define KS_CACHED 2 // off CPU: use the cache; skip this function's, the program's and the tracepoint's frames

static __attribute__((noinline)) long kernel_stack(void *ctx, struct config *cfg, struct pt_regs *regs, __u32 tid, __u32 flags)
{
	bool cached = flags & KS_CACHED;
	struct kcache *kc = NULL;
	struct kscratch *ks = NULL;
	__u32 words = 0;
	if (cached && regs) {
		__u32 zero = 0, slot = tid & (KC_SLOTS - 1);
		ks = bpf_map_lookup_elem(&kscratch, &zero);
		kc = bpf_map_lookup_elem(&kcache, &slot);
		if (ks && kc && (words = ctx_regs(ks, ctx, regs)) != 0) {
			long id = kstack_cached(kc, ks, cfg, tid, words, flags & KS_ONE);
			if (id >= 0) {
				__u64 *n = bpf_map_lookup_elem(&kreused, &zero);
				if (n)
					(*n)++;
				return id;
			}
		} else {
			kc = NULL;
		}
	}
	long id;
	if (flags & KS_ONE)
		id = bpf_get_stackid(ctx, &kstacks1, cached ? 3 : 0);
	else
		id = bpf_get_stackid(ctx, &kstacks0, cached ? 3 : 0);
	if (id == -EEXIST)
		bump(4);
	if (kc && ks)
		kc_build(ctx, kc, ks, cfg, tid, words, flags & KS_ONE, 3, id);
	return id;
}

// fill_key walks the current task's stacks into k, the kernel stack into
// the period's kernel-stack map; off CPU (cached), through the caches.
static __always_inline void fill_key(void *ctx, struct config *cfg, struct task_struct *task, struct count_key *k, bool cached)
{
	struct pt_regs *regs = bpf_task_pt_regs(task);
	__u32 one = cfg && cfg->active == 1;
	if (one)
		k->kind |= KSTACKS1;
	k->kstack = kernel_stack(ctx, cfg, regs, k->tid, (one ? KS_ONE : 0) | (cached ? KS_CACHED : 0));
	k->stack = 0;
	// A kernel thread has no user stack, nor has an exiting task whose
	// memory is being torn down.
	if (task->flags & (PF_KTHREAD | PF_EXITING))
		return;
	if (!regs)
		return;
	k->stack = walk_user(regs, k->pid, k->tid, cached, task->thread.fsbase);
}

SEC("perf_event")
int on_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct count_key k = {.pid = id >> 32, .tid = (__u32)id};
	if (k.tid == 0)
		return 0; // idle
	struct config *cfg;
	void *counts = active_counts(&cfg);
	if (!wanted(cfg, k.pid))
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	fill_key(ctx, cfg, task, &k, false);
	add(counts, &k, 1);
	return 0; // nothing for the perf ring buffer
}

// sched_switch: the thread going off CPU (the current one) is walked when
// it blocks; the one coming on finishes its interval.
SEC("tp_btf/sched_switch")
int off_cpu(__u64 *ctx)
{
	bool preempt = (bool)ctx[0];
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	struct config *cfg;
	void *counts = active_counts(&cfg);
	__u64 now = bpf_ktime_get_ns();

	__u32 ntid = next->pid;
	struct offstart *os = bpf_map_lookup_elem(&offcpu, &ntid);
	if (os) {
		__u64 d = now - os->ts;
		struct count_key k = os->key;
		bpf_map_delete_elem(&offcpu, &ntid);
		if (!cfg || d >= cfg->min_block_ns)
			add(counts, &k, d);
	}

	__u32 ptid = prev->pid, ptgid = prev->tgid;
	if (preempt || prev->__state == 0 || ptid == 0 || (prev->flags & PF_KTHREAD))
		return 0;
	if (!wanted(cfg, ptgid))
		return 0;
	struct offstart s = {.ts = now};
	s.key.pid = ptgid;
	s.key.tid = ptid;
	s.key.kind = KIND_OFFCPU;
	// The kernel stack starts at __schedule (KS_CACHED skips the
	// program's frames and the tracepoint's trampoline).
	fill_key(ctx, cfg, prev, &s.key, true);
	if (bpf_map_update_elem(&offcpu, &ptid, &s, BPF_ANY) != 0)
		bump(2);
	return 0;
}

// New processes of traced ones are traced too (record's process tree).
SEC("tp_btf/sched_process_fork")
int on_fork(__u64 *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid == ctgid)
		return 0;
	if (bpf_map_lookup_elem(&pids, &ptgid)) {
		__u8 one = 1;
		bpf_map_update_elem(&pids, &ctgid, &one, BPF_ANY);
	}
	return 0;
}

SEC("tp_btf/sched_process_exec")
int on_exec(__u64 *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct config *cfg;
	active_counts(&cfg);
	if (wanted(cfg, tgid)) {
		bpf_map_delete_elem(&procs, &tgid);
		notify(tgid, 3);
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int on_exit(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	bpf_map_delete_elem(&offcpu, &tid);
	if ((id >> 32) != tid)
		return 0; // a thread, not the process
	struct config *cfg;
	active_counts(&cfg);
	if (wanted(cfg, tid))
		notify(tid, 2);
	return 0;
}

// Unmapping. A described mapping that is unmapped must not keep resolving
// to its old file once something else is mapped there. The kernel
// choosing a free range for a new mapping (vm_unmapped_area: every mmap
// without MAP_FIXED, a dlopen's first) that a description still maps
// shows the description stale: it is dropped (the process's walks find
// their files through the VMAs meanwhile) and user space is told to
// describe the process again. Where the syscall tracepoints are attached
// (record: they slow every system call of the host down), a munmap, or a
// MAP_FIXED mmap over a described mapping, does the same: the description
// is dropped at the syscall's entry and user space told at its exit.
struct sys_enter_mem {
	__u64 common;
	__s64 nr;
	__u64 addr, len, prot, flags;
};

struct sys_exit_mem {
	__u64 common;
	__s64 nr;
	__s64 ret;
};

#define MAP_FIXED 0x10

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} unmapping SEC(".maps");

// drop_described drops the current process's description when it maps
// part of [addr, addr+len), and says whether it did.
static __always_inline bool drop_described(__u32 tgid, __u64 addr, __u64 len)
{
	struct proc *p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p || len == 0 || addr + len < addr)
		return false;
	// The last mapping starting in [addr, addr+len) or before it is the
	// only one that can overlap it (they are sorted and disjoint).
	struct msearch c = {.p = p, .key = addr + len - 1, .lo = 0, .hi = p->n};
	if (c.hi > MAX_MAPS)
		c.hi = MAX_MAPS;
	bpf_loop(10, msearch_step, &c, 0);
	if (c.lo == 0 || c.lo > MAX_MAPS)
		return false;
	if (p->m[(c.lo - 1) & (MAX_MAPS - 1)].end <= addr)
		return false;
	// Stale: no mapping is found in it any more, and the walks made
	// meanwhile say which description they outlived.
	p->n = 0;
	p->gen |= GEN_STALE;
	return true;
}

static __always_inline void unmap_enter(__u64 addr, __u64 len)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (drop_described(tgid, addr, len))
		bpf_map_update_elem(&unmapping, &tid, &tgid, BPF_ANY);
}

static __always_inline void unmap_exit(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *tgid = bpf_map_lookup_elem(&unmapping, &tid);
	if (!tgid)
		return;
	__u32 pid = *tgid;
	bpf_map_delete_elem(&unmapping, &tid);
	notify(pid, 3);
}

struct unmapped_area_args {
	__u64 common;
	__u64 addr; // the range chosen, or an error
	__u64 total_vm, flags, length;
};

SEC("tracepoint/mmap/vm_unmapped_area")
int on_unmapped_area(struct unmapped_area_args *ctx)
{
	__u64 addr = ctx->addr;
	if (addr >= (__u64)-4095)
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (drop_described(tgid, addr, ctx->length))
		notify(tgid, 3);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_munmap")
int on_munmap(struct sys_enter_mem *ctx)
{
	unmap_enter(ctx->addr, ctx->len);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_munmap")
int on_munmap_exit(struct sys_exit_mem *ctx)
{
	unmap_exit();
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int on_mmap(struct sys_enter_mem *ctx)
{
	if (ctx->flags & MAP_FIXED)
		unmap_enter(ctx->addr, ctx->len);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int on_mmap_exit(struct sys_exit_mem *ctx)
{
	unmap_exit();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
