/*
 * cfloor.c: BenchmarkFloor's steps in C, to compare the Go tracer's
 * floor with a plain C loop in the same run: argv[1] is the process.
 * Like the Go tracer it raises its priority (where allowed) and lowers
 * its timer slack, seizes every thread of the process, then times
 * PTRACE_INTERRUPT of each, the collection of each stop in order
 * (wait4 WNOHANG|__WALL, sched_yield while none) with a register read,
 * and PTRACE_DETACH of each. It prints the three phases and the total,
 * in microseconds: "intr wait detach total".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	static int tids[4096];
	static unsigned long long regs[64];
	char path[64];
	int n = 0;

	if (argc < 2)
		return 2;
	setpriority(PRIO_PROCESS, 0, -20);
	prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
	snprintf(path, sizeof path, "/proc/%s/task", argv[1]);
	DIR *d = opendir(path);
	if (!d) {
		perror(path);
		return 1;
	}
	for (struct dirent *e; (e = readdir(d)) && n < 4096;)
		if (e->d_name[0] != '.')
			tids[n++] = atoi(e->d_name);
	closedir(d);
	for (int i = 0; i < n; i++)
		if (ptrace(PTRACE_SEIZE, tids[i], 0, 0) != 0) {
			perror("PTRACE_SEIZE");
			return 1; /* the kernel detaches what was seized */
		}
	double t0 = now();
	for (int i = 0; i < n; i++)
		ptrace(PTRACE_INTERRUPT, tids[i], 0, 0);
	double t1 = now();
	for (int i = 0; i < n; i++) {
		int st;

		int r;

		while ((r = wait4(tids[i], &st, WNOHANG | __WALL, 0)) != tids[i] && r >= 0)
			sched_yield();
		struct iovec iov = {regs, sizeof regs};
		ptrace(PTRACE_GETREGSET, tids[i], NT_PRSTATUS, &iov);
	}
	double t2 = now();
	for (int i = 0; i < n; i++)
		ptrace(PTRACE_DETACH, tids[i], 0, 0);
	double t3 = now();
	printf("%.1f %.1f %.1f %.1f\n", t1 - t0, t2 - t1, t3 - t2, t3 - t0);
	return 0;
}
