package keyfuncs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/apigate/ratelimit/core"
)

// Compose returns a key function whose key joins the keys of all fns, in
// order, with "|": Compose(Route(), ip) keys
// "route:GET /users/{id}|ip:203.0.113.7", one bucket per client and
// endpoint. Every part must succeed; the first error is returned, wrapped
// (so errors.Is(err, ErrNoKey) still holds).
//
// Parts are joined as they are. The keys of this package never contain
// "|" except from a user ID, which your application assigns. No function,
// or a nil one, is an error.
func Compose(fns ...Func) (Func, error) {
	fns, err := checkFuncs("Compose", fns)
	if err != nil {
		return nil, err
	}
	if len(fns) == 1 {
		return fns[0], nil
	}
	return func(r Request) (string, error) {
		var stack [8]string
		parts := stack[:0]
		for i, fn := range fns {
			k, err := fn(r)
			if err != nil {
				return "", fmt.Errorf("keyfuncs: Compose part %d: %w", i, err)
			}
			if k == "" {
				return "", fmt.Errorf("%w: Compose part %d returned an empty key", ErrNoKey, i)
			}
			parts = append(parts, k)
		}
		return strings.Join(parts, "|"), nil
	}, nil
}

// FirstOf returns a key function that tries fns in order and returns the
// first key found: FirstOf(user, apiKey, ip) limits signed-in users by ID,
// other API clients by key, and everyone else by IP. It moves on only when
// a function's error wraps [ErrNoKey] (or it returns an empty key); any
// other error is returned at once. When every function fails, the error
// wraps ErrNoKey and each failure. No function, or a nil one, is an error.
//
// The first fallback (a function finds no key and a later one keys the
// request) is logged, once, at slog.LevelWarn on slog.Default() as it is
// then, naming where FirstOf was called, the functions that found none
// with their errors and the one that keyed (never a key); later ones are
// not. A user key read from where the framework does not keep it so shows
// at the first request (see docs/keys.md).
func FirstOf(fns ...Func) (Func, error) {
	fns, err := checkFuncs("FirstOf", fns)
	if err != nil {
		return nil, err
	}
	var reported atomic.Bool // a fallback has been logged
	site := "unknown"        // where FirstOf was called, for the report
	if _, file, line, ok := runtime.Caller(1); ok {
		site = file + ":" + strconv.Itoa(line)
	}
	return func(r Request) (string, error) {
		var stack [4]error // errors are kept as they are: no cost until all fail
		errs := stack[:0]
		for i, fn := range fns {
			k, err := fn(r)
			switch {
			case err == nil && k != "":
				if i > 0 && !reported.Load() && reported.CompareAndSwap(false, true) {
					reportFallback(r.Context(), site, errs, i)
				}
				return k, nil
			case err == nil:
				err = errors.New("empty key")
			case !errors.Is(err, ErrNoKey):
				return "", fmt.Errorf("keyfuncs: FirstOf function %d: %w", i, err)
			}
			errs = append(errs, err)
		}
		all := make([]error, len(errs))
		for i, err := range errs {
			all[i] = fmt.Errorf("function %d: %w", i, err)
		}
		return "", fmt.Errorf("%w: FirstOf: no function found a key: %w", ErrNoKey, errors.Join(all...))
	}, nil
}

// reportFallback logs that the functions before keyedBy of the FirstOf
// called at site found no key, errs[i] being function i's error, and that
// function keyedBy keyed the request: see FirstOf.
func reportFallback(ctx context.Context, site string, errs []error, keyedBy int) {
	var b strings.Builder
	for i, err := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "function %d: %v", i, err)
	}
	slog.Default().LogAttrs(ctx, slog.LevelWarn,
		"keyfuncs: FirstOf fell back: a function found no key and a later one keyed the request; "+
			"if it never finds one, every request is keyed by the fallback (logged once per FirstOf)",
		slog.String("first_of", site),
		slog.String("no_key", b.String()),
		slog.Int("keyed_by_function", keyedBy))
}

// Static returns a key function giving every request the same key,
// "static:" followed by key, for a limit shared by all clients (a global
// limit, or one guarding a fragile backend). An empty key is an error.
func Static(key string) (Func, error) {
	if key == "" {
		return nil, fmt.Errorf("%w: keyfuncs.Static: empty key", core.ErrInvalidOption)
	}
	k := "static:" + key
	return func(Request) (string, error) { return k, nil }, nil
}

// checkFuncs copies fns, so the caller's slice may change afterwards,
// and rejects an empty list or a nil function.
func checkFuncs(name string, fns []Func) ([]Func, error) {
	if len(fns) == 0 {
		return nil, fmt.Errorf("%w: keyfuncs.%s: no key function", core.ErrInvalidOption, name)
	}
	for i, fn := range fns {
		if fn == nil {
			return nil, fmt.Errorf("%w: keyfuncs.%s: key function %d is nil", core.ErrInvalidOption, name, i)
		}
	}
	return append([]Func(nil), fns...), nil
}
