//go:build !rewind_shadow || (!amd64 && !arm64)

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "shadowcheck: build with the goshadow overlay and -tags rewind_shadow, on amd64 or arm64")
	os.Exit(2)
}
