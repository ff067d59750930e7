// A CPU-bound C++ program that throws and catches exceptions in a loop:
// main -> catcher -> thrower -> (libstdc++'s __cxa_throw, libgcc's
// _Unwind_RaiseException walking the CFI). It prints "ready" and runs
// until killed.
#include <cstdio>
#include <stdexcept>

#define NOINLINE __attribute__((noipa, noinline))

NOINLINE static void thrower(int n)
{
	if (n >= 0)
		throw std::runtime_error("thrown");
}

NOINLINE static int catcher(int n)
{
	try {
		thrower(n);
	} catch (const std::exception &e) {
		return e.what()[0];
	}
	return 0;
}

int main()
{
	std::printf("ready\n");
	std::fflush(stdout);
	long sum = 0;
	for (int i = 0;; i++)
		sum += catcher(i & 0xffff);
	return (int)sum;
}
