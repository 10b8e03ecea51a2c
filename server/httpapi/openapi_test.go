package httpapi_test

import (
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/httpapi"
)

type openAPIDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openAPIOp        `json:"paths"`
	Comps   struct{ Schemas map[string]schemaDoc } `json:"components"`
}

type openAPIOp struct {
	OperationID string                     `json:"operationId"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

type schemaDoc struct {
	Properties map[string]struct {
		Enum []string `json:"enum"`
	} `json:"properties"`
	Required []string `json:"required"`
}

func loadDoc(t *testing.T) openAPIDoc {
	t.Helper()
	var d openAPIDoc
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI(), &d))
	require.True(t, strings.HasPrefix(d.OpenAPI, "3.1"), "OpenAPI 3.1")
	return d
}

// TestOpenAPIRoutes: the document's paths and methods are the server's
// routes, with the same operation ids, and no more.
func TestOpenAPIRoutes(t *testing.T) {
	d := loadDoc(t)
	var doc, served []string
	for p, ops := range d.Paths {
		for m, op := range ops {
			doc = append(doc, strings.ToUpper(m)+" "+p+" "+op.OperationID)
		}
	}
	for _, r := range httpapi.Routes() {
		require.NotContains(t, r.Pattern, "...", "a wildcard OpenAPI cannot write")
		require.NotContains(t, r.Pattern, "{$}")
		served = append(served, r.Pattern+" "+r.Operation)
	}
	sort.Strings(doc)
	sort.Strings(served)
	require.Equal(t, served, doc)
}

// TestRoutesDocumented: every route the server serves has its row in
// docs/server.md's route table (POST /v1/reserve/stream, POST /v1/ack and
// GET /v1/openapi.json had none).
func TestRoutesDocumented(t *testing.T) {
	md, err := os.ReadFile("../../docs/server.md")
	require.NoError(t, err)
	rows := map[string]bool{}
	for line := range strings.Lines(string(md)) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, cell := range strings.Split(first, ",") {
			rows[strings.Trim(strings.TrimSpace(cell), "`")] = true
		}
	}
	for _, r := range httpapi.Routes() {
		require.True(t, rows[r.Pattern], "docs/server.md's route table has no row for %s", r.Pattern)
	}
}

// TestOpenAPIErrorCodes: the Error schema's code enum is apierr's table,
// and every error status an operation lists is one a code has.
func TestOpenAPIErrorCodes(t *testing.T) {
	d := loadDoc(t)
	var want []string
	statuses := map[string]bool{}
	for _, c := range apierr.Codes() {
		want = append(want, string(c.Code))
		statuses[itoa(c.Status)] = true
	}
	require.Equal(t, want, d.Comps.Schemas["Error"].Properties["code"].Enum)
	for p, ops := range d.Paths {
		for m, op := range ops {
			for st, raw := range op.Responses {
				if strings.Contains(string(raw), "#/components/responses/Error") {
					require.True(t, statuses[st], "%s %s lists error status %s, which no code has", m, p, st)
				}
				// A read applies nothing: its timeout is unavailable (503),
				// never outcome_unknown (504).
				require.False(t, m == "get" && st == "504", "GET %s lists 504 outcome_unknown", p)
			}
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// jsonFields lists the JSON names of t's fields, embedded structs'
// included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPISchemas: each schema's properties are the fields of the Go
// type the server decodes or encodes, so a field added to one and not the
// other fails here.
func TestOpenAPISchemas(t *testing.T) {
	d := loadDoc(t)
	types := map[string]any{
		"When": httpapi.When{}, "ScheduleRequest": httpapi.ScheduleRequest{}, "ScheduleResponse": httpapi.ScheduleResponse{},
		"BatchJob": httpapi.BatchJob{}, "BatchRequest": httpapi.BatchRequest{}, "BatchResult": httpapi.BatchResult{},
		"BatchResponse": httpapi.BatchResponse{}, "TimeRequest": httpapi.TimeRequest{}, "ReserveRequest": httpapi.ReserveRequest{},
		"Reserved": httpapi.Reserved{}, "ReserveResponse": httpapi.ReserveResponse{}, "AckRequest": httpapi.AckRequest{},
		"Receipt": httpapi.Receipt{}, "AckBatchRequest": httpapi.AckBatchRequest{}, "AckResult": httpapi.AckResult{},
		"AckBatchResponse": httpapi.AckBatchResponse{},
		"NackRequest":      httpapi.NackRequest{}, "TouchRequest": httpapi.TouchRequest{}, "TouchResponse": httpapi.TouchResponse{},
		"ListResponse": httpapi.ListResponse{}, "TopicCounts": httpapi.TopicCounts{}, "CountsResponse": httpapi.CountsResponse{},
		"Error": apierr.Error{}, "ErrorResponse": httpapi.ErrorResponse{}, "HealthResponse": httpapi.HealthResponse{},
		"RecurringRequest": httpapi.RecurringRequest{}, "Recurring": httpapi.Recurring{}, "RecurringList": httpapi.RecurringList{},
		"CancelBatchRequest": httpapi.CancelBatchRequest{}, "JobRef": httpapi.JobRef{},
	}
	var names []string
	for name, v := range types {
		s, ok := d.Comps.Schemas[name]
		require.True(t, ok, "no schema %s", name)
		props := slices.Sorted(maps.Keys(s.Properties))
		require.Equal(t, jsonFields(reflect.TypeOf(v)), props, "schema %s against %T", name, v)
		names = append(names, name)
	}
	// Job is the library's JSON shape for a JobInfo: every key it writes
	// is a property.
	ts := time.Now()
	full := wheelq.JobInfo{Topic: "t", ID: "i", State: wheelq.StateDone, Due: ts, Attempts: 1, MaxAttempts: 2, LastError: "e",
		Created: ts, Finished: ts, Headers: map[string]string{"k": "v"}, Payload: []byte("p"), Reserved: true}
	bin := full
	bin.Payload = []byte{0xff}
	job := d.Comps.Schemas["Job"]
	for _, j := range []wheelq.JobInfo{full, bin} {
		b, err := json.Marshal(j)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		for k := range m {
			require.Contains(t, job.Properties, k, "JobInfo writes %q", k)
		}
	}
	for _, st := range []wheelq.JobState{wheelq.StatePending, wheelq.StateRunning, wheelq.StateDead, wheelq.StateDone, wheelq.StateCancelled} {
		require.Contains(t, job.Properties["state"].Enum, st.String())
	}
	names = append(names, "Job")
	require.ElementsMatch(t, names, slices.Collect(maps.Keys(d.Comps.Schemas)), "a schema no Go type backs")
}
