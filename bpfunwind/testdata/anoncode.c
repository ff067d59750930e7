// A program whose thread blocks in code outside every file: a copy of a
// small function (nanosleep through the system call) in anonymous
// executable memory, called 1,000 times a second, the way a JIT's code
// runs. It prints "ready" before the first call.
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static const unsigned char code[] = {
	0x48, 0xc7, 0xc0, 0x23, 0x00, 0x00, 0x00, // mov $35 (nanosleep), %rax
	0x31, 0xf6,                               // xor %esi, %esi
	0x0f, 0x05,                               // syscall (the timespec in %rdi)
	0xc3,                                     // ret
};

int main(void)
{
	void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return 1;
	memcpy(page, code, sizeof(code));
	void (*sleep1ms)(const struct timespec *) = (void (*)(const struct timespec *))page;
	struct timespec ts = {0, 1000000};
	printf("ready\n");
	fflush(stdout);
	for (;;)
		sleep1ms(&ts);
}
