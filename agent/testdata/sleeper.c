/* A process whose only thread spends its life blocked in libc: main ->
 * sleeper_wait -> sleeper_block -> nanosleep, again and again (built
 * -fomit-frame-pointer; the C library as shipped). Usage: sleeper
 * INTERVAL_SECONDS (each nanosleep's length). */
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

volatile int sink;

NOINLINE static void sleeper_block(double secs)
{
	struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};

	nanosleep(&ts, NULL);
	sink++;
}

NOINLINE static void sleeper_wait(double secs)
{
	sleeper_block(secs);
	sink++;
}

int main(int argc, char **argv)
{
	for (;;)
		sleeper_wait(argc > 1 ? atof(argv[1]) : 0.2);
}
