package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// machine is what the tables ran on.
type machine struct {
	cpu, goVersion, redisVersion, load, date string
	cores                                    int
	versions                                 []string // "module version" of each library compared
	benchtime                                string
	count                                    int
}

// peerModules are the modules compared, whose versions the header lists.
var peerModules = []string{
	"github.com/go-redis/redis_rate/v10",
	"github.com/ulule/limiter/v3",
	"github.com/throttled/throttled/v2",
	"golang.org/x/time",
	"github.com/go-chi/httprate",
	"github.com/labstack/echo/v4",
	"github.com/gofiber/fiber/v2",
	"github.com/gin-gonic/gin",
	"github.com/go-chi/chi/v5",
	"github.com/redis/go-redis/v9",
}

// describeMachine reads the machine compare runs on; what it cannot read
// is left empty.
func describeMachine(ctx context.Context, dir string) machine {
	m := machine{cores: runtime.NumCPU(), date: time.Now().UTC().Format("2006-01-02 15:04 MST")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.cpu = cpuModel(b)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.load = strings.Join(f[:3], " ")
		}
	}
	if out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(out))
	}
	m.redisVersion = redisVersion(ctx)
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-m"}, peerModules...)...)
	cmd.Dir = dir
	if out, err := cmd.Output(); err == nil {
		m.versions = strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	return m
}

// machineFromOutput reads what it can from saved go test output (its
// "cpu:" line).
func machineFromOutput(out []byte) machine {
	var m machine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if c, ok := strings.CutPrefix(sc.Text(), "cpu: "); ok {
			m.cpu = c
		}
	}
	return m
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// redisVersion asks REDIS_URL's server, or else redis-server --version,
// the version the benchmarks will run against.
func redisVersion(ctx context.Context) string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return ""
		}
		c := redis.NewClient(opt)
		defer c.Close()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return ""
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				return v + " (REDIS_URL)"
			}
		}
		return ""
	}
	out, err := exec.CommandContext(ctx, "redis-server", "--version").Output()
	if err != nil {
		return ""
	}
	for f := range strings.FieldsSeq(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v + " (a redis-server of the benchmark's own on loopback)"
		}
	}
	return ""
}

func (m machine) render(w io.Writer) {
	fmt.Fprintln(w, "#### Machine")
	fmt.Fprintln(w)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "- %s: %s\n", k, v)
		}
	}
	line("CPU", m.cpu)
	if m.cores > 0 {
		line("cores", fmt.Sprint(m.cores))
	}
	line("Go", m.goVersion)
	line("Redis", m.redisVersion)
	line("load average at start (1, 5, 15 min)", m.load)
	line("date", m.date)
	if m.benchtime != "" {
		line("go test", fmt.Sprintf("-benchtime=%s -count=%d", m.benchtime, m.count))
	}
	if len(m.versions) > 0 {
		line("libraries", strings.Join(m.versions, ", "))
	}
	fmt.Fprintln(w)
}
