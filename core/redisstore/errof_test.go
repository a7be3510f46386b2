package redisstore

import "time"

// errOf is the error of a TakeAll, for assertions on it alone.
func errOf(_ time.Time, err error) error { return err }

// errOfN is the error of takeAllUntil, for assertions on it alone.
func errOfN(_ int64, err error) error { return err }
