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
	require.Equal(t, "dead", m["State"], "the state by name")
	require.Equal(t, "boom", m["LastError"])
	require.Equal(t, 5, m["PayloadSize"])
	require.NotContains(t, m, "Payload", "lists leave payloads out")

	m = jobJSON(j, true)
	require.Equal(t, "hello", m["Payload"])
	require.Equal(t, false, m["PayloadTruncated"])

	// A long text payload is cut at a character's start, and stays text.
	j.Payload = []byte(strings.Repeat("é", maxPayloadShown)) // 2 bytes each
	j.Payload = append([]byte("x"), j.Payload...)            // an odd offset: the cut would split an é
	m = jobJSON(j, true)
	shown := m["Payload"].(string)
	require.True(t, utf8.ValidString(shown))
	require.Less(t, len(shown), maxPayloadShown+1)
	require.Greater(t, len(shown), maxPayloadShown-utf8.UTFMax)
	require.Equal(t, true, m["PayloadTruncated"])

	// Bytes that are not UTF-8 come as hex.
	j.Payload = []byte{0xff, 0x00, 0x41}
	m = jobJSON(j, true)
	require.Equal(t, "ff 00 41", m["PayloadHex"])
	require.NotContains(t, m, "Payload")
}
