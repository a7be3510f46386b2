package deps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/gobuild"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// The packages checked for, by import path prefix.
const (
	goRedis  = "github.com/redis/go-redis/"
	bart     = "github.com/gaissmai/bart"
	fsnotify = "github.com/fsnotify/fsnotify"
	gin      = "github.com/gin-gonic/gin"

	module     = "github.com/apigate/ratelimit/"
	httplimit  = module + "httplimit"
	memstore   = module + "core/memstore"
	redisstore = module + "core/redisstore"
	apps       = module + "internal/testkit/deps/testdata/"
)

// httplimitRedisFree says that httplimit no longer imports a Redis
// client (through reputation) nor a store. While it is false, the checks
// that need it are skipped; once they would pass, they fail until it is
// set to true, so that they stay on.
const httplimitRedisFree = true

// graph is the import graph go list gave: each package's imports.
type graph map[string][]string

// load runs go list -deps on pkgs (directories relative to this one) and
// returns the import graph of them and everything they import.
func load(t *testing.T, pkgs ...string) graph {
	t.Helper()
	goTool := gobuild.Tool(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(2*time.Minute))
	defer cancel()
	args := append([]string{"list", "-e", "-deps", "-json=ImportPath,Imports,Error,DepsErrors"}, pkgs...)
	cmd := exec.CommandContext(ctx, goTool, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go %s\n%s", strings.Join(args, " "), stderr.String())
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
			DepsErrors []struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		require.Nil(t, p.Error, "%s", p.ImportPath)
		require.Empty(t, p.DepsErrors, "%s", p.ImportPath)
		g[p.ImportPath] = p.Imports
	}
	return g
}

// path returns a chain of imports from root to a package with prefix,
// nil if there is none: what go list -deps of root would show, and why.
func (g graph) path(root, prefix string) []string {
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(p, prefix) {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range g[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// without checks that root does not depend on any package with prefix.
func (g graph) without(t *testing.T, root, prefix string) {
	t.Helper()
	chain := g.path(root, prefix)
	assert.Nil(t, chain, "%s depends on %s: %s", short(root), prefix, strings.Join(chain, " -> "))
}

// withoutOnceFree is without for a check that holds only once httplimit
// is free of Redis and stores (httplimitRedisFree): skipped until then.
func (g graph) withoutOnceFree(t *testing.T, root, prefix string) {
	t.Helper()
	chain := g.path(root, prefix)
	switch {
	case httplimitRedisFree:
		assert.Nil(t, chain, "%s depends on %s: %s", short(root), prefix, strings.Join(chain, " -> "))
	case chain == nil:
		t.Errorf("%s no longer depends on %s: set httplimitRedisFree to true so that the check stays on", short(root), prefix)
	default:
		t.Skipf("%s: httplimit still imports reputation's Redis side or a store: %s", prefix, strings.Join(chain, " -> "))
	}
}

// with checks that root depends on a package with prefix: the checks see
// what they look for.
func (g graph) with(t *testing.T, root, prefix string) {
	t.Helper()
	assert.NotNil(t, g.path(root, prefix), "%s does not depend on %s", short(root), prefix)
}

func short(pkg string) string { return strings.TrimPrefix(pkg, module) }

// TestApps: what each application under testdata compiles. A Gin
// application on the memory store compiles no Redis client, no routing
// table and no file watcher; with lists built in code, still no Redis
// client; with a watched list file, the file watcher.
func TestApps(t *testing.T) {
	g := load(t, "./testdata/ginmemory", "./testdata/ginlists", "./testdata/ginfile", "../../../httplimit")
	memory, lists, file := apps+"ginmemory", apps+"ginlists", apps+"ginfile"
	for _, app := range []string{memory, lists, file} {
		require.Contains(t, g, app)
		g.with(t, app, gin)
		g.with(t, app, memstore)
	}

	t.Run("ginmemory", func(t *testing.T) {
		g.without(t, memory, bart)
		g.without(t, memory, fsnotify)
		g.withoutOnceFree(t, memory, goRedis)
	})
	t.Run("ginlists", func(t *testing.T) {
		g.with(t, lists, module+"access")
		g.without(t, lists, fsnotify)
		g.withoutOnceFree(t, lists, goRedis)
	})
	t.Run("ginfile", func(t *testing.T) {
		g.with(t, file, fsnotify)
	})
	t.Run("httplimit", func(t *testing.T) {
		g.without(t, httplimit, fsnotify)
		g.without(t, httplimit, bart)
		g.without(t, httplimit, redisstore)
		// One check per subtest: a skip ends the subtest.
		t.Run("memstore", func(t *testing.T) { g.withoutOnceFree(t, httplimit, memstore) })
		t.Run("go-redis", func(t *testing.T) { g.withoutOnceFree(t, httplimit, goRedis) })
	})
}

// TestAppsBuild: the applications compile (go vet type-checks them), so
// that they do not rot as the API changes.
func TestAppsBuild(t *testing.T) {
	goTool := gobuild.Tool(t, "type-checks three Gin applications")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(5*time.Minute))
	defer cancel()
	// -race when this test is, so that vet reads what the run compiled
	// already (see gobuild).
	args := append(append([]string{"vet"}, gobuild.Flags()...), "./testdata/ginmemory", "./testdata/ginlists", "./testdata/ginfile")
	out, err := exec.CommandContext(ctx, goTool, args...).CombinedOutput()
	require.NoError(t, err, "go %s\n%s", strings.Join(args, " "), out)
}
