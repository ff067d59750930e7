// SPDX-License-Identifier: GPL-2.0
//
// rewind's thread reader for dumps that do not stop the process (x86-64).
//
// A BPF task iterator visits every task of the system; for those of the
// thread group user space names in `config`, it writes one record to the
// iterator's file: the thread's id, its scheduler state (__state, on_cpu),
// its context-switch counts, its fs base and its user registers as the
// kernel saved them on entry (bpf_task_pt_regs). A thread that is blocked
// in the kernel cannot change its registers; user space reads the
// iterator before and after it copies the thread's stack and keeps the
// thread only when its switch counts did not move in between. The
// program reads only kernel memory, writes nothing but its records and
// follows no pointer chain of the target.
//
// On arm64 pt_regs holds regs[31], sp, pc and pstate, and the thread
// pointer is thread.uw.tp_value: only the record's layout would differ.

typedef unsigned char __u8;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_ARRAY = 2,
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;
static long (*bpf_seq_write)(void *m, const void *data, __u32 len) = (void *)127;

struct pt_regs {
	unsigned long r15;
} __attribute__((preserve_access_index));

struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int __state;
	int on_cpu;
	int pid;
	int tgid;
	unsigned long nvcsw;
	unsigned long nivcsw;
	void *mm;
	struct thread_struct thread;
} __attribute__((preserve_access_index));

static struct pt_regs *(*bpf_task_pt_regs)(struct task_struct *task) = (void *)175;

struct seq_file;
struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

// The thread group to read; 0 reads none.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} config SEC(".maps");

#define NREGS 21 // x86-64 struct pt_regs, r15 first, ss last

struct record {
	__u32 tid;
	__u32 state;  // task->__state: 0 is TASK_RUNNING
	__u32 on_cpu; // the task is on a CPU now
	__u32 pad;
	__u64 switches; // nvcsw + nivcsw
	__u64 fsbase;
	__u64 regs[NREGS];
};

SEC("iter/task")
int read_threads(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	__u32 zero = 0;
	__u32 *tgid = bpf_map_lookup_elem(&config, &zero);
	if (!tgid || *tgid == 0 || task->tgid != (int)*tgid || !task->mm)
		return 0;
	struct record r = {};
	r.tid = task->pid;
	r.state = task->__state;
	r.on_cpu = task->on_cpu != 0;
	r.switches = task->nvcsw + task->nivcsw;
	r.fsbase = task->thread.fsbase;
	struct pt_regs *regs = bpf_task_pt_regs(task);
	if (regs)
		bpf_probe_read_kernel(&r.regs, sizeof(r.regs), regs);
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
