package core_test

import (
	"testing"
	"unsafe"

	"github.com/apigate/ratelimit/core"
)

// TestCopiedTypesAreWholeVectors: the values every decision copies are a
// whole number of 16-byte vectors, so that no copy's moves overlap (see
// the padding in Policy). A field added to one of them must keep it so.
func TestCopiedTypesAreWholeVectors(t *testing.T) {
	for name, size := range map[string]uintptr{
		"Policy":   unsafe.Sizeof(core.Policy{}),
		"Decision": unsafe.Sizeof(core.Decision{}),
		"Request":  unsafe.Sizeof(core.Request{}),
	} {
		if size%16 != 0 {
			t.Errorf("core.%s is %d bytes, not a multiple of 16", name, size)
		}
	}
}
