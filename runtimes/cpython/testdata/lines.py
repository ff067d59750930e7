# Prints, for every code object of a few standard modules, its first
# line, its location table (hex) and the line of each code unit as
# co_positions() gives it (-1 for none), for TestLineMatchesPython.
import json, threading, traceback, inspect, dataclasses

def codes(c):
    yield c
    for k in c.co_consts:
        if hasattr(k, "co_linetable"):
            yield from codes(k)

for mod in (threading, traceback, inspect, dataclasses):
    src = open(mod.__file__).read()
    for c in codes(compile(src, mod.__file__, "exec")):
        lines = [-1 if p[0] is None else p[0] for p in c.co_positions()]
        print(json.dumps([c.co_firstlineno, c.co_linetable.hex(), lines]))
