package resp

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryCommandDocumented: docs/resp.md has a section (a "###"
// heading naming it) for every command the front end answers, the
// delayedqueue mode's included, and names none it does not answer.
func TestEveryCommandDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/resp.md")
	require.NoError(t, err)
	documented := map[string]bool{}
	heading := regexp.MustCompile(`(?m)^### (.+)$`)
	name := regexp.MustCompile(`(?:^|, )([A-Z][A-Z.]*)(?: |$)`)
	for _, h := range heading.FindAllStringSubmatch(string(b), -1) {
		for _, n := range name.FindAllStringSubmatch(h[1], -1) {
			documented[strings.ToLower(n[1])] = true
		}
	}
	cmds := newTable()
	compatTable(cmds)
	for n := range cmds {
		require.True(t, documented[n], "%s has no section in docs/resp.md", strings.ToUpper(n))
	}
	for n := range documented {
		_, ok := cmds[n]
		require.True(t, ok, "docs/resp.md documents %s, which the front end does not answer", strings.ToUpper(n))
	}
}
