package accessfile

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/fsnotify/fsnotify"
)

// Following the path's links: a File watches the directory of every link
// on the way to its file, and of the file, so that a change anywhere on
// the way is an event.

// maxLinks bounds the links followed on the way to the file; more is a
// loop. (Linux itself gives up after 40.)
const maxLinks = 255

// maxRewatch bounds the rounds of rewatch; see there.
const maxRewatch = 8

// errLinkLoop is the error of a path with more than maxLinks links on the
// way.
var errLinkLoop = errors.New("too many links (a loop?)")

// watchSet is where a path led when its links were last followed: the
// names whose change may change what the path reads, and the directories
// watched for events on them.
type watchSet struct {
	// names holds each link on the way and the file at its end, or the
	// first part of the way that is missing or unusable, all without links
	// in their directory part (as the watcher names its events).
	names map[string]struct{}
	// dirs holds the directory of each name: the ones watched.
	dirs map[string]struct{}
	// target is the last name: the file, or where the way stopped.
	target string
	// links counts the links followed.
	links int
	// err is why the way stopped short of a file, nil if it did not.
	err error
}

// sameWay reports whether s and o are the same way to the same place.
func (s *watchSet) sameWay(o *watchSet) bool {
	return s.target == o.target && (s.err == nil) == (o.err == nil) && maps.Equal(s.names, o.names)
}

// explain makes a failed load of path that the links of s explain
// (a link that dangles) say so; other errors it returns as they are.
func (s *watchSet) explain(path string, err error) error {
	if s.links > 0 && s.err != nil && errors.Is(err, os.ErrNotExist) && errors.Is(s.err, os.ErrNotExist) {
		return fmt.Errorf("accessfile: %s: dangling link: %w", path, s.err)
	}
	return err
}

// resolve follows the links on the way to path (absolute and clean) one
// part at a time, as the kernel does, and notes every link it passes and
// where it ends. It never fails: a way that stops short (a part missing,
// not a directory, unreadable, or a loop) ends there with the error, so
// that its fixing, an event in a directory that exists, is seen.
func resolve(path string) *watchSet {
	s := &watchSet{names: map[string]struct{}{}, dirs: map[string]struct{}{}}
	note := func(name string, err error) *watchSet {
		s.names[name] = struct{}{}
		s.dirs[filepath.Dir(name)] = struct{}{}
		s.target, s.err = name, err
		return s
	}
	// done is the way so far, with no links in it; todo the parts to go.
	vol := filepath.VolumeName(path)
	done := vol + string(filepath.Separator)
	todo := splitPath(path[len(vol):])
	for len(todo) > 0 {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case ".":
			continue
		case "..":
			done = filepath.Dir(done) // done has no links, so this is its parent
			continue
		}
		p := filepath.Join(done, part)
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			return note(p, err)
		case fi.Mode()&fs.ModeSymlink == 0:
			if len(todo) > 0 && !fi.IsDir() {
				return note(p, &fs.PathError{Op: "lstat", Path: p, Err: syscall.ENOTDIR})
			}
			done = p
			continue
		}
		s.links++
		if s.links > maxLinks {
			return note(p, &fs.PathError{Op: "readlink", Path: p, Err: errLinkLoop})
		}
		dest, err := os.Readlink(p)
		if err != nil {
			return note(p, err)
		}
		note(p, nil)
		if v := filepath.VolumeName(dest); v != "" || (dest != "" && os.IsPathSeparator(dest[0])) {
			if v == "" {
				v = filepath.VolumeName(done)
			}
			done = v + string(filepath.Separator)
			dest = dest[len(filepath.VolumeName(dest)):]
		}
		todo = append(splitPath(dest), todo...)
	}
	return note(done, nil)
}

// splitPath returns the parts of p between separators, without empty
// ones.
func splitPath(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r < utf8.RuneSelf && os.IsPathSeparator(uint8(r)) })
}

// rewatch follows the path's links and watches the directories of what it
// passes, stops watching directories no longer on the way, and returns
// where the path now leads, for concerns. The error is of directories it
// could not watch; after Close it watches nothing and reports nothing.
//
// A link could change between being read and its directory (or the
// directory of where it leads) being watched, and that change would be
// missed. So the links are followed again once the directories are
// watched, until a round needs no new directory: that round's links were
// all read, and its file's directory watched, with their directories
// watched already, so any later change is an event. (A link re-pointed
// without end gives up after maxRewatch rounds, with every directory seen
// watched.)
func (f *File) rewatch() (*watchSet, error) {
	select {
	case <-f.done:
		return resolve(f.path), nil
	default:
	}
	added := map[string]error{}
	var s *watchSet
	for round := 1; ; round++ {
		s = resolve(f.path)
		fresh := false
		for d := range s.dirs {
			if _, ok := added[d]; ok {
				continue
			}
			fresh = true
			// Adding a directory already watched only renews its watch; it
			// is added again each time because the system drops the watch
			// of a directory that was deleted (and one of that name may be
			// back).
			added[d] = f.watcher.Add(d)
		}
		if !fresh || round == maxRewatch {
			break
		}
	}
	prev := f.watching.Swap(s)
	stale := make(map[string]struct{}, len(prev.dirs)+len(added))
	for d := range prev.dirs {
		stale[d] = struct{}{}
	}
	for d := range added {
		stale[d] = struct{}{}
	}
	for d := range stale {
		if _, ok := s.dirs[d]; !ok {
			// An error is a watch already gone (the directory deleted)
			// or a watcher closed: nothing is left watched either way.
			_ = f.watcher.Remove(d)
		}
	}
	var errs []error
	for d := range s.dirs {
		if err := added[d]; err != nil && !errors.Is(err, fsnotify.ErrClosed) {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return s, errors.Join(errs...)
}
