package symbolize

import "github.com/rewindstack/rewind/elfobj"

var elfobjOpen = elfobj.Open
