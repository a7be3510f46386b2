package memstore

// The options' defaults and bounds, exported to the tests.
const (
	DefaultCleanupInterval = defaultCleanupInterval
	MinCleanupInterval     = minCleanupInterval
	MaxShards              = maxShards
	DefaultMaxKeys         = defaultMaxKeys
)
