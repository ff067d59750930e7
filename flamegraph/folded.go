package flamegraph

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxFoldedLine bounds one line of folded input (a stack and its count).
const maxFoldedLine = 16 << 20

// ParseFolded reads Brendan Gregg's folded-stack format, one stack per
// line: frames from the root to the leaf separated by ';', a space, and a
// non-negative integer count ("main;work;compute 42"). Blank lines are
// skipped, a trailing "\r" is ignored, and a frame may contain spaces (the
// count is the text after the last space). Lines with the same stack are
// kept as separate samples; the flame graph merges them. Errors name the
// line and its byte offset.
func ParseFolded(r io.Reader) ([]Sample, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	intern := make(map[string]string)
	var samples []Sample
	var offset int64
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		start := offset
		offset += int64(len(line))
		if err != nil && err != io.EOF {
			return samples, fmt.Errorf("folded: line %d (byte offset %d): %w", lineNo, start, err)
		}
		if len(line) == 0 && err == io.EOF {
			return samples, nil
		}
		s, perr := parseFoldedLine(line, intern)
		if perr != nil {
			return samples, fmt.Errorf("folded: line %d (byte offset %d): %w", lineNo, start, perr)
		}
		if s.Stack != nil {
			samples = append(samples, s)
		}
		if err == io.EOF {
			return samples, nil
		}
	}
}

var errLineTooLong = errors.New("line longer than 16 MiB")

// readLine returns the next line including its "\n" (absent at the end of
// input), refusing lines over maxFoldedLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxFoldedLine {
			return buf, errLineTooLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return buf, err
	}
}

// parseFoldedLine parses one line; a blank line gives a Sample with a nil
// Stack.
func parseFoldedLine(line []byte, intern map[string]string) (Sample, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(bytes.TrimSpace(line)) == 0 {
		return Sample{}, nil
	}
	sp := bytes.LastIndexByte(line, ' ')
	if sp < 0 {
		return Sample{}, errors.New("no count: expected \"frame;frame;... COUNT\"")
	}
	countText := line[sp+1:]
	n, err := strconv.ParseInt(string(countText), 10, 64)
	if err != nil {
		// A fractional count (some converters write them) is not
		// supported; say what was found.
		return Sample{}, fmt.Errorf("bad count %q: want a non-negative integer", clip(countText))
	}
	if n < 0 {
		return Sample{}, fmt.Errorf("negative count %d", n)
	}
	// Only the one space before the count separates; like flamegraph.pl,
	// further spaces belong to the leaf frame's name.
	stackText := line[:sp]
	// Every ';' separates two frames; empty frames at the end are dropped
	// (as flamegraph.pl's split does), so "a;b;" is the stack a, b.
	var stack []string
	for _, f := range bytes.Split(stackText, []byte{';'}) {
		name, ok := intern[string(f)]
		if !ok {
			name = string(f)
			if len(intern) < 1<<20 {
				intern[name] = name
			}
		}
		stack = append(stack, name)
	}
	for len(stack) > 0 && stack[len(stack)-1] == "" {
		stack = stack[:len(stack)-1]
	}
	if len(stack) == 0 {
		return Sample{}, errors.New("empty stack before the count")
	}
	return Sample{Stack: stack, Value: n}, nil
}

// clip shortens text quoted in an error message.
func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}
