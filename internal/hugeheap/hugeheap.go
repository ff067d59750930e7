// Package hugeheap has the Go heap a short-lived command is about to grow
// into backed by transparent huge pages.
//
// Go maps its heap in 4 KiB pages unless the system backs all anonymous
// memory with huge pages (THP "always"); most systems leave huge pages to
// those who ask (THP "madvise"), and Go no longer asks. Where first
// touches of memory are costly, as on a VM whose host shadows its page
// tables, a command pays per page: a cold `rewind dump` touched 2,000 more
// pages than a warm one, and on the development VM touching 8 MB took
// 33-260 ms in 4 KiB pages against 0.6-0.9 ms in huge pages.
package hugeheap

// hugePage is the size of a transparent huge page on amd64 and arm64 with
// 4 KiB pages.
const hugePage = 2 << 20
