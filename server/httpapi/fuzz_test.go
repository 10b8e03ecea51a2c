package httpapi_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/httpapi"
)

// FuzzDecode: the request decoders take any bytes without panicking, and
// whatever they refuse is an Invalid error with a message; what they
// take, the request's own checks (options) accept or refuse with a code.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"id":"o-1","payload":"hi","delay_ms":1.5,"headers":{"k":"v"}}`,
		`{"payload_base64":"AAEC/w==","at":"2026-11-26T10:00:00.123456Z","on_duplicate":"replace","max_attempts":3}`,
		`{"jobs":[{"topic":"t","id":"a"},{"topic":"u","payload":"x"}]}`,
		`{"topics":["a","b"],"max":10,"ttr_ms":30000,"wait_ms":1000}`,
		`{"token":"abc","error":"e","retry_after_ms":5,"permanent":true}`,
		`{"receipts":[{"topic":"t","id":"a","token":"x"}]}`, `{"jobs":[{"topic":"t","id":"a"}]}`,
		`{"topic":"t","every_ms":1000,"time_zone":"Europe/Paris","missed":"each","start":"2026-11-26T10:00:00Z"}`,
		`{"topic":"t","cron":"*/5 * * * *","payload_base64":"AA==","max_missed":-1}`,
		`{"delay_ms":-1}`, `{"a":1}`, `[]`, `{"id":"x"} {}`, "{\"payload\":\"\xff\"}", `{"delay_ms":1e400}`,
		`{"payload":"\ud83d\ude00"}`, `{"payload":"\ud83d"}`, `{"payload":"\\ud83d"}`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []any{&httpapi.ScheduleRequest{}, &httpapi.BatchRequest{}, &httpapi.ReserveRequest{},
			&httpapi.NackRequest{}, &httpapi.TouchRequest{}, &httpapi.TimeRequest{}, &httpapi.AckRequest{},
			&httpapi.AckBatchRequest{}, &httpapi.CancelBatchRequest{}, &httpapi.RecurringRequest{}} {
			err := httpapi.Decode(strings.NewReader(string(b)), v)
			if err != nil {
				var e *apierr.Error
				if !errors.As(err, &e) || e.Code != apierr.Invalid || e.Message == "" {
					t.Fatalf("%T: %q: error %v is not an Invalid apierr.Error", v, b, err)
				}
				continue
			}
			if !utf8.Valid(b) {
				t.Fatalf("%T: %q: not UTF-8, decoded all the same", v, b)
			}
			if sr, ok := v.(*httpapi.ScheduleRequest); ok {
				if err := httpapi.CheckSchedule(sr); err != nil {
					var e *apierr.Error
					if !errors.As(err, &e) {
						t.Fatalf("%q: %v has no code", b, err)
					}
				}
			}
		}
	})
}
