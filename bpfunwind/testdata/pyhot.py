# CPU-bound Python for bpfunwind's TestPythonFrames: two threads each
# spinning in a known call chain. Each prints its own view of its stack
# (co_qualname, file, line, innermost first, from its frame objects), then
# "ready" once both have. With "late", it starts its second thread (and
# spins) only after reading a line.
import sys
import threading

lock = threading.Lock()
views = []


def report():
    # The caller's stack, innermost first, without report itself.
    view = []
    f = sys._getframe(1)
    while f is not None:
        co = f.f_code
        view.append(f"{co.co_qualname}:{co.co_filename}:{f.f_lineno}")
        f = f.f_back
    with lock:
        views.append(f"thread {threading.get_native_id()} " + " ".join(view))
        if len(views) == 2:
            print("\n".join(views), flush=True)
            print("ready", flush=True)


def spin_a(n):
    reported = False
    while True:
        s = 0
        for i in range(n):
            s += i * i
        if not reported:
            reported = True
            report()


def busy_a():
    spin_a(10000)


def spin_b(n):
    reported = False
    while True:
        s = 0
        for i in range(n):
            s ^= i
        if not reported:
            reported = True
            report()


def busy_b():
    spin_b(10000)


if sys.argv[1:] == ["late"]:
    # Threads started after the profiler looked: wait for its word.
    sys.stdin.readline()
t = threading.Thread(target=busy_b, daemon=True)
t.start()
busy_a()
