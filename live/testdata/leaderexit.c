/*
 * leaderexit.c: the main thread starts two threads that block forever,
 * prints "ready" once they are about to block, and ends with
 * pthread_exit. The process lives on with a zombie main thread, whose
 * /proc/PID/maps and /proc/PID/exe are then empty and unreadable.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static atomic_int parked;

static void *sleeper(void *arg)
{
	struct timespec ts = {3600, 0};

	(void)arg;
	atomic_fetch_add(&parked, 1);
	for (;;)
		nanosleep(&ts, NULL);
	return NULL;
}

int main(void)
{
	pthread_t t[2];
	struct timespec ts = {0, 1000000};

	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, sleeper, NULL) != 0)
			return 2;
	while (atomic_load(&parked) < 2)
		nanosleep(&ts, NULL);
	printf("ready\n");
	fflush(stdout);
	pthread_exit(NULL);
}
