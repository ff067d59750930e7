package agent_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rewindstack/rewind/agent"
	"github.com/rewindstack/rewind/profiles"
	"github.com/rewindstack/rewind/symbolize"
)

// ExampleRun profiles the whole host at 19 Hz per CPU, on and off CPU,
// sending OTLP profiles to a local Collector every minute until ctx ends.
func ExampleRun() {
	exp, err := agent.NewGRPC("127.0.0.1:4317")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer exp.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err = agent.Run(ctx, agent.Config{OffCPU: true, Exporters: []agent.Exporter{exp}, Log: os.Stderr})
	if err != nil {
		fmt.Println(err)
	}
}

// ExampleOTLP encodes one period's profile as an OTLP export request (one
// resource per process, sharing one dictionary), which the Collector's
// pdata reads.
func ExampleOTLP() {
	m := &profiles.Mapping{ID: 1, Start: 0x400000, End: 0x401000, Path: "/usr/bin/app", BuildID: "0a1b2c"}
	leaf := &profiles.Location{ID: 1, Addr: 0x400100, Mapping: m, Lines: []symbolize.Location{{Function: "work"}}}
	p := &agent.Period{
		Type: agent.TypeCPU, Start: time.Unix(0, 0), End: time.Unix(60, 0), Symbolized: true, Host: "h",
		Profile: &profiles.Profile{Mappings: []*profiles.Mapping{m}, Locations: []*profiles.Location{leaf},
			Stacks: []profiles.Stack{{PID: 7, TID: 7, Locations: []*profiles.Location{leaf}, Value: 52631578}}},
	}
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(agent.OTLP(p)); err != nil {
		fmt.Println(err)
		return
	}
	out := req.Profiles()
	rp := out.ResourceProfiles().At(0)
	pid, _ := rp.Resource().Attributes().Get("process.pid")
	fmt.Println("resources:", out.ResourceProfiles().Len(), "pid:", pid.Int(), "samples:", out.SampleCount())
	// Output: resources: 1 pid: 7 samples: 1
}
