package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/httpapi"
)

// BenchmarkSchedule: one job per call, from parallel goroutines: the
// library's Schedule (the baseline) and the same through the HTTP API
// with keep-alive. Compare ns/op as a ratio (benchstat), interleaved
// runs.
func BenchmarkSchedule(b *testing.B) {
	for _, via := range []string{"library", "http"} {
		b.Run(via, func(b *testing.B) {
			e := setupBench(b)
			var n atomic.Int64
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			body := []byte(`{"payload":"0123456789012345678901234567890123456789012345678901234567890123","delay_ms":3600000}`)
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := n.Add(1)
					if via == "library" {
						if _, err := e.q.Schedule(context.Background(), "t", body[12:76], wheelq.ID(fmt.Sprint("l", k)), wheelq.After(time.Hour)); err != nil {
							b.Error(err)
							return
						}
						continue
					}
					resp, err := c.Post(e.srv.URL+"/v1/jobs/t", "application/json", bytes.NewReader(body))
					if err != nil || resp.StatusCode != 201 {
						b.Errorf("%v %v", err, resp)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body) // so the connection is reused
					resp.Body.Close()
				}
			})
		})
	}
}

func setupBench(b *testing.B) *env { return setupTB(b) }

// BenchmarkDecode: a schedule request's body decoded as the server does
// for every request (strictly: unknown fields and trailing data refused).
func BenchmarkDecode(b *testing.B) {
	body := `{"id":"order-1234","payload":"0123456789012345678901234567890123456789012345678901234567890123","delay_ms":3600000}` + "\n"
	b.ReportAllocs()
	for b.Loop() {
		var req httpapi.ScheduleRequest
		if err := httpapi.Decode(strings.NewReader(body), &req); err != nil {
			b.Fatal(err)
		}
	}
}
