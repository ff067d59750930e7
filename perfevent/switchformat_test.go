package perfevent

import "testing"

// switchFormatText is sched_switch's format file of a 6.x kernel (the
// off-CPU profile's tests in profiles hold it too, as their fuzz seed).
const switchFormatText = `name: sched_switch
ID: 372
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;
`

func TestParseSwitchFormat(t *testing.T) {
	f, err := ParseSwitchFormat(switchFormatText)
	if err != nil {
		t.Fatal(err)
	}
	if f != DefaultSwitchFormat {
		t.Errorf("parsed %+v, want %+v", f, DefaultSwitchFormat)
	}
	if _, err := ParseSwitchFormat("field:int next_pid;\toffset:56;\tsize:4;"); err == nil {
		t.Error("a format without prev_pid and prev_state parsed")
	}
}
