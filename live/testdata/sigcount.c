/*
 * sigcount.c: counts the SIGUSR1 signals it receives, for the test that
 * checks a capture loses no signal. A signal that arrives while a
 * capture is stopping a thread is reported to the tracer as a
 * signal-delivery-stop and must be handed back when it detaches.
 *
 * Four threads block in nanosleep; the main thread prints the count
 * whenever it changes (and "ready" first).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static atomic_long count;

static void on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_add(&count, 1);
}

static void *sleeper(void *arg)
{
	struct timespec ts = {3600, 0};

	(void)arg;
	for (;;)
		nanosleep(&ts, NULL);
	return NULL;
}

int main(void)
{
	struct sigaction sa;
	struct timespec tick = {0, 1000000};
	long seen = 0;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	for (int i = 0; i < 4; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, sleeper, NULL) != 0)
			return 2;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		long n = atomic_load(&count);

		if (n != seen) {
			printf("%ld\n", n);
			fflush(stdout);
			seen = n;
		}
		nanosleep(&tick, NULL);
	}
}
