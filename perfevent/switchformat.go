package perfevent

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/rewindstack/rewind/internal/tracefs"
)

// SwitchFormat locates the sched_switch fields the off-CPU profile needs
// in the tracepoint's raw data.
type SwitchFormat struct {
	prevPID, prevState, nextPID field
}

// DefaultSwitchFormat is the layout of every kernel since 4.x on 64-bit
// machines; the format file overrides it.
var DefaultSwitchFormat = SwitchFormat{prevPID: field{24, 4}, prevState: field{32, 8}, nextPID: field{56, 4}}

// field is one tracepoint field's offset and size.
type field struct{ off, size int }

// ReadSwitchFormat parses the tracefs format file of sched_switch (the
// layout of 64-bit kernels since 4.x when there is none).
// tracefs is found, and mounted when it is not and may be, as for the
// tracepoint's id (package tracefs); that it cannot be is said when the
// id is read.
func ReadSwitchFormat() (SwitchFormat, error) {
	b, err := tracefs.ReadEventFile("sched", "sched_switch", "format")
	if err != nil {
		return DefaultSwitchFormat, nil
	}
	f, err := ParseSwitchFormat(string(b))
	if err != nil {
		p, _ := tracefs.EventFile("sched", "sched_switch", "format")
		return f, fmt.Errorf("%s: %w", p, err)
	}
	return f, nil
}

// ParseSwitchFormat reads the offsets and sizes of prev_pid, prev_state and
// next_pid from a tracepoint format description.
func ParseSwitchFormat(s string) (SwitchFormat, error) {
	var f SwitchFormat
	found := 0
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "field:") {
			continue
		}
		var decl string
		var off, size int = -1, -1
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			k, v, _ := strings.Cut(part, ":")
			switch k {
			case "field":
				decl = v
			case "offset":
				off, _ = strconv.Atoi(v)
			case "size":
				size, _ = strconv.Atoi(v)
			}
		}
		name := decl
		if i := strings.LastIndexAny(decl, " *"); i >= 0 {
			name = decl[i+1:]
		}
		if off < 0 || off > 4096 || (size != 4 && size != 8) {
			continue
		}
		switch name {
		case "prev_pid":
			f.prevPID = field{off, size}
			found |= 1
		case "prev_state":
			f.prevState = field{off, size}
			found |= 2
		case "next_pid":
			f.nextPID = field{off, size}
			found |= 4
		}
	}
	if found != 7 {
		return f, fmt.Errorf("sched_switch format lacks prev_pid, prev_state or next_pid (4- or 8-byte fields)")
	}
	return f, nil
}

// Read returns a sched_switch sample's prev_pid, prev_state and
// next_pid from its raw data; ok is false when raw is too short for any
// of them.
func (f SwitchFormat) Read(raw []byte) (prevPID, prevState, nextPID int64, ok bool) {
	prev, ok1 := f.prevPID.read(raw)
	state, ok2 := f.prevState.read(raw)
	next, ok3 := f.nextPID.read(raw)
	return prev, state, next, ok1 && ok2 && ok3
}

// read returns the field of raw, sign-extended from 4 bytes, or false
// when raw ends before it.
func (fl field) read(raw []byte) (int64, bool) {
	if fl.off+fl.size > len(raw) {
		return 0, false
	}
	if fl.size == 4 {
		return int64(int32(binary.LittleEndian.Uint32(raw[fl.off:]))), true
	}
	return int64(binary.LittleEndian.Uint64(raw[fl.off:])), true
}
