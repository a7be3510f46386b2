package redisstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// minimumRedis returns the minimum Redis version that prelude.lua states
// ("Requires Redis X.Y or later"), as written there and as numbers.
func minimumRedis(t *testing.T) (string, []int) {
	t.Helper()
	m := regexp.MustCompile(`-- Requires Redis (\d+\.\d+) or later\.`).FindStringSubmatch(preludeLua)
	require.NotNil(t, m, "prelude.lua states no minimum Redis version")
	return m[1], parseVersion(t, m[1])
}

// parseVersion parses "7.0.15" or "5.0" into its numbers.
func parseVersion(t *testing.T, v string) []int {
	t.Helper()
	n, err := versionNumbers(v)
	require.NoError(t, err, "version %q", v)
	return n
}

func versionNumbers(v string) ([]int, error) {
	var n []int
	for part := range strings.SplitSeq(v, ".") {
		i, err := strconv.Atoi(part)
		if err != nil {
			return nil, err
		}
		n = append(n, i)
	}
	return n, nil
}

// TestMinimumRedisVersionStated: the README states the minimum that
// prelude.lua states.
func TestMinimumRedisVersionStated(t *testing.T) {
	minimum, _ := minimumRedis(t)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "Redis "+minimum+" or later"),
		"README.md does not say %q, as prelude.lua does", "Redis "+minimum+" or later")
}

// TestServerMeetsMinimumRedisVersion: the server the tests run on is at
// least the minimum stated, so that the suite checks a version the README
// promises.
func TestServerMeetsMinimumRedisVersion(t *testing.T) {
	minimum, want := minimumRedis(t)
	c := redistest.Start(t).Client()
	info, err := c.Info(context.Background(), "server").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^redis_version:(\S+)`).FindStringSubmatch(info)
	require.NotNil(t, m, "INFO server has no redis_version")
	got := parseVersion(t, m[1])
	assert.GreaterOrEqual(t, slices.Compare(got, want), 0,
		"the tests run on Redis %s, below the minimum %s that prelude.lua and the README state", m[1], minimum)
}

// TestScriptsPredateMinimumRedis reads every redis.call of the scripts, and
// requires that each command, and each option token it is given, is no
// newer than the minimum stated, by the server's COMMAND DOCS (Redis 7.0
// and later): a script that starts using, say, ZRANGE ... BYSCORE (6.2)
// fails here until the minimum is raised.
func TestScriptsPredateMinimumRedis(t *testing.T) {
	minimum, want := minimumRedis(t)
	files, err := filepath.Glob("*.lua")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 6, "prelude.lua and five scripts")

	// used maps each command the scripts call to the option tokens given
	// to it (upper-case string literals after the name).
	used := map[string]map[string]bool{}
	call := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'(.*)`)
	token := regexp.MustCompile(`'([A-Z]+)'`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		src := string(b)
		calls := call.FindAllStringSubmatch(src, -1)
		require.Len(t, calls, strings.Count(src, "redis.call(")+strings.Count(src, "redis.pcall("),
			"%s: a call whose command is not a string literal escapes this test", f)
		for _, c := range calls {
			name := strings.ToUpper(c[1])
			if used[name] == nil {
				used[name] = map[string]bool{}
			}
			for _, tok := range token.FindAllStringSubmatch(c[2], -1) {
				used[name][tok[1]] = true
			}
		}
	}
	require.Contains(t, used, "TIME")
	require.Contains(t, used, "ZRANGE")
	require.True(t, used["ZRANGE"]["WITHSCORES"], "the token scan finds ZRANGE's WITHSCORES")

	c := redistest.Start(t).Client()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range used {
			if !yield(n) {
				return
			}
		}
	})
	args := []any{"COMMAND", "DOCS"}
	for _, n := range names {
		args = append(args, n)
	}
	reply, err := c.Do(context.Background(), args...).Result()
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
		t.Skipf("this Redis has no COMMAND DOCS (Redis 7.0 and later): %v", err)
	}
	require.NoError(t, err)
	docs := asMap(reply)
	require.NotNil(t, docs, "COMMAND DOCS reply %T", reply)
	for _, n := range names {
		doc := asMap(docs[strings.ToLower(n)])
		require.NotNil(t, doc, "the scripts call %s, which this Redis does not document", n)
		since, _ := doc["since"].(string)
		require.NotEmpty(t, since, "%s: COMMAND DOCS has no since", n)
		assert.LessOrEqual(t, slices.Compare(parseVersion(t, since), want), 0,
			"the scripts call %s, new in Redis %s, above the minimum %s", n, since, minimum)
		for tok := range used[n] {
			tokSince, found := tokenSince(doc["arguments"], tok, since)
			if !assert.True(t, found, "%s has no option %s", n, tok) {
				continue
			}
			assert.LessOrEqual(t, slices.Compare(parseVersion(t, tokSince), want), 0,
				"the scripts call %s %s, new in Redis %s, above the minimum %s", n, tok, tokSince, minimum)
		}
		// For the record: changes after the minimum, none of which may be
		// in use (the token checks above cover the options).
		if h, ok := doc["history"].([]any); ok {
			for _, e := range h {
				if e, ok := e.([]any); ok && len(e) == 2 {
					v, _ := e[0].(string)
					if v != "" && slices.Compare(parseVersion(t, v), want) > 0 {
						t.Logf("%s, not used: %s %v", n, v, e[1])
					}
				}
			}
		}
	}
}

// tokenSince finds the argument whose token is tok among args, a COMMAND
// DOCS arguments list (nested blocks included), and returns the version it
// appeared in: the latest since on its path, or inherited when none says.
func tokenSince(args any, tok, inherited string) (string, bool) {
	list, _ := args.([]any)
	for _, a := range list {
		arg := asMap(a)
		if arg == nil {
			continue
		}
		since := inherited
		if s, ok := arg["since"].(string); ok && s != "" {
			since = laterVersion(since, s)
		}
		if t, _ := arg["token"].(string); strings.EqualFold(t, tok) {
			return since, true
		}
		if s, ok := tokenSince(arg["arguments"], tok, since); ok {
			return s, true
		}
	}
	return "", false
}

// laterVersion returns the later of two versions; b when a does not parse.
func laterVersion(a, b string) string {
	na, errA := versionNumbers(a)
	nb, _ := versionNumbers(b)
	if errA == nil && slices.Compare(na, nb) >= 0 {
		return a
	}
	return b
}

// asMap returns a reply map, RESP3's map or RESP2's flat list of pairs, by
// string key; nil for anything else.
func asMap(v any) map[string]any {
	m := map[string]any{}
	switch v := v.(type) {
	case map[any]any:
		for k, x := range v {
			m[fmt.Sprint(k)] = x
		}
	case map[string]any:
		return v
	case []any:
		if len(v)%2 != 0 {
			return nil
		}
		for i := 0; i < len(v); i += 2 {
			m[fmt.Sprint(v[i])] = v[i+1]
		}
	default:
		return nil
	}
	return m
}
