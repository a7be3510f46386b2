package fiberlimit

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
