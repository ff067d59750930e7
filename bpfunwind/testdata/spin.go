// A CPU-bound, allocating Go program: main.hot is on CPU, the garbage
// collector runs beside it. It prints "ready" and runs until killed.
package main

import (
	"fmt"
	"os"
)

var sink []byte

//go:noinline
func hot(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i % 7
		if i%1024 == 0 {
			sink = make([]byte, 256)
		}
	}
	return s
}

func main() {
	fmt.Fprintln(os.Stdout, "ready")
	for {
		hot(1 << 20)
	}
}
