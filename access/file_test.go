package access_test

import (
	"bufio"
	"io"
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
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// reload is one OnReload call.
type reload struct {
	list *access.List
	err  error
}

// syncBuffer is a log or output destination one goroutine writes while
// another reads it.
type syncBuffer = syncbuf.Buffer

// watched starts a File on a fresh file holding content, reporting its
// reloads on the returned channel and its logs in the buffer.
func watched(t *testing.T, content string, opts ...access.FileOption) (*access.File, string, <-chan reload, *syncBuffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "deny.list")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	f, reloads, logs := watchPath(t, path, opts...)
	return f, path, reloads, logs
}

// watchPath starts a File on path, reporting its reloads on the returned
// channel and its logs in the buffer.
func watchPath(t *testing.T, path string, opts ...access.FileOption) (*access.File, <-chan reload, *syncBuffer) {
	t.Helper()
	reloads := make(chan reload, 64)
	logs := new(syncBuffer)
	opts = append([]access.FileOption{
		access.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		access.OnReload(func(l *access.List, err error) { reloads <- reload{l, err} }),
	}, opts...)
	f, err := access.WatchFile(path, opts...)
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
	return func(r reload) bool { return r.err == nil && access.Size(r.list) == n }
}

func failed(r reload) bool { return r.err != nil }

func matches(f *access.File, a string) bool {
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
	assert.Equal(t, 1, access.Size(access.CurrentList(f)))
	assert.True(t, matches(f, "10.1.1.1"))

	require.NoError(t, os.WriteFile(path, []byte("# now two\n10.0.0.0/8\n192.0.2.0/24 reason=scanner\n"), 0o600))
	r := await(t, reloads, withLen(2))
	assert.Same(t, r.list, access.CurrentList(f))
	assert.True(t, matches(f, "192.0.2.9"))
	assert.Contains(t, logs.String(), "list reloaded")
	assert.Contains(t, logs.String(), "entries=2")
}

func TestWatchFileRenameOver(t *testing.T) {
	for _, debounce := range []time.Duration{0, access.DefaultDebounce} {
		t.Run(debounce.String(), func(t *testing.T) {
			f, path, reloads, _ := watched(t, "10.0.0.0/8\n", access.WithDebounce(debounce))
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
	good := access.CurrentList(f)

	replace(t, path, "10.0.0.0/8\n192.0.2.0/24\n1.2.3.4/33\n")
	r := await(t, reloads, failed)
	var pe *access.ParseError
	require.ErrorAs(t, r.err, &pe)
	assert.Equal(t, 3, pe.Line)
	assert.Nil(t, r.list)
	assert.Same(t, good, access.CurrentList(f), "the last good list stays")
	assert.True(t, matches(f, "10.1.1.1"))
	assert.False(t, matches(f, "192.0.2.1"), "nothing of the bad file is applied")
	assert.Contains(t, logs.String(), "level=ERROR")
	assert.Contains(t, logs.String(), "keeping the last good one")
	assert.Contains(t, logs.String(), "line 3, column 1")

	// An explicit Reload of the same bad file reports it again.
	err := f.Reload()
	require.ErrorAs(t, err, &pe)
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
	f, path, reloads, _ := watched(t, "10.0.0.0/8\n", access.WithDebounce(time.Minute))
	// With a minute's debounce the watcher will not reload during the
	// test: Reload does it at once.
	require.NoError(t, os.WriteFile(path, []byte("10.0.0.0/8\n192.0.2.0/24\n"), 0o600))
	require.NoError(t, f.Reload())
	assert.Equal(t, 2, access.Size(access.CurrentList(f)))
	r := <-reloads
	assert.Same(t, access.CurrentList(f), r.list)

	// The same content again changes nothing and reports nothing.
	list := access.CurrentList(f)
	require.NoError(t, f.Reload())
	assert.Same(t, list, access.CurrentList(f))
	assert.Empty(t, reloads)

	require.NoError(t, os.WriteFile(path, []byte("user:\x00\n"), 0o600))
	err := f.Reload()
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	assert.Same(t, list, access.CurrentList(f))
}

func TestWatchFileStartErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.list")
	require.NoError(t, os.WriteFile(bad, []byte("10.0.0.1\n\n  hello\n"), 0o600))
	f, err := access.WatchFile(bad)
	assert.Nil(t, f)
	var pe *access.ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 3, pe.Line)
	assert.Equal(t, 3, access.Column(pe))
	assert.Contains(t, err.Error(), bad)

	_, err = access.WatchFile(filepath.Join(dir, "missing.list"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = access.WatchFile(filepath.Join(dir, "no", "such", "dir.list"))
	require.Error(t, err)

	good := filepath.Join(dir, "good.list")
	require.NoError(t, os.WriteFile(good, nil, 0o600))
	for _, opt := range []access.FileOption{
		nil,
		access.WithLogger(nil),
		access.OnReload(nil),
		access.WithDebounce(-time.Millisecond),
		access.WithDebounce(time.Hour),
	} {
		f, err := access.WatchFile(good, opt)
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
	l, err := access.LoadFile(path)
	require.NoError(t, err)
	assert.Equal(t, 2, access.Size(l))
	e, ok := l.Match(addr("203.0.113.1"), "user:42", t0)
	assert.True(t, ok)
	assert.Equal(t, "partner", e.Reason)

	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("10.0.0.1\n", 3)+"10.0.0.1/33\n"), 0o600))
	l, err = access.LoadFile(path)
	assert.Nil(t, l)
	var pe *access.ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 4, pe.Line)
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
	_, err = io.Copy(w, &lines{n: n})
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	require.NoError(t, fh.Close())

	start := time.Now()
	l, err := access.LoadFile(path)
	require.NoError(t, err)
	t.Logf("LoadFile of %d lines: %v", n, time.Since(start))
	// Every fifth line is a comment; the others are distinct entries.
	assert.Equal(t, n-n/5, access.Size(l))
	for _, a := range []string{"11.0.5.1", "14.13.63.7", "2001:db8:f:423c::1", "192.0.0.5", "192.3.13.62"} {
		_, ok := l.Match(addr(a), "", t0)
		assert.True(t, ok, a)
	}
	_, ok := l.Match(addr("14.13.64.1"), "", t0)
	assert.False(t, ok)
	_, ok = l.Match(netip.Addr{}, "user:999997", t0)
	assert.True(t, ok)

	// The same file with one bad line at the very end loads nothing.
	fh, err = os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fh.WriteString("10.0.0.0/33\n")
	require.NoError(t, err)
	require.NoError(t, fh.Close())
	l, err = access.LoadFile(path)
	assert.Nil(t, l)
	var pe *access.ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, n+1, pe.Line)
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
	f, err := access.WatchFile(path,
		access.WithLogger(slog.New(slog.DiscardHandler)),
		access.OnReload(func(l *access.List, err error) { reloads <- reload{l, err} }))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	assert.True(t, matches(f, "10.1.1.1"))

	write("..2026_12_03_02", "192.0.2.0/24\n198.51.100.0/24\n")
	await(t, reloads, withLen(2))
	assert.False(t, matches(f, "10.1.1.1"))
	assert.True(t, matches(f, "198.51.100.1"))
}
