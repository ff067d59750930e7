// A program that blocks in two kernel paths in turn, ten times in each:
// nanosleep (sleeper) and poll on an empty pipe with a 1 ms timeout
// (poller). The kernel-stack cache must give each blocked interval the
// stack of the path it blocked in. It prints "ready", then a line after
// every 200 blocks.
#include <poll.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int fds[2];

__attribute__((noinline)) static void sleeper(void)
{
	struct timespec ts = {0, 1000000};
	nanosleep(&ts, NULL);
	__asm__ volatile("nop" ::: "memory");
}

__attribute__((noinline)) static void poller(void)
{
	struct pollfd p = {.fd = fds[0], .events = POLLIN};
	poll(&p, 1, 1);
	__asm__ volatile("nop; nop" ::: "memory");
}

int main(void)
{
	if (pipe(fds) != 0)
		return 1;
	printf("ready\n");
	fflush(stdout);
	for (long i = 1;; i++) {
		if ((i / 10) % 2)
			sleeper();
		else
			poller();
		if (i % 200 == 0) {
			printf("%ld\n", i);
			fflush(stdout);
		}
	}
}
