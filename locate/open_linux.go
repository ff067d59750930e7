package locate

import "syscall"

// nonblock keeps an open of a FIFO planted at a looked-up path from
// blocking; the file is then refused by fstat.
const nonblock = syscall.O_NONBLOCK
