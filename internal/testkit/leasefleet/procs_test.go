//go:build unix

package leasefleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// proc is one app server process of the fleet.
type proc struct {
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
	base   string
}

// startFleet starts n servers from bin with env added to the test's
// environment, each on a free loopback port, and waits for every banner.
// They are killed when the test ends if still running.
func startFleet(t *testing.T, bin string, n int, env ...string) []*proc {
	t.Helper()
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = startProc(t, bin, env)
	}
	for _, p := range ps {
		p.base = p.waitBanner(t, 20*time.Second)
		require.True(t, strings.HasPrefix(p.base, "http://127.0.0.1:"), "a server listens on %s, want loopback", p.base)
	}
	return ps
}

func startProc(t *testing.T, bin string, env []string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin), out: &syncbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(environWithout("ADDR", "REDIS_URL", "REDIS_CLUSTER", "PREFIX"), append(env, "ADDR=127.0.0.1:0")...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start(), "starting a server")
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("server %d output:\n%s", p.cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

// waitBanner waits, at most testwait.D(timeout), for the banner line and
// returns the server's URL.
func (p *proc) waitBanner(t *testing.T, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(testwait.D(timeout))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, rest, ok := strings.Cut(p.out.String(), ListeningPrefix); ok {
			if line, _, ok := strings.Cut(rest, "\n"); ok {
				return strings.TrimSpace(line)
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("a server exited before listening: %v\n%s", p.err, p.out.String())
		case <-deadline:
			t.Fatalf("a server did not print %q within %v\n%s", ListeningPrefix, testwait.D(timeout), p.out.String())
		case <-tick.C:
		}
	}
}

// stopFleet stops every server with SIGTERM and expects each to exit 0,
// saying it stopped.
func stopFleet(t *testing.T, ps []*proc) {
	t.Helper()
	for _, p := range ps {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM), "SIGTERM")
	}
	for _, p := range ps {
		testwait.Done(t, p.exited, 10*time.Second, "a server did not exit after SIGTERM")
		assert.NoError(t, p.err, "a server's exit: want status 0")
		assert.Contains(t, p.out.String(), "stopped", "a server reports a graceful stop")
	}
}

// fleetCounts reads every server's counts at CountsPath, concurrently.
func fleetCounts(t *testing.T, c *http.Client, ps []*proc) []Counts {
	t.Helper()
	cs := make([]Counts, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = getCounts(c, p.base+CountsPath, &cs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "server %d's counts", i)
	}
	return cs
}

func getCounts(c *http.Client, url string, into *Counts) error {
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(5*time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, res.StatusCode)
	}
	return json.NewDecoder(res.Body).Decode(into)
}

// sum adds the fleet's counts up.
func sum(cs []Counts) Counts {
	var s Counts
	s.Admitted, s.Straddled = map[int64]int64{}, map[int64]int64{}
	for _, c := range cs {
		s.Requests += c.Requests
		s.Denied += c.Denied
		s.Failed += c.Failed
		s.LeaseDecisions += c.LeaseDecisions
		s.GlobalTakes += c.GlobalTakes
		s.GlobalRefunds += c.GlobalRefunds
		s.GlobalTakeUnits += c.GlobalTakeUnits
		s.GlobalRenewals += c.GlobalRenewals
		s.Takes += c.Takes
		s.Refunds += c.Refunds
		for w, n := range c.Admitted {
			s.Admitted[w] += n
		}
		for w, n := range c.Straddled {
			s.Straddled[w] += n
		}
	}
	return s
}

// environWithout returns the environment without the named variables.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}
