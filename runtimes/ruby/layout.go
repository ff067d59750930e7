package ruby

import "strings"

// layout holds the structure offsets and constants the walk needs, for
// one Ruby minor version (x86-64, the default build options: no
// VM_DEBUG_BP_CHECK, no USE_FLONUM changes). The thread and control
// frame structures change between minors; the object headers only from
// 3.2 on (variable-width strings).
type layout struct {
	// rb_vm_t: vm->ractor.main_ractor, vm->ractor.main_thread. The main
	// ractor's threads are those on the main thread's ring of lt_nodes
	// (one of whose nodes is the list head in the ractor), told from the
	// head by their ractor and vm members (thRactor, thVM).
	vmMainRactor, vmMainThread uint64
	// rb_thread_t: lt_node, ec, and the native thread's pthread_t and
	// kernel thread id. thNT, when not 0, is the offset of the
	// rb_native_thread pointer the two live in (3.3+), their offsets
	// then being in it; thTID -1: none kept.
	thNode, thEC, thNT, thPthread uint64
	thTID                         int64
	// rb_execution_context_t: vm_stack, vm_stack_size (in VALUEs), cfp.
	ecStack, ecStackSize, ecCFP uint64
	// rb_control_frame_t: its size and the pc, iseq and ep members.
	cfpSize, cfpPC, cfpIseq, cfpEP uint64
	// rb_iseq_t.body; rb_iseq_constant_body's members.
	iseqBody                                uint64
	bodyEncoded, bodyPath, bodyLabel        uint64
	bodyInsns, bodyPositions, bodyInsnsSize uint64
	bodySucc                                uint64
	// insnEntry is sizeof(struct iseq_insn_info_entry) (line_no first).
	insnEntry uint64
	// rb_callable_method_entry_t.def, rb_method_definition_t.original_id.
	meDef, defOriginalID uint64
	// Strings (RString): strLenField says the length is a member at
	// strLen for embedded strings too (3.2+), else it is in the flags
	// (bits embedShift.., 5 of them); strPtr is the heap pointer,
	// strEmbed the embedded characters.
	strLenField                        bool
	strLen, strPtr, strEmbed, embedLen uint64
	embedShift                         uint
	// imemoMask selects an imemo's type in its flags (>> FL_USHIFT).
	imemoMask uint64
	// idScopeShift and lastOpID turn an ID into its symbol serial.
	idScopeShift uint
	lastOpID     uint64
}

// rb_thread_t's ractor and vm members, in every version.
const (
	thRactor = 24
	thVM     = 32
)

// Object header constants shared by 3.0-3.4 (include/ruby/internal).
const (
	tMask       = 0x1f
	tString     = 0x05
	tArray      = 0x07
	tImemo      = 0x1a
	flUShift    = 12
	flUser1     = 1 << (flUShift + 1) // RSTRING_NOEMBED, RARRAY_EMBED_FLAG
	imemoMent   = 6
	imemoIseq   = 7
	arrEmbedLen = flUShift + 3 // RARRAY_EMBED_LEN_SHIFT
	arrEmbedMax = 0x3ff        // bits of the embedded length
	qNil        = 0x08
)

// Frame flags in ep[VM_ENV_DATA_INDEX_FLAGS] (vm_core.h, 3.0-3.4).
const (
	frameMagicMask = 0x7fff0001
	magicCFunc     = 0x55550001
	flagFinish     = 0x0020
	flagCFrame     = 0x0080
)

// The layouts, from each version's headers (vm_core.h, iseq.h,
// method.h, thread_pthread.h, include/ruby/internal/core/rstring.h at
// the release tags). 3.1's is checked against Debian bookworm's 3.1.2,
// 3.3's against trixie's 3.3 by the tests that can run them.
var (
	// layout30: no native thread id kept, a 7-word control frame, line
	// entries of 8 bytes (no node_id), embedded strings' length in the
	// flags.
	layout30 = layout{
		vmMainRactor: 32, vmMainThread: 40,
		thNode: 0, thEC: 40, thPthread: 80, thTID: -1,
		ecStack: 0, ecStackSize: 8, ecCFP: 16,
		cfpSize: 56, cfpPC: 0, cfpIseq: 16, cfpEP: 32,
		iseqBody:    16,
		bodyEncoded: 8, bodyPath: 64, bodyLabel: 80,
		bodyInsns: 120, bodyPositions: 128, bodyInsnsSize: 136, bodySucc: 144,
		insnEntry: 8,
		meDef:     16, defOriginalID: 32,
		strLen: 16, strPtr: 24, strEmbed: 16, embedShift: flUShift + 2,
		imemoMask:    0x0f,
		idScopeShift: 4, lastOpID: 0xa9,
	}
	// layout31: the thread keeps its kernel tid; the control frame
	// gained jit_return, line entries node_id.
	layout31 = layout{
		vmMainRactor: 32, vmMainThread: 40,
		thNode: 0, thEC: 40, thPthread: 80, thTID: 88,
		ecStack: 0, ecStackSize: 8, ecCFP: 16,
		cfpSize: 64, cfpPC: 0, cfpIseq: 16, cfpEP: 32,
		iseqBody:    16,
		bodyEncoded: 8, bodyPath: 64, bodyLabel: 80,
		bodyInsns: 120, bodyPositions: 128, bodyInsnsSize: 136, bodySucc: 144,
		insnEntry: 12,
		meDef:     16, defOriginalID: 32,
		strLen: 16, strPtr: 24, strEmbed: 16, embedShift: flUShift + 2,
		imemoMask:    0x0f,
		idScopeShift: 4, lastOpID: 0xa9,
	}
	// layout32: the pthread_t and tid moved to the thread's
	// rb_native_thread (th->nt); first_lineno became an int, moving the
	// line table up; strings keep their length as a member.
	layout32 = layout{
		vmMainRactor: 32, vmMainThread: 40,
		thNode: 0, thEC: 48, thNT: 40, thPthread: 8, thTID: 16,
		ecStack: 0, ecStackSize: 8, ecCFP: 16,
		cfpSize: 64, cfpPC: 0, cfpIseq: 16, cfpEP: 32,
		iseqBody:    16,
		bodyEncoded: 8, bodyPath: 64, bodyLabel: 80,
		bodyInsns: 112, bodyPositions: 120, bodyInsnsSize: 128, bodySucc: 136,
		insnEntry: 12,
		meDef:     16, defOriginalID: 32,
		strLenField: true, strLen: 16, strPtr: 24, strEmbed: 24,
		imemoMask:    0x0f,
		idScopeShift: 4, lastOpID: 0xa9,
	}
	// layout33 (3.3 and 3.4): the control frame lost __bp__;
	// rb_native_thread starts with a serial and the VM.
	layout33 = layout{
		vmMainRactor: 32, vmMainThread: 40,
		thNode: 0, thEC: 48, thNT: 40, thPthread: 16, thTID: 24,
		ecStack: 0, ecStackSize: 8, ecCFP: 16,
		cfpSize: 56, cfpPC: 0, cfpIseq: 16, cfpEP: 32,
		iseqBody:    16,
		bodyEncoded: 8, bodyPath: 64, bodyLabel: 80,
		bodyInsns: 112, bodyPositions: 120, bodyInsnsSize: 128, bodySucc: 136,
		insnEntry: 12,
		meDef:     16, defOriginalID: 32,
		strLenField: true, strLen: 16, strPtr: 24, strEmbed: 24,
		imemoMask:    0x0f,
		idScopeShift: 4, lastOpID: 0xa9,
	}
)

// layoutFor returns the layout of the Ruby whose ruby_version string is
// version ("3.1.2"), false when it is not one rewind knows.
func layoutFor(version string) (*layout, bool) {
	for _, v := range []struct {
		prefix string
		l      *layout
	}{{"3.0.", &layout30}, {"3.1.", &layout31}, {"3.2.", &layout32}, {"3.3.", &layout33}, {"3.4.", &layout33}} {
		if strings.HasPrefix(version, v.prefix) {
			return v.l, true
		}
	}
	return nil, false
}
