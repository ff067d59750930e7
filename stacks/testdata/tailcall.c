/*
 * tailcall.c: threads that block at the end of chains of tail calls, for
 * comparing tail-call frames with gdb's.
 *
 * unique:  uq_start -> uq_a -(call)-> uq_b -(jmp)-> uq_c -(jmp)-> uq_d -> nanosleep
 *          (the one chain from uq_b to uq_d: gdb shows uq_c and uq_b)
 * ambig:   am_start -> am_a -(call)-> am_e -(jmp)-> am_f or am_g -(jmp)-> am_h -> nanosleep
 *          (two chains, nothing in common: gdb shows none)
 * partial: pa_start -> pa_a -(call)-> pa_e -(jmp)-> pa_f or pa_g -(jmp)-> pa_h -(jmp)-> pa_i -> nanosleep
 *          (two chains ending alike: gdb shows pa_h only)
 * inlined: in_start -> in_a -(call)-> in_b -(jmp, from in_helper inlined in in_b)-> in_c -> nanosleep
 *          (gdb shows one tail-call frame, named in_helper, the innermost
 *          function at the jump; rewind shows in_helper [inlined] and in_b)
 * to libc: lb_start -> lb_a -(call)-> lb_b -(jmp)-> nanosleep
 *          (gdb shows lb_b, the jump's target found by name in libc)
 * libc:    se_start -> sem_wait, which jumps inside libc (gdb shows
 *          do_futex_wait and sem_wait from libc6-dbg's call sites)
 * Main prints "ready" once all six are about to block, then joins.
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define NOIPA __attribute__((noipa))
#define BARRIER() __asm__ volatile("" ::: "memory")

static atomic_int parked;
volatile int sink;

NOIPA static void block(int x)
{
	struct timespec ts = {3600, 0};

	sink = x;
	atomic_fetch_add(&parked, 1);
	for (;;)
		nanosleep(&ts, NULL);
}

NOIPA void uq_d(int x) { block(x + 4); BARRIER(); }
NOIPA void uq_c(int x) { uq_d(x * 3); }
NOIPA void uq_b(int x) { uq_c(x + 2); }
NOIPA void uq_a(int x) { uq_b(x + 1); BARRIER(); }
NOIPA static void *uq_start(void *arg) { uq_a(1); BARRIER(); return arg; }

NOIPA void am_h(int x) { block(x + 5); BARRIER(); }
NOIPA void am_f(int x) { am_h(x * 3); }
NOIPA void am_g(int x) { am_h(x * 5); }
NOIPA void am_e(int x) { if (x & 1) am_f(x + 2); else am_g(x + 3); }
NOIPA void am_a(int x) { am_e(x + 1); BARRIER(); }
NOIPA static void *am_start(void *arg) { am_a(2); BARRIER(); return arg; }

NOIPA void pa_i(int x) { block(x + 6); BARRIER(); }
NOIPA void pa_h(int x) { pa_i(x * 7); }
NOIPA void pa_f(int x) { pa_h(x * 3); }
NOIPA void pa_g(int x) { pa_h(x * 5); }
NOIPA void pa_e(int x) { if (x & 1) pa_f(x + 2); else pa_g(x + 3); }
NOIPA void pa_a(int x) { pa_e(x + 1); BARRIER(); }
NOIPA static void *pa_start(void *arg) { pa_a(3); BARRIER(); return arg; }

NOIPA void in_c(int x) { block(x + 7); BARRIER(); }
static inline __attribute__((always_inline)) void in_helper(int x)
{
	if (sink)
		sink = 0;
	in_c(x * 3);
}
NOIPA void in_b(int x) { in_helper(x + 2); }
NOIPA void in_a(int x) { in_b(x + 1); BARRIER(); }
NOIPA static void *in_start(void *arg) { in_a(4); BARRIER(); return arg; }

static sem_t sem;

NOIPA static void *se_start(void *arg)
{
	atomic_fetch_add(&parked, 1);
	for (;;)
		sem_wait(&sem);
	return arg;
}

NOIPA void lb_b(const struct timespec *ts) { nanosleep(ts, NULL); }
NOIPA void lb_a(void)
{
	struct timespec ts = {3600, 0};

	atomic_fetch_add(&parked, 1);
	for (;;) {
		lb_b(&ts);
		BARRIER();
	}
}
NOIPA static void *lb_start(void *arg) { lb_a(); BARRIER(); return arg; }

#define NTHREADS 6

int main(void)
{
	pthread_t th[NTHREADS];
	void *(*fn[NTHREADS])(void *) = {uq_start, am_start, pa_start, in_start, se_start, lb_start};
	pthread_attr_t attr;
	struct timespec ts = {0, 1000000};

	sem_init(&sem, 0, 0);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (int i = 0; i < NTHREADS; i++)
		if (pthread_create(&th[i], &attr, fn[i], NULL) != 0)
			return 3;
	while (atomic_load(&parked) < NTHREADS)
		nanosleep(&ts, NULL);
	ts.tv_nsec = 50000000;
	nanosleep(&ts, NULL);
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	return 0;
}
