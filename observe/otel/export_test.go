package otellimit

// Exported to the tests.
const MeterName = meterName

// ErrClosed is errClosed, for the tests.
var ErrClosed = errClosed
