// Package cpython reads the Python frames of a CPython 3.11–3.14 process
// or core from outside: every thread state's chain of interpreter frames,
// each frame's function (co_qualname), file (co_filename) and current
// line (decoded from the code object's location table at the frame's
// instruction, as traceback and sys._current_frames() give it).
//
// Find recognizes the interpreter among a target's mappings (python3.N
// or libpython3.N.so), finds the _PyRuntime structure (its symbol or the
// .PyRuntime section) and the layout of the structures it leads to:
// tables taken from the 3.11 and 3.12 headers, and from 3.13 on the
// _Py_DebugOffsets the runtime carries at its start (checked by its
// cookie, its version and the members every build has; free-threaded
// builds are refused). Runtime.Read walks the chains over any
// target.Memory (a core's); Live does it for a running process in the
// threads' pause (read before it, re-read and compared in it), so that
// the Python frames are of the same instant as the native stacks. Attach
// hands the frames to the target's thread contexts, each frame marked
// with the evaluation-loop activation (the _PyEval_EvalFrameDefault
// frame, innermost first) that runs it, and from 3.12 on with that
// activation's entry frame, which lies in the activation's native stack
// frame: the frames are placed by it where the interpreter exports no
// _PyEval_EvalFrameDefault symbol (Debian's 3.14).
//
// Since 3.11 one _PyEval_EvalFrameDefault activation runs many Python
// calls: the native stack cannot show them, the frame chain in the heap
// does. A chain that loops, or that leads to memory that cannot be read
// or is not what it should be, ends with an end reason; the frames read
// before it are kept.
package cpython
