//go:build rewindprof

package main

import "github.com/rewindstack/rewind/internal/selfprof"

// Built with -tags rewindprof, rewind profiles its own run (see
// internal/selfprof).
func init() { profileRun = selfprof.Run }
