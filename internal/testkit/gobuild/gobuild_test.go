package gobuild

import (
	"runtime/debug"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFlagsMatchTheTestBinary: Build adds -race exactly when this binary
// was built with it, as its build information says.
func TestFlagsMatchTheTestBinary(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	require.True(t, ok, "no build information")
	race := false
	for _, s := range info.Settings {
		if s.Key == "-race" {
			race = s.Value == "true"
		}
	}
	t.Logf("built with -race: %v", race)
	assert.Equal(t, race, slices.Contains(Flags(), "-race"))
}
