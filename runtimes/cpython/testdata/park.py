# Threads parked in known Python stacks, for package cpython's tests.
# Once every thread is parked, it writes each thread's stack as
# sys._current_frames() gives it (native id, then one line a frame,
# innermost first: qualname, file, line), then END, to the file argv[1],
# prints "ready" and parks its main thread too. Each parking line is one statement, so the line reported
# before parking is the line parked on.
import sys
import threading

block = threading.Lock()
block.acquire()
started = threading.Semaphore(0)
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 5
extra = int(sys.argv[3]) if len(sys.argv) > 3 else 0
# With a fourth argument, one more thread waits for a line on stdin, then
# creates that file and parks in moved_here.
marker = sys.argv[4] if len(sys.argv) > 4 else None


def park():
    started.release() or block.acquire()


def rec(n):
    if n == 0:
        return park()
    return rec(n - 1)


def key(x):
    return park() or x


def via_sorted():
    return sorted([1], key=key)


def gen():
    yield park()


def via_gen():
    for _ in gen():
        pass


class K:
    @classmethod
    def cm(cls):
        return cls.sm()

    @staticmethod
    def sm():
        def inner():
            f = lambda: park()
            return f()
        return inner()


def moved_here():
    open(marker, "w").close() or block.acquire()  # MOVED


def mover():
    started.release() or sys.stdin.readline()
    moved_here()


def report(frames):
    names = {t.ident: t.native_id for t in threading.enumerate()}
    out = []
    for ident, f in frames.items():
        out.append("THREAD %d" % names[ident])
        while f is not None:
            c = f.f_code
            out.append("%s\t%s\t%d" % (getattr(c, "co_qualname", c.co_name), c.co_filename, f.f_lineno))
            f = f.f_back
    out.append("END")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(out) + "\n")
    sys.stdout.write("ready\n")
    sys.stdout.flush()


def main():
    targets = [lambda: rec(depth), via_sorted, via_gen, K.cm]
    targets += [lambda: rec(depth)] * extra
    if marker:
        targets.append(mover)
    for t in targets:
        threading.Thread(target=t, daemon=True).start()
    for _ in targets:
        started.acquire()
    report(sys._current_frames()) or block.acquire()


main()
