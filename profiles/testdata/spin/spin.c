/* The program of perf.data: no C library, so the recording names one
   file. _start calls work, which calls spin, which counts down for about
   half a second; then the program exits. */
static volatile unsigned long sink;
__attribute__((noinline)) void spin(unsigned long n) { while (n--) sink += n; }
__attribute__((noinline)) void work(void) { spin(400000000UL); __asm__ volatile(""); }
void _start(void) {
	work();
	__asm__ volatile("mov $60, %eax\n\txor %edi, %edi\n\tsyscall");
}
