package httplimit

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
)

// PanicError is the error of a panic that the flow recovered: in a
// function given to it (skip, key or cost function, the responder, the
// error handler), or in the Limiter, its policy sources or its store. It is answered 500
// whatever its value; errors.As(err, new(*PanicError)) tells it apart.
// Its message names where the panic happened: "httplimit: panic in
// <where>: <Value>", where is "key function", "cost function", "skip
// function", "limiter" (its policy sources and store too), "responder",
// "error handler", "headers" or "access list".
type PanicError struct {
	in string // where the panic happened
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, as debug.Stack formats it.
	Stack []byte
}

// Error returns "httplimit: panic in <where>: <Value>".
func (e *PanicError) Error() string {
	return fmt.Sprintf("httplimit: panic in %s: %v", e.in, e.Value)
}

// Unwrap returns Value when it is an error, and nil otherwise.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// isPanic reports whether err is, or wraps, a *PanicError.
func isPanic(err error) bool {
	var pe *PanicError
	return errors.As(err, &pe)
}

// Where the flow is, for the PanicError of a panic recovered there.
const (
	inSkip         = "skip function"
	inKey          = "key function"
	inCost         = "cost function"
	inLimiter      = "limiter"
	inHeaders      = "headers"
	inResponder    = "responder"
	inErrorHandler = "error handler"
)

// state is where one run of the flow is, and the guard of its response
// once a handler or responder may have written it. It lives on Serve's
// stack.
type state struct {
	in string
	w  *writeOnce
	// repKey is the client address's key, which the reputation's signals
	// count toward, once the flow has had it (matching the bans), for
	// Serve to reuse.
	repKey string
}

// guard returns w wrapped so that the flow knows whether it was written.
func (st *state) guard(w Response) Response {
	if st.w == nil {
		st.w = &writeOnce{Response: w}
	}
	return st.w
}

// written reports whether a handler or responder wrote the response.
func (st *state) written() bool { return st.w != nil && st.w.wrote }

// writeOnce is a Response that lets through one Write only, and remembers
// it.
type writeOnce struct {
	Response
	wrote bool
}

// errWritten is returned by a second Write of one response.
var errWritten = errors.New("httplimit: response already written")

func (w *writeOnce) Write(status int, contentType string, body []byte) error {
	if w.wrote {
		return errWritten
	}
	w.wrote = true
	return w.Response.Write(status, contentType, body)
}

// recovered handles a panic with value v recovered from the flow: it reports
// a *PanicError to the ErrorHandler (to LogErrors(nil) when the
// ErrorHandler is what panicked, or panics again), then answers 500 with
// the Responder (DefaultResponder when the Responder is what panicked, or
// panics again, or writes nothing) unless the response has
// already been written. It never panics itself.
func (f *Flow) recovered(r keyfuncs.Request, w Response, st *state, v any) {
	err := &PanicError{in: st.in, Value: v, Stack: debug.Stack()}
	if st.in == inErrorHandler || !try(func() { f.onError(r, err) }) {
		try(func() { LogErrors(nil)(r, err) })
	}
	if st.written() {
		return
	}
	g := st.guard(w)
	if st.in != inResponder {
		try(func() { f.respond(r, g, core.Decision{}, err) })
	}
	if !st.written() {
		try(func() { DefaultResponder(r, g, core.Decision{}, err) })
	}
}

// try calls fn and reports whether it returned without panicking.
func try(fn func()) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	fn()
	return true
}
