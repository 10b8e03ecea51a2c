package wheelq

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJobInfoJSON: one JSON shape for a job, snake
// case, in the CLI and the dashboard alike (they differed), read back
// whole.
func TestJobInfoJSON(t *testing.T) {
	due := time.Date(2026, 11, 26, 10, 0, 0, 500_000_000, time.UTC)
	j := JobInfo{Topic: "orders", ID: "o-1", State: StateDead, Due: due, Attempts: 3, MaxAttempts: 3,
		LastError: "boom", Created: due.Add(-time.Hour), Finished: due, Headers: map[string]string{"k": "v"},
		Payload: []byte(`{"order":1}`)}
	b, err := json.Marshal(j)
	require.NoError(t, err)
	require.JSONEq(t, `{"topic":"orders","id":"o-1","state":"dead","due":"2026-11-26T10:00:00.5Z",
		"attempts":3,"max_attempts":3,"last_error":"boom","created":"2026-11-26T09:00:00.5Z",
		"finished":"2026-11-26T10:00:00.5Z","headers":{"k":"v"},"payload":"{\"order\":1}"}`, string(b))
	var back JobInfo
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, back.Due.Equal(j.Due) && back.Created.Equal(j.Created) && back.Finished.Equal(j.Finished))
	back.Due, back.Created, back.Finished = j.Due, j.Created, j.Finished
	require.Equal(t, j, back)

	// Bytes that are not UTF-8: base64. No payload (a finished job), zero
	// times: left out.
	b, err = json.Marshal(JobInfo{Topic: "t", ID: "i", State: StatePending, Payload: []byte{0xff, 0}})
	require.NoError(t, err)
	require.JSONEq(t, `{"topic":"t","id":"i","state":"pending","attempts":0,"max_attempts":0,"payload_base64":"/wA="}`, string(b))
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, []byte{0xff, 0}, back.Payload)
	b, err = json.Marshal(JobInfo{Topic: "t", ID: "i", State: StateDone})
	require.NoError(t, err)
	require.JSONEq(t, `{"topic":"t","id":"i","state":"done","attempts":0,"max_attempts":0}`, string(b))

	require.ErrorIs(t, json.Unmarshal([]byte(`{"state":"asleep"}`), &back), ErrInvalidOption)
	for st := StatePending; st <= StateCancelled; st++ {
		got, err := ParseJobState(st.String())
		require.NoError(t, err)
		require.Equal(t, st, got)
	}
}
