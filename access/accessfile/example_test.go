package accessfile_test

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/apigate/ratelimit/access/accessfile"
)

func ExampleWatch() {
	dir, err := os.MkdirTemp("", "access-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "deny.list")
	if err := os.WriteFile(path, []byte("# scanners\n192.0.2.0/24 reason=scanner\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}

	// The list is loaded before WatchFile returns; a malformed file fails here.
	deny, err := accessfile.Watch(path, accessfile.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer deny.Close()
	e, ok := deny.Match(netip.MustParseAddr("192.0.2.7"), "", time.Now())
	fmt.Println(ok, e.Reason)

	// A bad edit is rejected whole, and the last good list stays in force.
	if err := os.WriteFile(path, []byte("192.0.2.0/24\n10.0.0.0/33\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(deny.Reload() != nil, len(deny.Entries()))
	_, ok = deny.Match(netip.MustParseAddr("192.0.2.7"), "", time.Now())
	fmt.Println(ok)
	// Output:
	// true scanner
	// true 1
	// true
}
