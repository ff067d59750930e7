package taskiter

// The BPF object and its Go bindings are generated from bpf/taskiter.bpf.c
// with Debian's clang and committed, so that building rewind needs no
// clang; .ci/run checks that regenerating changes nothing.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target amd64 -cflags "-O2 -g -Wall -Werror" -no-global-types taskiter bpf/taskiter.bpf.c
