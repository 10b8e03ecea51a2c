package httpapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
)

// TestRecurringOtherTenantTopicHidden: a token refused the change of
// another tenant's recurring schedule (PUT or DELETE by its name) learns
// that the name is taken, which a global name cannot hide, but not the
// topic of that schedule, a topic it has no permission on. (Found by a
// red team: the 403's message named it, "token mail may not produce
// topic \"billing.secret\"", so any token could map schedule names to
// other tenants' topics.)
func TestRecurringOtherTenantTopicHidden(t *testing.T) {
	t.Parallel()
	billTok, billSum, err := auth.Generate("bill")
	require.NoError(t, err)
	mailTok, mailSum, err := auth.Generate("mail")
	require.NoError(t, err)
	az, err := auth.New([]auth.Entry{
		{ID: "bill", SHA256: billSum, Perms: [3][]string{{"billing.secret"}}},
		{ID: "mail", SHA256: mailSum, Perms: [3][]string{{"mail"}}},
	}, true)
	require.NoError(t, err)
	e := setup(t, az, defaultOpts())
	e.tok = billTok
	e.ok(200, "PUT", "/v1/recurring/nightly", map[string]any{"topic": "billing.secret", "every_ms": 3600000}, nil)

	e.tok = mailTok
	for _, msg := range []string{
		e.fails(403, apierr.Forbidden, "PUT", "/v1/recurring/nightly", map[string]any{"topic": "mail", "every_ms": 3600000}),
		e.fails(403, apierr.Forbidden, "DELETE", "/v1/recurring/nightly", nil),
	} {
		require.NotContains(t, msg, "billing", "the refusal names the other tenant's topic")
	}
}
