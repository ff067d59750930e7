// Package grpcunary calls unary gRPC methods over the standard library's
// HTTP/2 client: plain-text HTTP/2 with prior knowledge (h2c), the
// request message framed as gRPC frames it, the status read from the
// grpc-status and grpc-message trailers (or headers, for a trailers-only
// response).
//
// It exists so that rewind's agent can export OTLP profiles over gRPC
// without linking google.golang.org/grpc, whose package initializers (and
// protobuf's) cost every rewind process its start time. Messages are
// bytes: their encoding is the caller's.
package grpcunary

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Code is a gRPC status code.
type Code uint32

// The status codes of gRPC (grpc/doc/statuscodes.md).
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

var codeNames = [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

// String is the code's name, as gRPC spells it ("Unavailable").
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Error is a call's failure: the status the server answered, or the one
// the failure maps to (Unavailable for a connection that failed,
// DeadlineExceeded or Canceled for the context's end). It unwraps to the
// underlying error, if any.
type Error struct {
	Code    Code
	Message string
	Err     error
}

// Error formats the status as grpc-go does.
func (e *Error) Error() string {
	return "rpc error: code = " + e.Code.String() + " desc = " + e.Message
}

// Unwrap is the transport's or the context's error, or nil.
func (e *Error) Unwrap() error { return e.Err }

// MaxResponse bounds a response's body (its frames) and headers: a larger
// response is an error, never read into memory.
const MaxResponse = 1 << 20

// maxMessage bounds the length shown of a grpc-message.
const maxMessage = 1024

// Client calls methods of one server. Its connection is kept and reused;
// a broken one is redialed by the next call.
type Client struct {
	base string
	hc   *http.Client
	tr   *http.Transport
}

// New returns a client of the plain-text gRPC server at addr (HOST:PORT).
// It connects lazily.
func New(addr string) (*Client, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols:              &p,
		MaxResponseHeaderBytes: 64 << 10,
		IdleConnTimeout:        5 * time.Minute,
		DisableCompression:     true,
	}
	u := url.URL{Scheme: "http", Host: joinHostPort(host, port)}
	return &Client{base: u.String(), hc: &http.Client{Transport: tr}, tr: tr}, nil
}

func splitHostPort(addr string) (host, port string, err error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", fmt.Errorf("%q: want HOST:PORT", addr)
	}
	host, port = addr[:i], addr[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" || strings.ContainsAny(host, "/?#@ ") {
		return "", "", fmt.Errorf("%q: want HOST:PORT", addr)
	}
	return host, port, nil
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// Close closes the idle connections.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// Invoke calls method ("/package.Service/Method") with the encoded
// request message and metadata md (lower-case keys), and returns the
// encoded response message. It ends at ctx's deadline, which it also
// sends to the server (grpc-timeout). A failure is an *Error.
func (c *Client) Invoke(ctx context.Context, method string, md map[string]string, msg []byte) ([]byte, error) {
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+method, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Code: Internal, Message: err.Error(), Err: err}
	}
	req.Header = http.Header{
		"Content-Type": {"application/grpc"},
		"Te":           {"trailers"},
		"User-Agent":   {"rewind-grpcunary"},
	}
	for k, v := range md {
		req.Header.Set(k, v)
	}
	if d, ok := ctx.Deadline(); ok {
		req.Header.Set("Grpc-Timeout", timeout(time.Until(d)))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if len(b) > MaxResponse {
		return nil, &Error{Code: ResourceExhausted, Message: fmt.Sprintf("response larger than %d bytes", MaxResponse)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &Error{Code: httpCode(resp.StatusCode), Message: "HTTP status " + resp.Status}
	}
	// The status is in the trailers, or in the headers of a response
	// without a body (trailers-only).
	st := resp.Trailer
	if st.Get("Grpc-Status") == "" {
		st = resp.Header
	}
	if e := status(st); e != nil {
		return nil, e
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+") && !strings.HasPrefix(ct, "application/grpc;") {
		return nil, &Error{Code: Unknown, Message: fmt.Sprintf("response content-type %q", ct)}
	}
	return Message(b)
}

// status is the error of the status in h (nil for OK), Internal when h has
// no valid grpc-status.
func status(h http.Header) *Error {
	s := h.Get("Grpc-Status")
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return &Error{Code: Internal, Message: fmt.Sprintf("no valid grpc-status in the response (%q)", truncate(s))}
	}
	if n == 0 {
		return nil
	}
	msg := h.Get("Grpc-Message")
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return &Error{Code: Code(n), Message: truncate(msg)}
}

func truncate(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxMessage {
		s = s[:maxMessage] + "..."
	}
	return s
}

// Message is the one message of a unary response's body b: a frame of a
// compressed-flag byte (0: uncompressed; nothing else was asked for), a
// 4-byte big-endian length and the message.
func Message(b []byte) ([]byte, error) {
	if len(b) < 5 {
		return nil, &Error{Code: Internal, Message: fmt.Sprintf("response of %d bytes lacks its message", len(b))}
	}
	if b[0] != 0 {
		return nil, &Error{Code: Internal, Message: fmt.Sprintf("response message compressed (flag %d), though no compression was accepted", b[0])}
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(n) != uint64(len(b)-5) {
		return nil, &Error{Code: Internal, Message: fmt.Sprintf("response frame of %d bytes holds %d bytes", n, len(b)-5)}
	}
	return b[5:], nil
}

// transportError maps an error of the request to its status: the
// context's end, or Unavailable. A call whose deadline has passed failed
// for that deadline even when the context does not say so yet: the server
// also keeps the deadline (from grpc-timeout) and resets the stream when
// it passes (grpc-go sends RST_STREAM CANCEL), and on a busy machine that
// reset can arrive before the client's own timer has fired.
func transportError(ctx context.Context, err error) *Error {
	msg := err.Error()
	if ue, ok := err.(*url.Error); ok {
		msg = ue.Err.Error() // without "Post URL: "
	}
	d, hasDeadline := ctx.Deadline()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded),
		ctx.Err() == nil && hasDeadline && !time.Now().Before(d):
		return &Error{Code: DeadlineExceeded, Message: msg, Err: err}
	case ctx.Err() != nil:
		return &Error{Code: Canceled, Message: msg, Err: err}
	}
	return &Error{Code: Unavailable, Message: msg, Err: err}
}

// httpCode maps an HTTP status other than 200 to a gRPC code, as gRPC's
// doc/http-grpc-status-mapping.md does.
func httpCode(s int) Code {
	switch s {
	case http.StatusBadRequest:
		return Internal
	case http.StatusUnauthorized:
		return Unauthenticated
	case http.StatusForbidden:
		return PermissionDenied
	case http.StatusNotFound:
		return Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Unavailable
	}
	return Unknown
}

// timeout formats d as a grpc-timeout value: at most 8 digits and a unit.
func timeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"n", time.Nanosecond}, {"u", time.Microsecond}, {"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}} {
		if v := (d + u.d - 1) / u.d; v < 1e8 {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return strconv.FormatInt(int64(d/time.Hour)+1, 10) + "H"
}
