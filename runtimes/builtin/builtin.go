// Package builtin links in every runtime rewind ships: a command that
// imports it (blank) finds them all in runtimes.All, and imports no
// runtime package itself. A new runtime adds its blank import here.
package builtin

import (
	_ "github.com/rewindstack/rewind/runtimes/cpython" // Python 3.11-3.14
	_ "github.com/rewindstack/rewind/runtimes/luajit"  // LuaJIT 2.1
	_ "github.com/rewindstack/rewind/runtimes/ruby"    // Ruby 3.0-3.4
)
