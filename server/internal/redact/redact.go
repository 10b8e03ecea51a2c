// Package redact prints URLs without the secrets they may carry: a push
// receiver that takes its token in the query (?token=...), a password in
// the user info. Every place the server prints a push URL (its log, a
// job's last error, -print-config, a refusal of the configuration) prints
// it through URL or String.
package redact

import (
	"net/url"
	"strings"
)

// Mask stands for a hidden value: url.URL.Redacted's own mask for a
// password, so that one printed URL has one mask.
const Mask = "xxxxx"

// URL is u with every query value, a password and a fragment masked:
// "https://hooks.example/x?token=xxxxx&tenant=xxxxx". The query's keys
// stay, in their order, to say which URL it was; a query part without
// '=' (which may be a bare token) is masked whole. The scheme, the host
// and the path are shown.
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	if c.RawQuery != "" {
		parts := strings.Split(c.RawQuery, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok {
				parts[i] = k + "=" + Mask
			} else if p != "" {
				parts[i] = Mask
			}
		}
		c.RawQuery = strings.Join(parts, "&")
	}
	c.ForceQuery = false
	if c.Fragment != "" || c.RawFragment != "" {
		c.Fragment, c.RawFragment = Mask, ""
	}
	return c.Redacted()
}

// String is URL of s parsed; a string that does not parse as a URL is not
// shown at all (it may hold a secret anywhere).
func String(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse: not shown)"
	}
	return URL(u)
}
