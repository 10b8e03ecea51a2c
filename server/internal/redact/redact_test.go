package redact_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/internal/redact"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example/x":                           "https://hooks.example/x",
		"https://hooks.example/x?token=SECRET":              "https://hooks.example/x?token=xxxxx",
		"https://hooks.example/x?token=SECRET&tenant=a%20b": "https://hooks.example/x?token=xxxxx&tenant=xxxxx",
		"https://hooks.example/x?SECRET":                    "https://hooks.example/x?xxxxx",
		"https://hooks.example/x?a=1&&b":                    "https://hooks.example/x?a=xxxxx&&xxxxx",
		"https://u:SECRET@hooks.example/x?k=SECRET#SECRET":  "https://u:xxxxx@hooks.example/x?k=xxxxx#xxxxx",
		"http://127.0.0.1:8/in?":                            "http://127.0.0.1:8/in",
	} {
		u, err := url.Parse(in)
		require.NoError(t, err)
		require.Equal(t, want, redact.URL(u), in)
		require.Equal(t, want, redact.String(in), in)
		require.Equal(t, in, u.String(), "the URL itself is left as it was")
	}
	require.NotContains(t, redact.String("http://h/%zz?token=SECRET"), "SECRET")
	require.Empty(t, redact.URL(nil))
}
