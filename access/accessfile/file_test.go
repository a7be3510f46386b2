package accessfile_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/access/accessfile"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// reload is one OnReload call.
type reload struct {
	list *access.List
	err  error
}

var t0 = time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// syncBuffer is a log or output destination one goroutine writes while
// another reads it.
type syncBuffer = syncbuf.Buffer

// watched starts a File on a fresh file holding content, reporting its
// reloads on the returned channel and its logs in the buffer.
func watched(t *testing.T, content string, opts ...accessfile.Option) (*accessfile.File, string, <-chan reload, *syncBuffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "deny.list")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	f, reloads, logs := watchPath(t, path, opts...)
	return f, path, reloads, logs
}

// watchPath starts a File on path, reporting its reloads on the returned
// channel and its logs in the buffer.
func watchPath(t *testing.T, path string, opts ...accessfile.Option) (*accessfile.File, <-chan reload, *syncBuffer) {
	t.Helper()
	reloads := make(chan reload, 64)
	logs := new(syncBuffer)
	opts = append([]accessfile.Option{
		accessfile.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		accessfile.OnReload(func(l *access.List, err error) { reloads <- reload{l, err} }),
	}, opts...)
	f, err := accessfile.Watch(path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	return f, reloads, logs
}

// await waits, at most testwait.D(10 s), for a reload that satisfies ok;
// other reloads (a file seen half-written) are skipped.
func await(t *testing.T, reloads <-chan reload, ok func(reload) bool) reload {
	t.Helper()
	timeout := time.NewTimer(testwait.D(10 * time.Second))
	defer timeout.Stop()
	for {
		select {
		case r := <-reloads:
			if ok(r) {
				return r
			}
		case <-timeout.C:
			t.Fatalf("no such reload within %v", testwait.D(10*time.Second))
			return reload{}
		}
	}
}

func withLen(n int) func(reload) bool {
	return func(r reload) bool { return r.err == nil && len(r.list.Entries()) == n }
}

func failed(r reload) bool { return r.err != nil }

func matches(f *accessfile.File, a string) bool {
	_, ok := f.Match(addr(a), "", t0)
	return ok
}

// replace writes content beside path and renames it over path, as editors
// and config management do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func TestWatchFileRewriteInPlace(t *testing.T) {
	f, path, reloads, logs := watched(t, "10.0.0.0/8\n")
	assert.Len(t, accessfile.CurrentList(f).Entries(), 1)
	assert.True(t, matches(f, "10.1.1.1"))

	require.NoError(t, os.WriteFile(path, []byte("# now two\n10.0.0.0/8\n192.0.2.0/24 reason=scanner\n"), 0o600))
	r := await(t, reloads, withLen(2))
	assert.Same(t, r.list, accessfile.CurrentList(f))
	assert.True(t, matches(f, "192.0.2.9"))
	assert.Contains(t, logs.String(), "list reloaded")
	assert.Contains(t, logs.String(), "entries=2")
}

func TestWatchFileRenameOver(t *testing.T) {
	for _, debounce := range []time.Duration{0, accessfile.DefaultDebounce} {
		t.Run(debounce.String(), func(t *testing.T) {
			f, path, reloads, _ := watched(t, "10.0.0.0/8\n", accessfile.WithDebounce(debounce))
			replace(t, path, "2001:db8::/32\nuser:42\n")
			await(t, reloads, withLen(2))
			assert.False(t, matches(f, "10.1.1.1"))
			assert.True(t, matches(f, "2001:db8::1"))
			_, ok := f.Match(addr("203.0.113.1"), "user:42", t0)
			assert.True(t, ok)

			replace(t, path, "10.0.0.0/8\n192.0.2.0/24\n198.51.100.0/24\n")
			await(t, reloads, withLen(3))
			assert.True(t, matches(f, "10.1.1.1"))
		})
	}
}

func TestWatchFileBadRewriteKeepsLastGood(t *testing.T) {
	f, path, reloads, logs := watched(t, "10.0.0.0/8\n")
	good := accessfile.CurrentList(f)

	replace(t, path, "10.0.0.0/8\n192.0.2.0/24\n1.2.3.4/33\n")
	r := await(t, reloads, failed)
	require.ErrorIs(t, r.err, access.ErrInvalidEntry)
	assert.ErrorContains(t, r.err, fmt.Sprintf("line %d,", 3))
	assert.Nil(t, r.list)
	assert.Same(t, good, accessfile.CurrentList(f), "the last good list stays")
	assert.True(t, matches(f, "10.1.1.1"))
	assert.False(t, matches(f, "192.0.2.1"), "nothing of the bad file is applied")
	assert.Contains(t, logs.String(), "level=ERROR")
	assert.Contains(t, logs.String(), "keeping the last good one")
	assert.Contains(t, logs.String(), "line 3, column 1")

	// An explicit Reload of the same bad file reports it again.
	err := f.Reload()
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	await(t, reloads, failed)

	// Removing the file is a failed reload too; the list stays.
	require.NoError(t, os.Remove(path))
	r = await(t, reloads, failed)
	assert.ErrorIs(t, r.err, os.ErrNotExist)
	assert.True(t, matches(f, "10.1.1.1"))

	// A good file again is picked up.
	replace(t, path, "192.0.2.0/24\n")
	await(t, reloads, withLen(1))
	assert.False(t, matches(f, "10.1.1.1"))
	assert.True(t, matches(f, "192.0.2.1"))
}

func TestFileReload(t *testing.T) {
	f, path, reloads, _ := watched(t, "10.0.0.0/8\n", accessfile.WithDebounce(time.Minute))
	// With a minute's debounce the watcher will not reload during the
	// test: Reload does it at once.
	require.NoError(t, os.WriteFile(path, []byte("10.0.0.0/8\n192.0.2.0/24\n"), 0o600))
	require.NoError(t, f.Reload())
	assert.Len(t, accessfile.CurrentList(f).Entries(), 2)
	r := <-reloads
	assert.Same(t, accessfile.CurrentList(f), r.list)

	// The same content again changes nothing and reports nothing.
	list := accessfile.CurrentList(f)
	require.NoError(t, f.Reload())
	assert.Same(t, list, accessfile.CurrentList(f))
	assert.Empty(t, reloads)

	require.NoError(t, os.WriteFile(path, []byte("user:\x00\n"), 0o600))
	err := f.Reload()
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	assert.Same(t, list, accessfile.CurrentList(f))
}

func TestWatchFileStartErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.list")
	require.NoError(t, os.WriteFile(bad, []byte("10.0.0.1\n\n  hello\n"), 0o600))
	f, err := accessfile.Watch(bad)
	assert.Nil(t, f)
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	assert.ErrorContains(t, err, fmt.Sprintf("line %d,", 3))
	assert.Contains(t, err.Error(), "line 3, column 3")
	assert.Contains(t, err.Error(), bad)

	_, err = accessfile.Watch(filepath.Join(dir, "missing.list"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = accessfile.Watch(filepath.Join(dir, "no", "such", "dir.list"))
	require.Error(t, err)

	good := filepath.Join(dir, "good.list")
	require.NoError(t, os.WriteFile(good, nil, 0o600))
	for _, opt := range []accessfile.Option{
		nil,
		accessfile.WithLogger(nil),
		accessfile.OnReload(nil),
		accessfile.WithDebounce(-time.Millisecond),
		accessfile.WithDebounce(time.Hour),
	} {
		f, err := accessfile.Watch(good, opt)
		assert.Nil(t, f)
		require.ErrorIs(t, err, core.ErrInvalidOption)
	}
}

func TestFileClose(t *testing.T) {
	f, path, _, _ := watched(t, "10.0.0.0/8\n")
	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "Close twice")
	// The last list stays in force; Reload still works by hand.
	assert.True(t, matches(f, "10.1.1.1"))
	replace(t, path, "192.0.2.0/24\n")
	require.NoError(t, f.Reload())
	assert.True(t, matches(f, "192.0.2.1"))
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.list")
	require.NoError(t, os.WriteFile(path, []byte("# office\n198.51.100.0/24\nuser:42 reason=partner\n"), 0o600))
	l, err := accessfile.LoadFile(path)
	require.NoError(t, err)
	assert.Len(t, l.Entries(), 2)
	e, ok := l.Match(addr("203.0.113.1"), "user:42", t0)
	assert.True(t, ok)
	assert.Equal(t, "partner", e.Reason)

	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("10.0.0.1\n", 3)+"10.0.0.1/33\n"), 0o600))
	l, err = accessfile.LoadFile(path)
	assert.Nil(t, l)
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	assert.ErrorContains(t, err, fmt.Sprintf("line %d,", 4))
	assert.Contains(t, err.Error(), path+": line 4, column 1: ")
}

func TestLoadFileMillionLines(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and loads a million lines")
	}
	const n = 1_000_000
	path := filepath.Join(t.TempDir(), "huge.list")
	fh, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriterSize(fh, 1<<16)
	// Even lines are distinct addresses in 10.0.0.0/8, odd ones keys.
	for i := range n {
		if i%2 == 0 {
			fmt.Fprintf(w, "10.%d.%d.%d\n", i>>16&0xff, i>>8&0xff, i&0xff)
		} else {
			fmt.Fprintf(w, "user:%d reason=generated\n", i)
		}
	}
	require.NoError(t, w.Flush())
	require.NoError(t, fh.Close())

	start := time.Now()
	l, err := accessfile.LoadFile(path)
	require.NoError(t, err)
	t.Logf("LoadFile of %d lines: %v", n, time.Since(start))
	assert.Len(t, l.Entries(), n)
	for _, a := range []string{"10.0.0.0", "10.0.0.2", "10.15.66.62"} {
		_, ok := l.Match(addr(a), "", t0)
		assert.True(t, ok, a)
	}
	_, ok := l.Match(addr("10.0.0.1"), "", t0)
	assert.False(t, ok)
	_, ok = l.Match(netip.Addr{}, "user:999999", t0)
	assert.True(t, ok)

	// The same file with one bad line at the very end loads nothing.
	fh, err = os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fh.WriteString("10.0.0.0/33\n")
	require.NoError(t, err)
	require.NoError(t, fh.Close())
	l, err = accessfile.LoadFile(path)
	assert.Nil(t, l)
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	assert.ErrorContains(t, err, fmt.Sprintf("line %d,", n+1))
}

// A Kubernetes ConfigMap volume: the file is a link through "..data" to a
// timestamped directory, and an update swaps "..data" by a rename.
func TestWatchFileConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	write := func(version, content string) {
		t.Helper()
		d := filepath.Join(dir, version)
		require.NoError(t, os.Mkdir(d, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(d, "deny.list"), []byte(content), 0o600))
		tmp := filepath.Join(dir, "..data_tmp")
		require.NoError(t, os.Symlink(version, tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
	}
	write("..2026_12_03_01", "10.0.0.0/8\n")
	path := filepath.Join(dir, "deny.list")
	require.NoError(t, os.Symlink(filepath.Join("..data", "deny.list"), path))

	reloads := make(chan reload, 64)
	f, err := accessfile.Watch(path,
		accessfile.WithLogger(slog.New(slog.DiscardHandler)),
		accessfile.OnReload(func(l *access.List, err error) { reloads <- reload{l, err} }))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	assert.True(t, matches(f, "10.1.1.1"))

	write("..2026_12_03_02", "192.0.2.0/24\n198.51.100.0/24\n")
	await(t, reloads, withLen(2))
	assert.False(t, matches(f, "10.1.1.1"))
	assert.True(t, matches(f, "198.51.100.1"))
}
