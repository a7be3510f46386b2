package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/storecasetest"
)

// TestCasesAreWhatRunPlays checks that the scripted subtests runSuite
// starts are storecasetest.Cases, by name and in order.
func TestCasesAreWhatRunPlays(t *testing.T) {
	var want []string
	for _, c := range storecasetest.Cases() {
		want = append(want, string(c.Policy.Algorithm)+"/"+c.Name)
	}
	names := &subtests{}
	runSuite(names, func(tester) core.Store {
		t.Fatal("a case ran: subtests only lists them")
		return nil
	})
	got := slices.DeleteFunc(names.started, func(name string) bool {
		_, sub, _ := strings.Cut(name, "/")
		return sub == "clock-step-back" || sub == "extremes" || sub == "lockout-extremes" || sub == "prompt-cancel"
	})
	assert.Equal(t, want, got)
}

// subtests is a tester that runs the suite's algorithms but not their
// subtests, whose names it lists, algorithm/subtest.
type subtests struct {
	prefix  string
	started []string
	root    *subtests
}

func (s *subtests) Helper()                   {}
func (s *subtests) Errorf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (s *subtests) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (s *subtests) run(name string, f func(t tester)) bool {
	root := s.root
	if root == nil {
		root = s
	}
	if s.prefix == "" {
		f(&subtests{prefix: name, root: root})
		return true
	}
	root.started = append(root.started, s.prefix+"/"+name)
	return true
}
