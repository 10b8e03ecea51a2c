// Package errs formats wheelq's errors: each says "wheelq: " once, however
// many of the package's errors it wraps.
package errs

import (
	"fmt"
	"strings"
)

// Prefix starts every error wheelq returns.
const Prefix = "wheelq: "

// Errorf is fmt.Errorf, except that when format starts with Prefix the
// errors among a (those formatted with %w or %v) are written without
// their own leading Prefix: "wheelq: cancel t/x: job not found", not
// "wheelq: cancel t/x: wheelq: job not found". errors.Is and errors.As
// see the wrapped errors as fmt.Errorf's would.
func Errorf(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	if !strings.HasPrefix(format, Prefix) {
		return err
	}
	b := make([]any, len(a))
	trimmed := false
	for i, x := range a {
		b[i] = x
		if e, ok := x.(error); ok && e != nil && strings.HasPrefix(e.Error(), Prefix) {
			b[i] = strings.TrimPrefix(e.Error(), Prefix)
			trimmed = true
		}
	}
	if !trimmed {
		return err
	}
	return &wrapped{msg: fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), b...), err: err}
}

// wrapped is an error whose text is msg and whose chain is err's.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }

// Unwrap returns what fmt.Errorf's error wraps: one error, or several.
func (w *wrapped) Unwrap() []error {
	switch u := w.err.(type) {
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	}
	return nil
}
