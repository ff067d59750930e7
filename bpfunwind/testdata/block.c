// A program that blocks 500 times a second in nanosleep, built without
// frame pointers: main -> waiter -> nanosleep. It prints "ready", then
// after each 100 sleeps the nanoseconds it asked to sleep so far and the
// CLOCK_MONOTONIC time.
#include <stdio.h>
#include <time.h>

__attribute__((noinline)) static void waiter(void)
{
	struct timespec ts = {0, 2000000};
	nanosleep(&ts, NULL);
}

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	for (long i = 1;; i++) {
		waiter();
		if (i % 100 == 0) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			printf("%ld %lld\n", i * 2000000L, (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
			fflush(stdout);
		}
	}
}
