// A program that blocks 500 times a second in nanosleep, built without
// frame pointers: main -> waiter -> nanosleep. It prints "ready", then
// after each 100 sleeps the nanoseconds it asked to sleep so far.
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
			printf("%ld\n", i * 2000000L);
			fflush(stdout);
		}
	}
}
