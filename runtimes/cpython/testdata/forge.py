# A CPython 3.11 process laid out for a hostile-memory test: the test
# (cmd/rewind/clitest, TestDumpPythonForged) overwrites this process's
# own structures through /proc/PID/mem, as any Python program could with
# ctypes, and dumps it. This script only prepares and reports where
# things are; it never forges anything itself.
#
# It parks its main thread DEPTH frames deep in rec() (argv[2]), below a
# chain of NCODES distinct functions (argv[3]), and writes to argv[1]
# one "name address..." line per fact the test needs, then "END":
#   BYTES_TYPE addr            id(bytes)
#   STR_TYPE addr              id(str)
#   LINETABLE slot             where rec's code object points to its co_linetable
#   CHAIN slot...              the same for each function of the chain
#   BUFFER addr size           a writable buffer to forge objects in
#   TSTATE addr size           the main thread state, and its size to copy
#   NEXT slot                  the thread state's next pointer (0 now)
#   QUALNAME slot...           rec's code object's co_qualname (and co_name) pointers
import ctypes
import struct
import sys
import threading

out = sys.argv[1]
depth = int(sys.argv[2])
ncodes = int(sys.argv[3])
bufsize = int(sys.argv[4])
sys.setrecursionlimit(depth + ncodes + 100)

buf = ctypes.create_string_buffer(bufsize)


def slot(obj, field):
    # The address in obj's memory that holds a pointer to field.
    raw = ctypes.string_at(id(obj), 256)
    off = raw.find(struct.pack("<Q", id(field)))
    if off < 0:
        raise SystemExit("pointer not found")
    return id(obj) + off


def slots(obj, field):
    # Every address in obj's memory that holds a pointer to field (a
    # function's co_name and co_qualname are one string).
    raw = ctypes.string_at(id(obj), 256)
    want = struct.pack("<Q", id(field))
    return [id(obj) + i for i in range(0, len(raw) - 7, 8) if raw[i:i + 8] == want]


def park():
    tstate = ctypes.pythonapi.PyThreadState_Get
    tstate.restype = ctypes.c_void_p
    ts = tstate()
    (nxt,) = struct.unpack("<Q", ctypes.string_at(ts + 8, 8))
    if nxt != 0:
        raise SystemExit("another thread state follows the main one")
    code = rec.__code__
    with open(out, "w") as f:
        f.write("BYTES_TYPE %d\n" % id(bytes))
        f.write("STR_TYPE %d\n" % id(str))
        f.write("LINETABLE %d\n" % slot(code, code.co_linetable))
        f.write("QUALNAME %s\n" % " ".join(str(s) for s in slots(code, code.co_qualname)))
        f.write("CHAIN %s\n" % " ".join(str(slot(c.__code__, c.__code__.co_linetable)) for c in chain))
        f.write("BUFFER %d %d\n" % (ctypes.addressof(buf), bufsize))
        f.write("TSTATE %d %d\n" % (ts, 512))
        f.write("NEXT %d\n" % (ts + 8))
        f.write("END\n")
    print("ready", flush=True)
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def rec(n):
    if n == 0:
        return park()
    return rec(n - 1)


# NCODES distinct code objects, each calling the next, the last calling
# rec: every one is a frame of the parked stack.
chain = []
for i in range(ncodes):
    nxt = "chain[%d]()" % (i + 1) if i + 1 < ncodes else "rec(depth)"
    src = "def f%d():\n    return %s\n" % (i, nxt)
    ns = {"chain": chain, "rec": rec, "depth": depth}
    exec(compile(src, "<forged %d>" % i, "exec"), ns)
    chain.append(ns["f%d" % i])

if chain:
    chain[0]()
else:
    rec(depth)
