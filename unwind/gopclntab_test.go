package unwind

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestGoPCLNMethod: the gopclntab method has its name in text and JSON,
// ByName gives it alone, and auto tries it after the CFI table and before
// frame pointers.
func TestGoPCLNMethod(t *testing.T) {
	if s := MethodGoPCLN.String(); s != "gopclntab" {
		t.Errorf("MethodGoPCLN is %q", s)
	}
	if b, err := json.Marshal(Frame{Method: MethodGoPCLN}); err != nil || !json.Valid(b) || !strings.Contains(string(b), `"Method":"gopclntab"`) {
		t.Errorf("JSON %s (%v)", b, err)
	}
	u, err := ByName("gopclntab")
	if err != nil || len(u.Steppers) != 1 || u.Steppers[0].Method() != MethodGoPCLN {
		t.Fatalf("ByName(gopclntab): %+v, %v", u, err)
	}
	var order []Method
	for _, s := range NewAuto().Steppers {
		order = append(order, s.Method())
	}
	want := []Method{MethodSFrame, MethodDWARF, MethodGoPCLN, MethodFP}
	if len(order) != len(want) {
		t.Fatalf("auto: %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("auto: %v, want %v", order, want)
		}
	}
	found := false
	for _, n := range MethodNames {
		found = found || n == "gopclntab"
	}
	if !found || !NewAuto().memoable() || !u.memoable() {
		t.Errorf("MethodNames %v, auto memoable %v", MethodNames, NewAuto().memoable())
	}
}
