package server_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// BenchmarkScheduleHTTP: one job per request through the whole server (its
// middleware, access log and metrics included) from 16 parallel clients
// with keep-alive; the server's CPU per job is what wheelq-bench's
// server-schedule reports.
func BenchmarkScheduleHTTP(b *testing.B) {
	for _, access := range []bool{false, true} {
		name := "access-log-off"
		if access {
			name = "access-log-on"
		}
		b.Run(name, func(b *testing.B) {
			a := servertest.Start(b, func(c *config.Config) { c.Log.Access = access; c.Log.Level = "error" })
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			body := []byte(`{"payload":"0123456789012345678901234567890123456789012345678901234567890123","delay_ms":3600000}`)
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Post(a.HTTP+"/v1/jobs/t", "application/json", bytes.NewReader(body))
					if err != nil || resp.StatusCode != 201 {
						b.Errorf("%v %v", err, resp)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
