package access_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
)

var t0 = time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)

func TestParseEntry(t *testing.T) {
	tests := []struct {
		in   string
		want access.Entry
	}{
		{"203.0.113.7", access.Entry{Prefix: netip.MustParsePrefix("203.0.113.7/32")}},
		{"2001:db8::1", access.Entry{Prefix: netip.MustParsePrefix("2001:db8::1/128")}},
		{"2001:db8::/32", access.Entry{Prefix: netip.MustParsePrefix("2001:db8::/32")}},
		{"10.0.0.0/8 # comment", access.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8")}},
		{"\t10.0.0.0/8\t#comment\r", access.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8")}},
		{"0.0.0.0/0", access.Entry{Prefix: netip.MustParsePrefix("0.0.0.0/0")}},
		{"::/0", access.Entry{Prefix: netip.MustParsePrefix("::/0")}},
		{"::1", access.Entry{Prefix: netip.MustParsePrefix("::1/128")}},
		// IPv4-mapped forms fold to IPv4, as Match sees addresses.
		{"::ffff:192.0.2.1", access.Entry{Prefix: netip.MustParsePrefix("192.0.2.1/32")}},
		{"::ffff:192.0.2.0/120", access.Entry{Prefix: netip.MustParsePrefix("192.0.2.0/24")}},
		{"user:42", access.Entry{Key: "user:42"}},
		{"ip:203.0.113.7", access.Entry{Key: "ip:203.0.113.7"}},
		{"user:a#b", access.Entry{Key: "user:a#b"}},
		{"key:9f86d081884c7d659a2feaa0c55ad015 expires=2026-12-31T00:00:00Z reason=leaked in a paste # ticket 12",
			access.Entry{Key: "key:9f86d081884c7d659a2feaa0c55ad015", Expires: t0, Reason: "leaked in a paste"}},
		{"198.51.100.0/24 reason=scanner expires=x", access.Entry{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Reason: "scanner expires=x"}},
		{"198.51.100.0/24 expires=2026-12-31T01:00:00+01:00", access.Entry{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Expires: t0}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := access.ParseEntry(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want.Prefix, got.Prefix)
			assert.Equal(t, tt.want.Key, got.Key)
			assert.True(t, tt.want.Expires.Equal(got.Expires), "Expires %v, want %v", got.Expires, tt.want.Expires)
			assert.Equal(t, tt.want.Reason, got.Reason)
		})
	}
}

func TestParseEntryErrors(t *testing.T) {
	tests := []struct {
		name, in string
		col      int
		msg      string
	}{
		{"empty", "", 1, "empty entry"},
		{"blank", "  \t ", 1, "empty entry"},
		{"comment only", "# nothing", 1, "empty entry"},
		{"fields only", "  expires=2026-12-31T00:00:00Z", 3, "empty entry"},
		{"reason only", "reason=x", 1, "empty entry"},
		{"prefix length", "1.2.3.4/33", 1, "prefix length out of range"},
		{"v6 prefix length", "2001:db8::/129", 1, "prefix length out of range"},
		{"no length", "10.0.0.0/", 1, "bad range"},
		{"host bits", "10.1.2.3/8", 1, "host bits set (the range is 10.0.0.0/8)"},
		{"short v4", "1.2.3", 1, "bad address"},
		{"octet", "1.2.3.256", 1, "bad address"},
		{"v6 garbage", "2001:db8::zz", 1, "bad address"},
		{"zone", "fe80::1%eth0", 1, "zone"},
		{"zone in range", "fe80::/10%eth0", 1, "bad range"},
		{"word", "hello", 1, "not an address, range or key"},
		{"port", "1.2.3.4:80", 1, "not an address, range or key"},
		{"hex key name", "bad:cafe", 1, "not an address, range or key"},
		{"key no value", "user:", 1, "not an address, range or key"},
		{"NUL", "10.0.0.1\x00", 9, "NUL"},
		{"NUL in comment", "10.0.0.1 # a\x00", 13, "NUL"},
		{"escape", "user:\x1b[31m", 6, "control character (U+001B)"},
		{"DEL", "user:a\x7f", 7, "control character (U+007F)"},
		{"C1", "user:a\u0085", 7, "control character (U+0085)"},
		{"inner CR", "user:a\rb", 7, "control character (U+000D)"},
		{"invalid UTF-8", "user:\xff", 6, "invalid UTF-8"},
		{"unknown field", "10.0.0.1 foo=bar", 10, "unexpected \"foo=bar\""},
		{"two targets", "10.0.0.1 10.0.0.2", 10, "unexpected"},
		{"bad time", "10.0.0.1 expires=2026-12-31", 10, "RFC 3339"},
		{"expires twice", "10.0.0.1 expires=2026-12-31T00:00:00Z expires=2026-12-31T00:00:00Z", 39, "twice"},
		{"tab in reason", "10.0.0.1 reason=a\tb", 18, "a tab in the reason"},
		{"empty reason", "10.0.0.1 reason=  # c", 10, "reason= with no text"},
		{"long reason", "10.0.0.1 reason=" + strings.Repeat("r", access.MaxFieldLen+1), 10, "over the limit"},
		{"long key", "user:" + strings.Repeat("k", access.MaxFieldLen), 1, "over the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := access.ParseEntry(tt.in)
			require.Error(t, err)
			line, col, ok := access.Position(err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, 1, line, "%v", err)
			assert.Equal(t, tt.col, col, "%v", err)
			assert.ErrorIs(t, err, access.ErrInvalidEntry)
			assert.Contains(t, err.Error(), tt.msg)
			assert.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("line 1, column %d: ", tt.col)), err.Error())
		})
	}
	_, err := access.ParseEntry(strings.Repeat("x", access.MaxLineLen+1))
	require.ErrorIs(t, err, access.ErrTooLarge)
}

func TestParse(t *testing.T) {
	in := "# deny list\n" +
		"\n" +
		"203.0.113.7\n" +
		"2001:db8::/32   # documentation range\r\n" +
		"   \t\n" +
		"user:42 reason=abuse\n" +
		"10.0.0.0/8" // no final newline
	got, err := access.Parse(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.Equal(t, netip.MustParsePrefix("203.0.113.7/32"), got[0].Prefix)
	assert.Equal(t, netip.MustParsePrefix("2001:db8::/32"), got[1].Prefix)
	assert.Equal(t, access.Entry{Key: "user:42", Reason: "abuse"}, got[2])
	assert.Equal(t, netip.MustParsePrefix("10.0.0.0/8"), got[3].Prefix)

	got, err = access.Parse(strings.NewReader(""))
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestParseErrors(t *testing.T) {
	long := strings.Repeat("x", access.MaxLineLen+1)
	veryLong := strings.Repeat("x", 3*access.MaxLineLen)
	tests := []struct {
		name      string
		in        string
		line, col int
		is        error
	}{
		{"bad CIDR", "10.0.0.0/8\n1.2.3.4/33\n", 2, 1, access.ErrInvalidEntry},
		{"bad CIDR indented", "# c\n\n   300.1.1.1/8\n", 3, 4, access.ErrInvalidEntry},
		{"empty entry", "10.0.0.1\n  expires=2026-12-31T00:00:00Z\n", 2, 3, access.ErrInvalidEntry},
		{"NUL", "10.0.0.1\n10.0.0.2\x00\n", 2, 9, access.ErrInvalidEntry},
		{"control", "user:1\nuser:\x07\n", 2, 6, access.ErrInvalidEntry},
		{"line too long", "10.0.0.1\n" + long + "\n", 2, access.MaxLineLen + 1, access.ErrTooLarge},
		{"line far too long", "10.0.0.1\n10.0.0.2\n" + veryLong + "\n", 3, access.MaxLineLen + 1, access.ErrTooLarge},
		{"long last line", "10.0.0.1\n" + long, 2, access.MaxLineLen + 1, access.ErrTooLarge},
		{"error after good lines", "10.0.0.1\n10.0.0.2\nnope\n10.0.0.3\n", 3, 1, access.ErrInvalidEntry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := access.Parse(strings.NewReader(tt.in))
			assert.Nil(t, got, "nothing half-applied")
			line, col, ok := access.Position(err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, tt.line, line, "%v", err)
			assert.Equal(t, tt.col, col, "%v", err)
			assert.ErrorIs(t, err, tt.is)
		})
	}

	// A line of exactly MaxLineLen bytes is fine, with either line ending.
	exact := "user:" + strings.Repeat("k", access.MaxFieldLen-5) + " reason=" + strings.Repeat("r", access.MaxFieldLen) + " #"
	exact += strings.Repeat("c", access.MaxLineLen-len(exact))
	require.Len(t, exact, access.MaxLineLen)
	for _, in := range []string{exact + "\n10.0.0.1\n", exact + "\r\n10.0.0.1\r\n", "10.0.0.1\n" + exact} {
		got, err := access.Parse(strings.NewReader(in))
		require.NoError(t, err)
		require.Len(t, got, 2)
	}

	// A reader that fails is an error too, naming the line it was on.
	_, err := access.Parse(io.MultiReader(strings.NewReader("10.0.0.1\n"), iotestErr{}))
	line, _, ok := access.Position(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, 2, line)
	assert.ErrorIs(t, err, errBroken)
}

var errBroken = errors.New("broken reader")

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errBroken }

// lines generates n lines of mixed entries and comments without holding
// them in memory: for n up to 5<<16, every entry distinct.
type lines struct {
	n, i int
	buf  []byte
}

func (g *lines) Read(p []byte) (int, error) {
	for len(g.buf) < len(p) && g.i < g.n {
		i, j := g.i, g.i/5
		switch i % 5 {
		case 0:
			g.buf = fmt.Appendf(g.buf, "%d.%d.%d.0/24\n", 11+j>>16, j>>8&0xff, j&0xff)
		case 1:
			g.buf = fmt.Appendf(g.buf, "2001:db8:%x:%x::/64 # v6\n", i>>16, i&0xffff)
		case 2:
			g.buf = fmt.Appendf(g.buf, "user:%d reason=generated\n", i)
		case 3:
			g.buf = append(g.buf, "# a comment\n"...)
		default:
			g.buf = fmt.Appendf(g.buf, "192.%d.%d.%d expires=2027-01-01T00:00:00Z\n", j>>16, j>>8&0xff, j&0xff)
		}
		g.i++
	}
	if len(g.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, g.buf)
	g.buf = g.buf[:copy(g.buf, g.buf[n:])]
	return n, nil
}

func TestParseHugeFile(t *testing.T) {
	if testing.Short() {
		t.Skip("parses a million lines")
	}
	// The "huge file": a million lines and one parse, well under
	// MaxLines.
	const n = 1_000_001
	require.Greater(t, access.MaxLines, n)
	got, err := access.Parse(bufio.NewReaderSize(&lines{n: n}, 1<<16))
	require.NoError(t, err)
	assert.Len(t, got, n-n/5) // every fifth line (i%5 == 3) is a comment

	// One line past MaxLines is an error on that line, with no entries.
	got, err = access.Parse(&blankLines{n: access.MaxLines + 1})
	assert.Nil(t, got)
	line, _, ok := access.Position(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, access.MaxLines+1, line)
	assert.ErrorIs(t, err, access.ErrTooLarge)

	// And MaxLines itself is fine.
	got, err = access.Parse(&blankLines{n: access.MaxLines})
	require.NoError(t, err)
	assert.Empty(t, got)
}

// blankLines reads as n empty lines.
type blankLines struct{ n int }

func (b *blankLines) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.EOF
	}
	k := min(len(p), b.n)
	for i := range k {
		p[i] = '\n'
	}
	b.n -= k
	return k, nil
}

func TestParseFileTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 256 MiB")
	}
	// Comment lines of MaxLineLen bytes, past MaxFileBytes in all but under
	// MaxLines.
	line := "#" + strings.Repeat("c", access.MaxLineLen-1) + "\n"
	n := access.MaxFileBytes/len(line) + 2
	got, err := access.Parse(io.LimitReader(&repeatReader{s: line}, int64(n*len(line))))
	assert.Nil(t, got)
	require.ErrorIs(t, err, access.ErrTooLarge)
}

type repeatReader struct {
	s   string
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

// FuzzParseEntry: any line is an entry or an error, never a panic; an
// entry is one NewList takes and prints back to itself.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{
		"203.0.113.7", "2001:db8::/32 # c", "user:42 reason=x", "::ffff:1.2.3.0/120",
		"key:9f86d081884c7d659a2feaa0c55ad015 expires=2026-12-31T00:00:00Z reason=leaked",
		"10.0.0.1 reason=a\tb", "user:\x00", "1.2.3.4/33", "fe80::1%eth0", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := access.ParseEntry(s)
		if err != nil {
			_, _, ok := access.Position(err)
			require.True(t, ok, "%v", err)
			return
		}
		_, err = access.NewList(e)
		require.NoError(t, err, "%q parsed to %v", s, e)
		back, err := access.ParseEntry(e.String())
		require.NoError(t, err, "%q printed as %q", s, e.String())
		assert.Equal(t, e.Prefix, back.Prefix)
		assert.Equal(t, e.Key, back.Key)
		assert.True(t, e.Expires.Equal(back.Expires))
	})
}
