package dashboard

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
)

func TestJobJSON(t *testing.T) {
	t.Parallel()
	j := wheelq.JobInfo{Topic: "t", ID: "i", State: wheelq.StateDead, Due: time.Unix(1, 0), Attempts: 3,
		MaxAttempts: 3, LastError: "boom", Payload: []byte("hello")}
	m := jobJSON(j, false)
	require.Equal(t, "dead", m["state"], "the state by name")
	require.Equal(t, "boom", m["last_error"])
	require.Equal(t, 5, m["payload_size"])
	require.NotContains(t, m, "payload", "lists leave payloads out")

	m = jobJSON(j, true)
	require.Equal(t, "hello", m["payload"])
	require.Equal(t, false, m["payload_truncated"])

	// A long text payload is cut at a character's start, and stays text.
	j.Payload = []byte(strings.Repeat("é", maxPayloadShown)) // 2 bytes each
	j.Payload = append([]byte("x"), j.Payload...)            // an odd offset: the cut would split an é
	m = jobJSON(j, true)
	shown := m["payload"].(string)
	require.True(t, utf8.ValidString(shown))
	require.Less(t, len(shown), maxPayloadShown+1)
	require.Greater(t, len(shown), maxPayloadShown-utf8.UTFMax)
	require.Equal(t, true, m["payload_truncated"])

	// Bytes that are not UTF-8 come as hex.
	j.Payload = []byte{0xff, 0x00, 0x41}
	m = jobJSON(j, true)
	require.Equal(t, "/wBB", m["payload_base64"])
	require.NotContains(t, m, "payload")
}
