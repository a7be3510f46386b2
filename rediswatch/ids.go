package rediswatch

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/rules/accessentry"
)

// parseSeq returns a version as a number, 0 if it is none.
func parseSeq(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// errMalformed is wrapped by the reason a ban in Redis was skipped.
var errMalformed = errors.New("malformed ban")

// idOf returns the id of e's target.
func idOf(e access.Entry) string {
	if e.Key != "" {
		return "k:" + e.Key
	}
	return "p:" + e.Prefix.String()
}

// parseTarget reads the target of an id; anything but what idOf writes is
// an error.
func parseTarget(id string) (access.Entry, error) {
	e, err := splitID(id)
	if err != nil {
		return e, err
	}
	return canonical(e)
}

// splitID reads an id's kind and target, unchecked.
func splitID(id string) (access.Entry, error) {
	var e access.Entry
	kind, target, ok := strings.Cut(id, ":")
	switch {
	case !ok:
		return e, fmt.Errorf("%w: id without a kind", errMalformed)
	case kind == "k":
		e.Key = target
	case kind == "p":
		p, err := netip.ParsePrefix(target)
		if err != nil {
			return e, fmt.Errorf("%w: %v", errMalformed, err)
		}
		e.Prefix = p
	default:
		return e, fmt.Errorf("%w: id of kind %s", errMalformed, clip(kind))
	}
	return e, nil
}

// normalize checks e as access.NewList does, and returns it in the form
// a List stores it (the range masked, an IPv4-mapped one folded to IPv4).
// An invalid e is an error wrapping access.ErrInvalidEntry.
func normalize(e access.Entry) (access.Entry, error) {
	p, err := accessentry.Check(e.Prefix, e.Key, e.Reason)
	if err != nil {
		return access.Entry{}, fmt.Errorf("%w: %w", access.ErrInvalidEntry, err)
	}
	e.Prefix = p
	return e, nil
}

// liveAt reports whether e matches at now: it is permanent or expires
// after now.
func liveAt(e access.Entry, now time.Time) bool {
	return e.Expires.IsZero() || now.Before(e.Expires)
}

// canonical checks e as normalize does, and that its range is in the form
// Normalize gives it.
func canonical(e access.Entry) (access.Entry, error) {
	n, err := normalize(e)
	if err != nil {
		return e, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if n.Prefix != e.Prefix {
		return e, fmt.Errorf("%w: range %v is not in its canonical form %v", errMalformed, e.Prefix, n.Prefix)
	}
	return n, nil
}

// parse reads one ban from its id and its value; anything but what Ban
// writes is an error.
func parse(id, value string) (access.Entry, error) {
	e, err := splitID(id)
	if err != nil {
		return e, err
	}
	version, rest, ok := strings.Cut(value, "|")
	if !ok || version != "v1" {
		return e, fmt.Errorf("%w: value %s is not v1|<expires_ms>|<reason>", errMalformed, clip(value))
	}
	expires, reason, ok := strings.Cut(rest, "|")
	ms, err := strconv.ParseInt(expires, 10, 64)
	if !ok || err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return e, fmt.Errorf("%w: value %s is not v1|<expires_ms>|<reason>", errMalformed, clip(value))
	}
	if ms != 0 {
		e.Expires = time.UnixMilli(ms)
	}
	e.Reason = reason
	return canonical(e)
}
