package accessfile_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access/accessfile"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// A watched path that is a symbolic link into another directory, as
// configuration management, ConfigMap mounts and some mounts lay files out.
// These tests use real files and links in t.TempDir(); fsnotify delivers
// the events of all watched directories in the order they happened, which
// is what lets "nothing else changed" be checked without sleeping: a later
// change that is awaited comes after every earlier one.

// realTempDir is t.TempDir() with any links in it followed, so that the
// directories a File watches can be compared with it.
func realTempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return dir
}

// mkdirs makes base/name for each name and returns their paths.
func mkdirs(t *testing.T, base string, names ...string) []string {
	t.Helper()
	var dirs []string
	for _, n := range names {
		d := filepath.Join(base, n)
		require.NoError(t, os.MkdirAll(d, 0o700))
		dirs = append(dirs, d)
	}
	return dirs
}

func write(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// relink points the link at target as old "ln -sfn" does: the link
// removed, then made again (there is a moment with no link).
func relink(t *testing.T, target, link string) {
	t.Helper()
	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(target, link))
}

// swapLink points the link at target atomically, as newer "ln -sfn" and
// Kubernetes do: a new link beside it renamed over it.
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	require.NoError(t, os.Symlink(target, tmp))
	require.NoError(t, os.Rename(tmp, link))
}

// repoint is relink or swapLink.
type repoint struct {
	name string
	fn   func(t *testing.T, target, link string)
}

var repoints = []repoint{{"ln-sfn", relink}, {"rename", swapLink}}

// until waits, at most 10 s, for a reload that satisfies ok and returns
// every reload seen up to it.
func until(t *testing.T, reloads <-chan reload, ok func(reload) bool) []reload {
	t.Helper()
	var seen []reload
	await(t, reloads, func(r reload) bool {
		seen = append(seen, r)
		return ok(r)
	})
	return seen
}

// none asserts that no list of the reloads matches a.
func none(t *testing.T, seen []reload, a string) {
	t.Helper()
	for _, r := range seen {
		if r.list != nil {
			_, ok := r.list.Match(addr(a), "", t0)
			assert.False(t, ok, "a reload put in force a list matching %s", a)
		}
	}
}

// matching is a good reload whose list matches a.
func matching(a string) func(reload) bool {
	return func(r reload) bool {
		if r.err != nil {
			return false
		}
		_, ok := r.list.Match(addr(a), "", t0)
		return ok
	}
}

// logLines returns the lines of logs that contain all of subs.
func logLines(logs *syncBuffer, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(l, s) }) {
			out = append(out, l)
		}
	}
	return out
}

// The target of the link, in another directory, replaced by a rename,
// written in place, deleted and written again.
func TestWatchFileLinkTargetChanges(t *testing.T) {
	for _, debounce := range []time.Duration{0, accessfile.DefaultDebounce} {
		t.Run(debounce.String(), func(t *testing.T) {
			base := realTempDir(t)
			dirs := mkdirs(t, base, "etc", "data")
			link := filepath.Join(dirs[0], "deny.list")
			target := filepath.Join(dirs[1], "deny.list")
			write(t, target, "10.0.0.0/8\n")
			require.NoError(t, os.Symlink(filepath.Join("..", "data", "deny.list"), link))
			f, reloads, logs := watchPath(t, link, accessfile.WithDebounce(debounce))
			assert.True(t, matches(f, "10.1.1.1"))
			assert.ElementsMatch(t, dirs, accessfile.WatchedDirs(f), "the link's directory and the target's")

			replace(t, target, "10.0.0.0/8\n192.0.2.0/24 reason=scanner\n")
			r := await(t, reloads, withLen(2))
			assert.Same(t, r.list, accessfile.CurrentList(f))
			assert.True(t, matches(f, "192.0.2.9"))
			assert.NotEmpty(t, logLines(logs, "list reloaded", "path="+link, "target="+target, "entries=2"))

			write(t, target, "10.0.0.0/8\n192.0.2.0/24\n198.51.100.0/24\n")
			await(t, reloads, withLen(3))
			assert.True(t, matches(f, "198.51.100.7"))
			good := accessfile.CurrentList(f)

			require.NoError(t, os.Remove(target))
			r = await(t, reloads, failed)
			require.ErrorIs(t, r.err, os.ErrNotExist)
			assert.Contains(t, r.err.Error(), link+": dangling link")
			assert.Contains(t, r.err.Error(), target)
			assert.Same(t, good, accessfile.CurrentList(f), "the last good list stays")
			assert.NotEmpty(t, logLines(logs, "level=ERROR", "keeping the last good one", "target="+target))

			write(t, target, "203.0.113.0/24\n")
			await(t, reloads, withLen(1))
			assert.True(t, matches(f, "203.0.113.1"))
			assert.False(t, matches(f, "10.1.1.1"))
			assert.ElementsMatch(t, dirs, accessfile.WatchedDirs(f))
		})
	}
}

// The link re-pointed to a file in a third directory: that file is in
// force, changes to it are seen, the old target's directory is no longer
// watched and changes there change nothing.
func TestWatchFileLinkRepointed(t *testing.T) {
	for _, rp := range repoints {
		t.Run(rp.name, func(t *testing.T) {
			base := realTempDir(t)
			dirs := mkdirs(t, base, "etc", "old", "new")
			link := filepath.Join(dirs[0], "deny.list")
			oldTarget := filepath.Join(dirs[1], "deny.list")
			newTarget := filepath.Join(dirs[2], "other.list")
			write(t, oldTarget, "10.0.0.0/8\n")
			write(t, newTarget, "192.0.2.0/24\n198.51.100.0/24\n")
			require.NoError(t, os.Symlink(oldTarget, link))
			f, reloads, _ := watchPath(t, link)
			assert.ElementsMatch(t, []string{dirs[0], dirs[1]}, accessfile.WatchedDirs(f))

			rp.fn(t, newTarget, link)
			until(t, reloads, withLen(2))
			assert.False(t, matches(f, "10.1.1.1"))
			assert.True(t, matches(f, "198.51.100.1"))
			assert.ElementsMatch(t, []string{dirs[0], dirs[2]}, accessfile.WatchedDirs(f), "the old target's directory is dropped")

			// The old target written, then the new one: once the new one is
			// in force, the old one's events (before it) have been handled,
			// and put nothing in force.
			write(t, oldTarget, "203.0.113.0/24\n")
			replace(t, oldTarget, "203.0.113.0/24\n")
			write(t, newTarget, "192.0.2.0/24\n198.51.100.0/24\n2001:db8::/32\n")
			seen := until(t, reloads, withLen(3))
			none(t, seen, "203.0.113.1")
			assert.False(t, matches(f, "203.0.113.1"))
			assert.True(t, matches(f, "2001:db8::1"))
		})
	}
}

// A chain of links through several directories: each link on the way is
// watched, a link in the middle re-pointed is seen, and a directory that
// leaves the chain is no longer watched.
func TestWatchFileLinkChain(t *testing.T) {
	base := realTempDir(t)
	dirs := mkdirs(t, base, "a", "b", "c", "d", "e")
	link := filepath.Join(dirs[0], "deny.list")
	mid := filepath.Join(dirs[1], "deny.list")
	write(t, filepath.Join(dirs[2], "deny.list"), "10.0.0.0/8\n")
	write(t, filepath.Join(dirs[3], "deny.list"), "10.0.0.0/8\n192.0.2.0/24\n")
	write(t, filepath.Join(dirs[4], "deny.list"), "10.0.0.0/8\n192.0.2.0/24\n198.51.100.0/24\n")
	require.NoError(t, os.Symlink(mid, link))                                  // absolute
	require.NoError(t, os.Symlink(filepath.Join("..", "c", "deny.list"), mid)) // relative
	f, reloads, _ := watchPath(t, link)
	assert.Len(t, accessfile.CurrentList(f).Entries(), 1)
	assert.ElementsMatch(t, dirs[:3], accessfile.WatchedDirs(f))

	swapLink(t, filepath.Join("..", "d", "deny.list"), mid)
	await(t, reloads, withLen(2))
	assert.ElementsMatch(t, []string{dirs[0], dirs[1], dirs[3]}, accessfile.WatchedDirs(f))

	write(t, filepath.Join(dirs[3], "deny.list"), "192.0.2.0/24\n")
	await(t, reloads, withLen(1))
	assert.True(t, matches(f, "192.0.2.1"))

	// The first link past the middle one: b leaves the chain.
	relink(t, filepath.Join(dirs[4], "deny.list"), link)
	await(t, reloads, withLen(3))
	assert.ElementsMatch(t, []string{dirs[0], dirs[4]}, accessfile.WatchedDirs(f))
	swapLink(t, filepath.Join("..", "c", "deny.list"), mid) // no longer on the way
	write(t, filepath.Join(dirs[4], "deny.list"), "2001:db8::/32\n")
	seen := until(t, reloads, matching("2001:db8::1"))
	none(t, seen, "10.1.1.1")
}

// The watched path is a link to a file of a Kubernetes ConfigMap volume
// mounted elsewhere, itself a link through "..data" to a timestamped
// directory: an update (a new directory, "..data" swapped by a rename,
// the old directory removed) is seen and the old directory's watch goes.
func TestWatchFileLinkToConfigMap(t *testing.T) {
	base := realTempDir(t)
	dirs := mkdirs(t, base, "etc", "cm")
	cm := dirs[1]
	update := func(version, content string) string {
		t.Helper()
		d := filepath.Join(cm, version)
		require.NoError(t, os.Mkdir(d, 0o700))
		write(t, filepath.Join(d, "deny.list"), content)
		swapLink(t, version, filepath.Join(cm, "..data"))
		return d
	}
	v1 := update("..2026_12_04_10_00_00.000000001", "10.0.0.0/8\n")
	require.NoError(t, os.Symlink(filepath.Join("..data", "deny.list"), filepath.Join(cm, "deny.list")))
	link := filepath.Join(dirs[0], "deny.list")
	require.NoError(t, os.Symlink(filepath.Join(cm, "deny.list"), link))
	f, reloads, logs := watchPath(t, link)
	assert.ElementsMatch(t, []string{dirs[0], cm, v1}, accessfile.WatchedDirs(f))

	v2 := update("..2026_12_04_10_05_00.000000002", "192.0.2.0/24\n198.51.100.0/24\n")
	require.NoError(t, os.RemoveAll(v1))
	await(t, reloads, withLen(2))
	assert.True(t, matches(f, "198.51.100.1"))
	assert.False(t, matches(f, "10.1.1.1"))
	assert.ElementsMatch(t, []string{dirs[0], cm, v2}, accessfile.WatchedDirs(f))
	assert.NotEmpty(t, logLines(logs, "list reloaded", "target="+filepath.Join(v2, "deny.list")))

	// Not how the kubelet writes, but the file at the end is watched too.
	write(t, filepath.Join(v2, "deny.list"), "2001:db8::/32\n")
	await(t, reloads, withLen(1))
	assert.True(t, matches(f, "2001:db8::1"))
}

// The link dangling for a while (its target missing, then a directory on
// its way missing): each is logged once, the last good list stays in
// force, and it is seen when fixed, by the target appearing or by the
// link re-pointed.
func TestWatchFileLinkDangling(t *testing.T) {
	base := realTempDir(t)
	dirs := mkdirs(t, base, "etc", "data", "other")
	link := filepath.Join(dirs[0], "deny.list")
	first := filepath.Join(dirs[1], "deny.list")
	write(t, first, "10.0.0.0/8\n")
	require.NoError(t, os.Symlink(first, link))
	f, reloads, logs := watchPath(t, link)
	good := accessfile.CurrentList(f)

	missing := filepath.Join(dirs[2], "deny.list")
	swapLink(t, missing, link)
	r := await(t, reloads, failed)
	require.ErrorIs(t, r.err, os.ErrNotExist)
	assert.Contains(t, r.err.Error(), link+": dangling link")
	assert.Contains(t, r.err.Error(), missing)
	assert.Same(t, good, accessfile.CurrentList(f), "the last good list stays")
	assert.True(t, matches(f, "10.1.1.1"))
	assert.Len(t, logLines(logs, "level=ERROR", "keeping the last good one", "target="+missing), 1)
	assert.ElementsMatch(t, []string{dirs[0], dirs[2]}, accessfile.WatchedDirs(f))

	// While it dangles, the old target changing changes nothing (it is
	// not watched), and Reload says the same again.
	write(t, first, "203.0.113.0/24\n")
	err := f.Reload()
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, r.err.Error(), err.Error())
	await(t, reloads, failed)
	assert.Same(t, good, accessfile.CurrentList(f))

	// Fixed by the target appearing.
	replace(t, missing, "192.0.2.0/24\n198.51.100.0/24\n")
	seen := until(t, reloads, withLen(2))
	none(t, seen, "203.0.113.1")
	assert.True(t, matches(f, "192.0.2.1"))
	good = accessfile.CurrentList(f)

	// Dangling into a directory that is not there yet: its parent is
	// watched until it is made.
	later := filepath.Join(base, "later")
	relink(t, filepath.Join(later, "deny.list"), link)
	// (A reload may see the link removed before it is made again.)
	r = await(t, reloads, func(r reload) bool { return r.err != nil && strings.Contains(r.err.Error(), later) })
	require.ErrorIs(t, r.err, os.ErrNotExist)
	assert.Contains(t, r.err.Error(), link+": dangling link")
	assert.Same(t, good, accessfile.CurrentList(f))
	assert.ElementsMatch(t, []string{base, dirs[0]}, accessfile.WatchedDirs(f))
	require.NoError(t, os.Mkdir(later, 0o700))
	write(t, filepath.Join(later, "deny.list"), "2001:db8::/32\n")
	await(t, reloads, withLen(1))
	assert.True(t, matches(f, "2001:db8::1"))
	assert.ElementsMatch(t, []string{dirs[0], later}, accessfile.WatchedDirs(f))

	// Dangling again, then fixed by the link re-pointed to a good file.
	require.NoError(t, os.RemoveAll(later))
	await(t, reloads, failed)
	assert.True(t, matches(f, "2001:db8::1"))
	swapLink(t, first, link)
	await(t, reloads, matching("203.0.113.1"))
	assert.ElementsMatch(t, []string{dirs[0], dirs[1]}, accessfile.WatchedDirs(f))
}

// Links in a loop are a failed reload, logged, and seen when broken.
func TestWatchFileLinkLoop(t *testing.T) {
	base := realTempDir(t)
	dirs := mkdirs(t, base, "etc", "data")
	link := filepath.Join(dirs[0], "deny.list")
	write(t, filepath.Join(dirs[1], "deny.list"), "10.0.0.0/8\n")
	require.NoError(t, os.Symlink(filepath.Join(dirs[1], "deny.list"), link))
	f, reloads, logs := watchPath(t, link)

	other := filepath.Join(dirs[1], "other.list")
	require.NoError(t, os.Symlink(link, other))
	swapLink(t, other, link)
	r := await(t, reloads, failed)
	assert.NotErrorIs(t, r.err, os.ErrNotExist)
	assert.True(t, matches(f, "10.1.1.1"))
	assert.NotEmpty(t, logLines(logs, "level=ERROR", "keeping the last good one"))

	// other is on the way, so its directory is watched.
	require.NoError(t, os.Remove(other))
	write(t, other, "192.0.2.0/24\n")
	await(t, reloads, matching("192.0.2.1"))
}

// A link moved around many times leaves watched only the directories on
// its way, in fsnotify's books and the kernel's, and Close ends the
// watching goroutines and every watch.
func TestWatchFileLinkNoLeaks(t *testing.T) {
	goroutines := func() int {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		// By creator, which a goroutine not yet run names too.
		return bytes.Count(buf, []byte("created by github.com/apigate/ratelimit/access/accessfile.Watch ")) +
			bytes.Count(buf, []byte("created by github.com/fsnotify/fsnotify.newBackend "))
	}
	// An earlier test's watcher, closed, may not have quite left the
	// scheduler's list yet: start from none.
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() bool { return goroutines() == 0 }, "the watchers of earlier tests ended")
	startGoroutines, startWatches := goroutines(), kernelWatches(t)

	base := realTempDir(t)
	dirs := mkdirs(t, base, "etc", "d0", "d1", "d2", "d3", "d4")
	link := filepath.Join(dirs[0], "deny.list")
	for i, d := range dirs[1:] {
		write(t, filepath.Join(d, "deny.list"), userLines(i+1))
	}
	require.NoError(t, os.Symlink(filepath.Join(dirs[1], "deny.list"), link))
	f, reloads, _ := watchPath(t, link, accessfile.WithDebounce(0))
	if runtime.GOOS == "linux" {
		assert.Equal(t, startGoroutines+2, goroutines(), "the File's and fsnotify's")
	}

	for round := range 3 {
		for i, d := range dirs[1:] {
			if round == 0 && i == 0 {
				continue
			}
			repoints[(round+i)%2].fn(t, filepath.Join(d, "deny.list"), link)
			await(t, reloads, withLen(i+1))
			require.ElementsMatch(t, []string{dirs[0], d}, accessfile.WatchedDirs(f), "round %d, %s", round, d)
			if runtime.GOOS == "linux" {
				require.Equal(t, startWatches+2, kernelWatches(t), "round %d, %s", round, d)
			}
		}
	}

	require.NoError(t, f.Close())
	assert.Empty(t, accessfile.WatchedDirs(f))
	if runtime.GOOS == "linux" {
		assert.Equal(t, startWatches, kernelWatches(t))
		// Close waits for both goroutines to return; they may not have
		// quite left the scheduler's list yet.
		testwait.For(t, 10*time.Second, 10*time.Millisecond, func() bool { return goroutines() == startGoroutines }, "the File's goroutines ended")
	}
	// Once closed, changes are not followed and Reload still reads.
	require.NoError(t, f.Reload())
	assert.Empty(t, accessfile.WatchedDirs(f))
}

// userLines is n distinct user entries.
func userLines(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("user:")
		b.WriteByte(byte('a' + i))
		b.WriteByte('\n')
	}
	return b.String()
}

// kernelWatches counts the inotify watches the process holds, from
// /proc/self/fdinfo (Linux only; 0 elsewhere).
func kernelWatches(t *testing.T) int {
	t.Helper()
	if runtime.GOOS != "linux" {
		return 0
	}
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, fd := range fds {
		dest, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil || dest != "anon_inode:inotify" {
			continue // closed since the listing, or not inotify
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err != nil {
			continue
		}
		n += strings.Count(string(info), "inotify wd:")
	}
	return n
}
