/*
 * The target of scripts/stall-numbers.sh: how long a tool that reads the
 * process stalls it, measured from inside.
 *
 *   stall N [SLEEPERS]
 *
 * N threads block for ever on a condition variable nobody signals (a
 * server's idle workers); SLEEPERS threads (default 2, one a CPU) loop on
 * nanosleep(200 us) with a timer slack of 1 ns and record how late each
 * wake-up is, past the 200 us asked for. The main thread prints "ready"
 * once every thread runs and then answers lines on stdin:
 *
 *   m   forget the lateness seen so far ("ok")
 *   g   wait until every sleeper has woken twice since the request (a
 *       stall that ended just before is then counted), and print the
 *       largest lateness since the last m, in nanoseconds
 *
 * so that a script can bracket one command with m and g. Between the two
 * the main thread too is blocked in read().
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MAXSLEEPERS 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static atomic_int started;
static atomic_llong worst;                 /* ns, since the last m */
static atomic_llong wakes[MAXSLEEPERS];    /* wake-ups per sleeper */

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *blocked(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	atomic_fetch_add(&started, 1);
	for (;;)
		pthread_cond_wait(&never, &mu);
	return NULL;
}

static void *sleeper(void *arg)
{
	long i = (long)arg;
	const struct timespec d = {0, 200000};
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	atomic_fetch_add(&started, 1);
	for (;;) {
		long long t0 = now();
		nanosleep(&d, NULL);
		long long late = now() - t0 - 200000;
		long long w = atomic_load(&worst);
		while (late > w && !atomic_compare_exchange_weak(&worst, &w, late))
			;
		atomic_fetch_add(&wakes[i], 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: stall N [SLEEPERS]\n");
		return 2;
	}
	int n = atoi(argv[1]), s = argc > 2 ? atoi(argv[2]) : 2;
	if (n < 0 || s < 1 || s > MAXSLEEPERS) {
		fprintf(stderr, "stall: bad counts\n");
		return 2;
	}
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 256 << 10);
	pthread_t t;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t, &a, blocked, NULL) != 0) {
			perror("stall: pthread_create");
			return 1;
		}
	for (long i = 0; i < s; i++)
		if (pthread_create(&t, &a, sleeper, (void *)i) != 0) {
			perror("stall: pthread_create");
			return 1;
		}
	while (atomic_load(&started) < n + s)
		usleep(1000);
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (line[0] == 'm') {
			atomic_store(&worst, 0);
			printf("ok\n");
		} else if (line[0] == 'g') {
			long long seen[MAXSLEEPERS];
			for (int i = 0; i < s; i++)
				seen[i] = atomic_load(&wakes[i]);
			for (int i = 0; i < s; i++)
				while (atomic_load(&wakes[i]) < seen[i] + 2)
					usleep(100);
			printf("%lld\n", atomic_load(&worst));
		} else {
			printf("?\n");
		}
		fflush(stdout);
	}
	return 0;
}
