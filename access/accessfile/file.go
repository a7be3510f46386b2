// Package accessfile keeps an access.List in step with a file in the
// line format of access.Parse: [Watch] loads the file, watches it and
// reloads it when it changes, keeping the last good list when a new
// version is malformed. A [File] is an access.Matcher, for
// httplimit.WithAllowList and httplimit.WithDenyList.
//
// It is a package of its own so that a program that builds its lists
// in code does not compile the file watcher (github.com/fsnotify/fsnotify).
package accessfile

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

	"github.com/fsnotify/fsnotify"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
)

// defaultDebounce is how long a [File] waits after the last change event
// before it reloads, so that a burst of writes is read once.
const defaultDebounce = 100 * time.Millisecond

// maxDebounce bounds withDebounce.
const maxDebounce = time.Minute

// maxFileBytes is the bound of access.Parse on a list's text (256 MiB):
// loadFile reads and hashes no more than one byte past it.
const maxFileBytes = 256 << 20

// loadFile reads, parses and builds, and returns the SHA-256 of what it
// read (the whole file, bounded by maxFileBytes, even when a line is bad).
func loadFile(path string) (*access.List, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	fh, err := os.Open(path)
	if err != nil {
		return nil, sum, fmt.Errorf("accessfile: %w", err)
	}
	defer fh.Close()
	h := sha256.New()
	r := io.TeeReader(io.LimitReader(fh, maxFileBytes+1), h)
	entries, err := access.Parse(r)
	if _, cerr := io.Copy(io.Discard, r); cerr != nil && err == nil {
		err = cerr
	}
	h.Sum(sum[:0])
	if err != nil {
		return nil, sum, fmt.Errorf("accessfile: %s: %w", path, err)
	}
	l, err := access.NewList(entries...)
	if err != nil {
		return nil, sum, fmt.Errorf("accessfile: %s: %w", path, err)
	}
	return l, sum, nil
}

// Option configures [Watch]. A bad value makes Watch return an error
// wrapping core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	logger   *slog.Logger
	onReload func(*access.List, error)
	debounce time.Duration
}

// WithLogger sets where a File logs its reloads: each new list at Info,
// each failed reload (the last good list kept) at Error. The default is
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: accessfile.WithLogger: nil logger", core.ErrInvalidOption)
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
func OnReload(fn func(*access.List, error)) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: accessfile.OnReload: nil function", core.ErrInvalidOption)
		}
		c.onReload = fn
		return nil
	}
}

// withDebounce sets how long a File waits after the last change event
// before it reloads, from 0 (at once, on every event) to a minute, for the
// package's tests; 100 ms otherwise.
func withDebounce(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > maxDebounce {
			return fmt.Errorf("%w: accessfile.WithDebounce: %v is out of range [0, %v]", core.ErrInvalidOption, d, maxDebounce)
		}
		c.debounce = d
		return nil
	}
}

// File is an access.List kept in step with a file; [Watch] builds it. It
// reloads the file a short while (100 ms) after its last change, be it
// written in place or replaced by a rename, as editors, config management
// and Kubernetes ConfigMap volumes do; a rename is atomic and
// recommended, as a file written in place can be read half-written. The
// path may be, or pass through, symbolic links into other directories: a
// re-pointed link (ln -sfn) or a file deleted and recreated is seen too.
//
// A reload that fails (a malformed line, a missing or unreadable file, a
// dangling link) is logged and the last good list stays in force: a file
// is in force whole or not at all, never half an edit. The log line and
// OnReload's error name the first bad line; the file is read again when
// it next changes. A File is safe for concurrent use.
type File struct {
	// A File watches the directory of the file the path ends at, and the
	// directory of every link on the way, so that a rename over the file
	// or a link is seen as well as a write in place; it follows the links
	// again on each change, and stops watching a directory no longer on
	// the way. A malformed line skips the whole new version, not only the
	// line: applying the others would half-apply an edit (a deny entry
	// removed on one line and its replacement broken on the next would let
	// a client through). Match reads the current List with one atomic load.
	path string
	cfg  config
	list atomic.Pointer[access.List]

	mu      sync.Mutex // serializes reloads; guards the fields below
	goodSum [sha256.Size]byte
	lastBad string // what the last failed reload read, "" after a good one

	watcher *fsnotify.Watcher
	// watching is what the path resolved to when last followed, and so
	// which events concern it; written under mu, read by the watching
	// goroutine without it.
	watching  atomic.Pointer[watchSet]
	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ access.Matcher = (*File)(nil)

// Watch loads the file at path and watches it for changes. A file that
// does not load at start is an error (naming the line and column of a
// malformed line), as is a bad option or a directory that cannot be
// watched (the file's, or that of a link on the way to it; see [File]).
// Close stops the watching.
func Watch(path string, opts ...Option) (*File, error) {
	cfg := config{logger: slog.Default(), debounce: defaultDebounce}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: accessfile.Watch: nil option", core.ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("accessfile: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("accessfile: watching %s: %w", abs, err)
	}
	f := &File{
		path:    abs,
		cfg:     cfg,
		watcher: w,
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	f.watching.Store(&watchSet{})
	// Watch before the first load, so that no change falls between them.
	ld := f.load()
	if ld.watchErr != nil {
		w.Close()
		return nil, fmt.Errorf("accessfile: watching %s: %w", abs, ld.watchErr)
	}
	l, sum, err := ld.list, ld.sum, ld.err
	if err != nil {
		w.Close()
		return nil, err
	}
	f.goodSum = sum
	f.list.Store(l)
	go f.watch()
	return f, nil
}

// Match reports the entry of the current list that matches; see
// access.List.Match.
func (f *File) Match(addr netip.Addr, key string, now time.Time) (access.Entry, bool) {
	return f.list.Load().Match(addr, key, now)
}

// Entries returns a copy of the entries of the list in force; see
// access.List.Entries.
func (f *File) Entries() []access.Entry { return f.list.Load().Entries() }

// Reload reads the file now, as a change event would, and puts its list
// in force if it is good. A bad file is an error, logged, and the last
// good list stays.
func (f *File) Reload() error { return f.reload(true) }

// reload follows the path's links again (watching where they now lead)
// and loads the file; explicit reloads log and report a bad file even
// when it is the same bad file as last time.
func (f *File) reload(explicit bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ld := f.load()
	s, l, sum, err := ld.way, ld.list, ld.sum, ld.err
	if ld.watchErr != nil {
		// The list can still be read; only later changes may be missed.
		f.cfg.logger.Error("accessfile: watching a list file failed; later changes to it may be missed",
			f.pathAttrs(s, slog.Any("error", ld.watchErr))...)
	}
	if err != nil {
		bad := err.Error()
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
			bad = hex.EncodeToString(sum[:])
		}
		if explicit || bad != f.lastBad {
			f.lastBad = bad
			f.cfg.logger.Error("accessfile: reloading a list failed; keeping the last good one",
				f.pathAttrs(s, slog.Any("error", err))...)
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
	f.cfg.logger.Info("accessfile: list reloaded", f.pathAttrs(s, slog.Int("entries", len(l.Entries())))...)
	if f.cfg.onReload != nil {
		f.cfg.onReload(l, nil)
	}
	return nil
}

// loaded is what load did.
type loaded struct {
	way      *watchSet    // where the path led, now watched
	watchErr error        // of directories on the way that could not be watched
	list     *access.List // and the rest as from loadFile, the error explained
	sum      [sha256.Size]byte
	err      error
}

// load follows the path's links, watches their way (rewatch) and loads
// the file. The links may move while the file is read, and what was read
// then be the file at the end of a way not yet watched: so the links are
// followed again after the read, and all of it done again if they moved,
// until they stay put (at most maxRewatch times). A move has an event on
// its way in any case; this makes the watches cover the file read before
// its list is put in force and reported, so that a reported list always
// came from a watched file.
func (f *File) load() loaded {
	var ld loaded
	for round := 1; ; round++ {
		ld.way, ld.watchErr = f.rewatch()
		ld.list, ld.sum, ld.err = loadFile(f.path)
		if round == maxRewatch || ld.way.sameWay(resolve(f.path)) {
			break
		}
	}
	if ld.err != nil {
		ld.err = ld.way.explain(f.path, ld.err)
	}
	return ld
}

// pathAttrs are the attributes of a log line about the file: its path,
// where it led if that is elsewhere, and more.
func (f *File) pathAttrs(s *watchSet, more ...any) []any {
	attrs := []any{slog.String("path", f.path)}
	if s.target != "" && s.target != f.path {
		attrs = append(attrs, slog.String("target", s.target))
	}
	return append(attrs, more...)
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
			f.cfg.logger.Warn("accessfile: watching a list file", slog.String("path", f.path), slog.Any("error", err))
		}
	}
}

// concerns reports whether ev may have changed what the path reads: an
// event on a link on the way, on the file it led to (or the first part of
// the way missing), or on a watched directory itself (deleted or moved).
func (f *File) concerns(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	s := f.watching.Load()
	_, ok := s.names[name]
	if !ok {
		_, ok = s.dirs[name]
	}
	return ok
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
