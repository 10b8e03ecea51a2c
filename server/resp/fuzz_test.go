package resp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/resp"
)

// FuzzParse: any bytes through redcon's parser and then wheelq's
// argument parsers: no panic, and every refusal is an Invalid error with
// a message.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"*4\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\nt\r\n$1\r\np\r\n$2\r\nID\r\n",
		"*7\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\nt\r\n$3\r\n\x00\xff\x01\r\n$5\r\nDELAY\r\n$3\r\n100\r\n$6\r\nHEADER\r\n$1\r\nk\r\n",
		"WQ.RESERVE COUNT 10 BLOCK 100 TTR 1000 TOPICS a b\r\n",
		"WQ.RESERVE TOPICS\r\n", "*-1\r\n", "*1\r\n$-1\r\n", "*2\r\n$4\r\nPING\r\n$999999999999\r\n",
		"*1\r\n*1\r\n$4\r\nPING\r\n", "WQ.SCHEDULE t p AT -5 MAXATTEMPTS 0 REPLACE\r\n",
		"WQ.RECUR n t EVERY 1000 TZ UTC MISSED each MAXMISSED 5 HEADER k v\r\n", "WQ.RECUR n t CRON \"*/5 * * * *\" START 0 END -1\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cmd, err := redcon.Parse(raw)
		if err != nil || len(cmd.Args) < 1 {
			return
		}
		check := func(err error) {
			if err == nil {
				return
			}
			var e *apierr.Error
			if !errors.As(err, &e) || e.Code != apierr.Invalid || e.Message == "" {
				t.Fatalf("%q: %v is not an Invalid error", raw, err)
			}
		}
		_, err = resp.ParseSchedule(cmd.Args[1:])
		check(err)
		_, err = resp.ParseReserve(cmd.Args[1:], time.Minute)
		check(err)
		_, err = resp.ParseRecur(cmd.Args[1:])
		check(err)
	})
}
