/*
 * spawner.c: creates short-lived threads without pause, for the live
 * capture tests: at any moment threads are being created and are exiting
 * while a capture stops the process.
 *
 * Up to NLIVE workers run at a time; each spins a little, sometimes
 * sleeps a little, and exits. The main thread starts a new worker as soon
 * as one finishes (joined), and NDETACHERS helper threads create detached
 * workers of their own in a tight loop, so threads appear from several
 * creators, often while a capture is stopping the others. "ready" is
 * printed once the first workers ran.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NLIVE 6
#define NDETACHERS 2

static atomic_long started;

static void *worker(void *arg)
{
	volatile unsigned long x = (unsigned long)arg;
	struct timespec ts = {0, 50000 + (x % 7) * 30000};

	for (int i = 0; i < 2000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	if (x & 1)
		nanosleep(&ts, NULL);
	atomic_fetch_add(&started, 1);
	return NULL;
}

static void *detacher(void *arg)
{
	pthread_attr_t attr;
	unsigned long n = 0;
	struct timespec ts = {0, 200000};

	(void)arg;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (;;) {
		pthread_t t;

		if (pthread_create(&t, &attr, worker, (void *)n++) != 0)
			nanosleep(&ts, NULL);
	}
	return NULL;
}

int main(void)
{
	pthread_t live[NLIVE], d;
	unsigned long n = 1000000;
	int announced = 0;

	for (int i = 0; i < NDETACHERS; i++)
		if (pthread_create(&d, NULL, detacher, NULL) != 0)
			return 2;
	for (int i = 0; i < NLIVE; i++)
		if (pthread_create(&live[i], NULL, worker, (void *)n++) != 0)
			return 2;
	for (int i = 0;; i = (i + 1) % NLIVE) {
		pthread_join(live[i], NULL);
		if (pthread_create(&live[i], NULL, worker, (void *)n++) != 0)
			return 2;
		if (!announced && atomic_load(&started) >= 2 * NLIVE) {
			printf("ready\n");
			fflush(stdout);
			announced = 1;
		}
	}
}
