// Package ruby reads the Ruby frames of a CRuby (MRI) 3.1 process or
// core from outside: each Ruby thread's control frames, from its
// execution context's current frame to the base of its VM stack, shown
// as caller_locations shows them: an iseq's label ("rb_c", "block in
// rb_a", "<main>"), path and current line (from the iseq's line table,
// its succinct bit-vector index, at the instruction before the frame's
// pc), and a C method's name with its caller's path and line.
//
// Find recognizes the VM by the ruby_current_vm_ptr and ruby_version
// symbols of libruby or a ruby executable (Debian's stripped libruby
// keeps them in its dynamic table); the layout of the structures is
// the version's, from its headers; an unknown version is one warning
// and native frames only. The main ractor's thread list gives the Ruby
// threads; each is matched to an OS thread by the kernel thread id the
// VM keeps, else by its pthread_t, which is the thread's fs base.
//
// A thread's frames run in several rb_vm_exec activations when C calls
// back into Ruby (a block given to Array#each): the first frame each
// activation pushed carries VM_FRAME_FLAG_FINISH, so the frames are
// numbered by activation and outputs splice each activation's frames
// above its own rb_vm_exec frame.
//
// Every read is bounded (frames per thread, threads, bytes, time), a
// name that is not a printable string is not shown as one, and a walk
// that meets memory that is not what it should be ends with a reason.
package ruby
