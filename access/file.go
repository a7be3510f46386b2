package access

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a [File] waits after the last change event
// before it reloads, so that a burst of writes is read once.
const DefaultDebounce = 100 * time.Millisecond

// maxDebounce bounds WithDebounce.
const maxDebounce = time.Minute

// LoadFile reads the file at path in the line format (see the package
// doc) and builds a List of its entries. A malformed line is an error
// wrapping a *ParseError that names it; no List is built then.
func LoadFile(path string) (*List, error) {
	l, _, err := loadFile(path)
	return l, err
}

// loadFile reads, parses and builds, and returns the SHA-256 of what it
// read (the whole file, bounded by MaxFileBytes, even when a line is bad).
func loadFile(path string) (*List, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	fh, err := os.Open(path)
	if err != nil {
		return nil, sum, fmt.Errorf("access: %w", err)
	}
	defer fh.Close()
	h := sha256.New()
	r := io.TeeReader(io.LimitReader(fh, MaxFileBytes+1), h)
	entries, err := Parse(r)
	if _, cerr := io.Copy(io.Discard, r); cerr != nil && err == nil {
		err = cerr
	}
	h.Sum(sum[:0])
	if err != nil {
		return nil, sum, fmt.Errorf("access: %s: %w", path, err)
	}
	l, err := NewList(entries...)
	if err != nil {
		return nil, sum, fmt.Errorf("access: %s: %w", path, err)
	}
	return l, sum, nil
}

// FileOption configures [WatchFile]. A bad value makes WatchFile return an
// error wrapping core.ErrInvalidOption.
type FileOption func(*fileConfig) error

type fileConfig struct {
	logger   *slog.Logger
	onReload func(*List, error)
	debounce time.Duration
}

// WithLogger sets where a File logs its reloads: each new list at Info,
// each failed reload (the last good list kept) at Error. The default is
// slog.Default().
func WithLogger(l *slog.Logger) FileOption {
	return func(c *fileConfig) error {
		if l == nil {
			return fmt.Errorf("%w: access.WithLogger: nil logger", core.ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// OnReload sets a function called after each reload that changed
// something: with the new List and a nil error once it is in place, or
// with a nil List and the error when the file was bad and the last good
// list kept. An unchanged file calls nothing; a bad file is reported once
// until it changes. fn runs on the watching goroutine (or the caller of
// Reload) and must not call Reload or Close.
func OnReload(fn func(*List, error)) FileOption {
	return func(c *fileConfig) error {
		if fn == nil {
			return fmt.Errorf("%w: access.OnReload: nil function", core.ErrInvalidOption)
		}
		c.onReload = fn
		return nil
	}
}

// WithDebounce sets how long a File waits after the last change event
// before it reloads, from 0 (at once, on every event) to a minute. The
// default is DefaultDebounce.
func WithDebounce(d time.Duration) FileOption {
	return func(c *fileConfig) error {
		if d < 0 || d > maxDebounce {
			return fmt.Errorf("%w: access.WithDebounce: %v is out of range [0, %v]", core.ErrInvalidOption, d, maxDebounce)
		}
		c.debounce = d
		return nil
	}
}

// File is a List kept in step with a file. It watches the file's
// directory, so that a file replaced by a rename (as editors, config
// management and Kubernetes ConfigMap volumes do) is seen as well as one
// written in place, and reloads the file a short while (WithDebounce)
// after it changes. A reload that fails (a malformed line, a missing or
// unreadable file) is logged and the last good list stays in force.
//
// A malformed line on reload is "logged and skipped" in the strictest
// sense: the whole new version of the file is skipped, not only that line.
// Applying the other lines would half-apply an edit (a deny entry removed
// on one line and its replacement broken on the next would let a client
// through), so a file is in force whole or not at all. The log line and
// OnReload's error name the first bad line; the file is read again when it
// next changes.
//
// Writing a file in place can be seen half-written; replacing it by a
// rename is atomic and recommended.
//
// A File is safe for concurrent use; Match reads the current List with
// one atomic load.
type File struct {
	path string
	cfg  fileConfig
	list atomic.Pointer[List]

	mu      sync.Mutex // serializes reloads; guards the fields below
	goodSum [sha256.Size]byte
	lastBad string // what the last failed reload read, "" after a good one

	watcher   *fsnotify.Watcher
	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ Matcher = (*File)(nil)

// WatchFile loads the file at path and watches it for changes. A file
// that does not load at start is an error (wrapping a *ParseError for a
// malformed line), as is a bad option or a directory that cannot be
// watched. Close stops the watching.
func WatchFile(path string, opts ...FileOption) (*File, error) {
	cfg := fileConfig{logger: slog.Default(), debounce: DefaultDebounce}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: access.WatchFile: nil option", core.ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("access: watching %s: %w", abs, err)
	}
	// Watch before the first load, so that no change falls between them.
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return nil, fmt.Errorf("access: watching %s: %w", abs, err)
	}
	l, sum, err := loadFile(abs)
	if err != nil {
		w.Close()
		return nil, err
	}
	f := &File{
		path:    abs,
		cfg:     cfg,
		goodSum: sum,
		watcher: w,
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	f.list.Store(l)
	go f.watch()
	return f, nil
}

// Match reports the entry of the current List that matches; see
// [List.Match].
func (f *File) Match(addr netip.Addr, key string, now time.Time) (Entry, bool) {
	return f.list.Load().Match(addr, key, now)
}

// List returns the List in force.
func (f *File) List() *List { return f.list.Load() }

// Path returns the absolute path of the file.
func (f *File) Path() string { return f.path }

// Reload reads the file now, as a change event would, and puts its list
// in force if it is good. A bad file is an error, logged, and the last
// good list stays.
func (f *File) Reload() error { return f.reload(true) }

// reload loads the file; explicit reloads log and report a bad file even
// when it is the same bad file as last time.
func (f *File) reload(explicit bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, sum, err := loadFile(f.path)
	if err != nil {
		bad := err.Error()
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
			bad = hex.EncodeToString(sum[:])
		}
		if explicit || bad != f.lastBad {
			f.lastBad = bad
			f.cfg.logger.Error("access: reloading a list failed; keeping the last good one",
				slog.String("path", f.path), slog.Any("error", err))
			if f.cfg.onReload != nil {
				f.cfg.onReload(nil, err)
			}
		}
		return err
	}
	f.lastBad = ""
	if bytes.Equal(sum[:], f.goodSum[:]) {
		return nil
	}
	f.goodSum = sum
	f.list.Store(l)
	f.cfg.logger.Info("access: list reloaded", slog.String("path", f.path), slog.Int("entries", l.Len()))
	if f.cfg.onReload != nil {
		f.cfg.onReload(l, nil)
	}
	return nil
}

// watch reloads after events that concern the file, debounced, until
// Close.
func (f *File) watch() {
	defer close(f.stopped)
	var (
		timer *time.Timer
		fire  <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-f.done:
			return
		case ev, ok := <-f.watcher.Events:
			if !ok {
				return
			}
			if !f.concerns(ev) {
				continue
			}
			if f.cfg.debounce == 0 {
				_ = f.reload(false)
				continue
			}
			if timer == nil {
				timer = time.NewTimer(f.cfg.debounce)
			} else {
				timer.Reset(f.cfg.debounce)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			_ = f.reload(false)
		case err, ok := <-f.watcher.Errors:
			if !ok {
				return
			}
			f.cfg.logger.Warn("access: watching a list file", slog.String("path", f.path), slog.Any("error", err))
		}
	}
}

// concerns reports whether ev may have changed the file: an event on its
// name, or on the "..data" link that Kubernetes swaps to update a volume.
func (f *File) concerns(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	return name == f.path || filepath.Base(name) == "..data"
}

// Close stops watching the file; the last List stays in force for Match.
// It waits for the watching goroutine to end and may be called more than
// once.
func (f *File) Close() error {
	f.closeOnce.Do(func() {
		close(f.done)
		f.closeErr = f.watcher.Close()
		<-f.stopped
	})
	return f.closeErr
}
