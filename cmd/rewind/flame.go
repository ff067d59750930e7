package main

import (
	"fmt"
	"os"

	"github.com/rewindstack/rewind/flamegraph"
	"github.com/rewindstack/rewind/profiles"
)

// writeFlameGraph writes an HTML or SVG flame graph of the profile, one
// box per frame (inlined calls too), kernel frames suffixed "_[k]".
func writeFlameGraph(f *os.File, prof *profiles.Profile, svg bool, title string) error {
	folded := prof.Fold(profiles.FoldOptions{KernelSuffix: "_[k]", Count: true})
	samples := make([]flamegraph.Sample, len(folded))
	for i, s := range folded {
		samples[i] = flamegraph.Sample{Stack: s.Stack, Value: s.Value}
	}
	opt := flamegraph.Options{Title: title, Unit: "samples", Subtitle: flameSubtitle(prof)}
	if svg {
		return flamegraph.WriteSVG(f, samples, opt)
	}
	return flamegraph.WriteHTML(f, samples, opt)
}

// flameSubtitle summarizes the profile's size and stack fidelity.
func flameSubtitle(prof *profiles.Profile) string {
	s := fmt.Sprintf("%d samples", len(prof.Stacks))
	if prof.Lost > 0 {
		s += fmt.Sprintf(", %d lost", prof.Lost)
	}
	if len(prof.Fidelity) > 0 && prof.Fidelity[0].Samples > 0 {
		f := prof.Fidelity[0]
		s += fmt.Sprintf(", %.1f%% complete stacks (--method %s)", f.Percent(), f.Method)
	}
	return s
}
