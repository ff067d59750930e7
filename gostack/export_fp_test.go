//go:build amd64 || arm64

package gostack

func fallbacksSoFar() int64 { return fallbacks.Load() }

func fpUsable() bool { return fpOK }
