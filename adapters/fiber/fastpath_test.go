package fiberlimit

import (
	"net/netip"

	"github.com/apigate/ratelimit/keyfuncs"
)

// The response reaches headers.Writer's fast paths for a setter that
// copies bytes and sets two fields to one number, which headers matches
// by method set: had a method drifted, the writer would fall back to Set,
// and allocate, without a word.
var _ interface {
	Set(key, value string)
	SetBytes(key string, value []byte)
	SetInt(key string, n int64)
	SetIntPair(key1, key2 string, n int64)
} = response{}

// The request reaches keyfuncs.ClientIP's fast path, which reads the peer
// without formatting or parsing it; keyfuncs matches it by method set.
var _ interface {
	keyfuncs.Request
	PeerAddrPort() (netip.AddrPort, bool)
} = request{}
