//go:build !amd64 && !arm64

package gostack

func fallbacksSoFar() int64 { return 0 }

func fpUsable() bool { return false }

func resetCache()          {}
func setFillHook(f func()) {}

func plainPC(pc uintptr) bool { return false }

func runtimeExpand(dst, phys []uintptr, skip int) int { return 0 }
