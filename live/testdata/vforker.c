/*
 * vforker.c: one thread spends nearly all its time in vfork, waiting
 * (uninterruptibly, state D) for a child that sleeps 1.5 s before it
 * exits. A thread in that wait cannot stop for a tracer until the child
 * is gone, which is what the test of StopTimeout needs. Two more threads
 * block in nanosleep; main prints "ready" once the first vfork started.
 *
 * SIGUSR2 ends the vforking (after the current child, which the test then
 * kills), so that no child outlives the program: an orphan would be left
 * to init, which does not reap in every container.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int forking;
static volatile sig_atomic_t quit;

static void on_usr2(int sig)
{
	(void)sig;
	quit = 1;
}

static void *vforker(void *arg)
{
	(void)arg;
	while (!quit) {
		pid_t pid;

		atomic_store(&forking, 1);
		pid = vfork();
		if (pid == 0) {
			struct timespec ts = {1, 500000000};

			nanosleep(&ts, NULL);
			_exit(0);
		}
		/* Reaped even when SIGUSR2 interrupts the wait: a child left
		 * unreaped once the loop ends would stay a zombie. */
		while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	return NULL;
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
	pthread_t t;
	struct timespec ts = {0, 50000000};
	struct sigaction sa = {.sa_handler = on_usr2, .sa_flags = SA_RESTART};

	sigaction(SIGUSR2, &sa, NULL);
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t, NULL, sleeper, NULL) != 0)
			return 2;
	if (pthread_create(&t, NULL, vforker, NULL) != 0)
		return 2;
	while (!atomic_load(&forking))
		nanosleep(&ts, NULL);
	nanosleep(&ts, NULL);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
