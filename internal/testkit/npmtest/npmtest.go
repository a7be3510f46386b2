// Package npmtest runs npm packages under node, for the tests that check
// what the module writes with an implementation independent of it (an
// OpenAPI validator, a Structured Fields parser).
//
// Packages are installed with npm, at the version a test pins, into
// $HOME/.cache/ratelimit-npm/<package>@<version>, outside the work tree,
// once per machine. Without node or npm a test skips, unless CI is
// "true": there it fails, so that CI never passes on a check it did not
// make.
package npmtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// installTimeout bounds one npm install.
var installTimeout = testwait.D(5 * time.Minute)

// Install returns the node_modules directory that holds pkg at version,
// installing it when missing. It skips tb, or fails it under CI=true,
// when node or npm is missing, and fails it when the install fails.
func Install(tb testing.TB, pkg, version string) string {
	tb.Helper()
	npm := tool(tb, "npm")
	tool(tb, "node")
	cache, err := os.UserCacheDir()
	if home := os.Getenv("HOME"); home != "" {
		cache, err = filepath.Join(home, ".cache"), nil
	}
	if err != nil {
		tb.Fatalf("npmtest: no cache directory: %v", err)
	}
	name := strings.NewReplacer("/", "+", "@", "").Replace(pkg) + "@" + version
	dir := filepath.Join(cache, "ratelimit-npm", name)
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, filepath.FromSlash(pkg), "package.json")); err == nil {
		return modules
	}
	// Installed beside, then renamed: test binaries of several packages
	// may install the same package at once.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		tb.Fatalf("npmtest: %v", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), name+".tmp-")
	if err != nil {
		tb.Fatalf("npmtest: %v", err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", "--loglevel=error", pkg+"@"+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("npmtest: npm install %s@%s: %v\n%s", pkg, version, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(modules); statErr != nil {
			tb.Fatalf("npmtest: %v", err)
		}
	}
	return modules
}

// Node runs the JavaScript program script with node, its arguments args
// (process.argv[1:]), and require() finding the packages in modules, a
// directory of Install. It returns what the program wrote to its
// standard output and error, and its error when it exits non-zero.
func Node(tb testing.TB, modules, script string, args ...string) (string, error) {
	tb.Helper()
	node := tool(tb, "node")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"-e", script}, args...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("node: %w", err)
	}
	return out.String(), err
}

// tool returns the path of the named program; without it, it skips tb, or
// fails it under CI=true.
func tool(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("npmtest: %s is missing, and CI=true: .ci/run installs Debian's nodejs and npm", name)
	}
	tb.Skipf("npmtest: %s is missing (Debian's nodejs and npm)", name)
	return ""
}
