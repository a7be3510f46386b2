package accessfile

import (
	"slices"
	"time"

	"github.com/apigate/ratelimit/access"
)

// DefaultDebounce is the default of WithDebounce, for tests.
const DefaultDebounce = defaultDebounce

// WithDebounce sets how long a File waits after the last change event,
// for tests (see withDebounce).
func WithDebounce(d time.Duration) Option { return withDebounce(d) }

// WatchedDirs returns the directories f's watcher watches, sorted: none
// after Close.
func WatchedDirs(f *File) []string {
	dirs := f.watcher.WatchList()
	slices.Sort(dirs)
	return dirs
}

// CurrentList returns the List f has in force.
func CurrentList(f *File) *access.List { return f.list.Load() }

// LoadFile reads and builds the list at path as a File loads it.
func LoadFile(path string) (*access.List, error) {
	l, _, err := loadFile(path)
	return l, err
}
