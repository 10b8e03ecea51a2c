package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/auth"
)

func TestTokens(t *testing.T) {
	tok, sum, err := auth.Generate("shop")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(tok, "wq_shop_"))
	az, err := auth.New([]auth.Entry{{ID: "shop", SHA256: sum, Perms: [3][]string{{"orders.*"}, {"sms"}, nil}}}, true)
	require.NoError(t, err)
	require.False(t, az.Open(), "tokens configured: loopback is no longer open")

	p, err := az.Authenticate(tok)
	require.NoError(t, err)
	require.Equal(t, "shop", p.ID)
	require.NoError(t, p.Allow(auth.Produce, "orders.cancel"))
	require.NoError(t, p.Allow(auth.Consume, "sms"))
	for _, c := range []struct {
		perm  auth.Perm
		topic string
	}{{auth.Produce, "orders"}, {auth.Produce, "sms"}, {auth.Consume, "orders.cancel"}, {auth.Admin, "orders.cancel"}, {auth.Produce, ""}} {
		require.ErrorIs(t, p.Allow(c.perm, c.topic), auth.ErrForbidden, "%v %q", c.perm, c.topic)
	}
	for _, bad := range []string{"", "wq_shop_x", tok + "x", strings.Replace(tok, "shop", "shoq", 1), "Bearer " + tok, "wq__" + tok[8:]} {
		_, err := az.Authenticate(bad)
		require.ErrorIs(t, err, auth.ErrUnauthorized, "%q", bad)
	}
}

func TestOpenOnlyWithoutTokens(t *testing.T) {
	az, err := auth.New(nil, true)
	require.NoError(t, err)
	p, err := az.Authenticate("")
	require.NoError(t, err)
	require.NoError(t, p.Allow(auth.Admin, ""))
	closed, err := auth.New(nil, false)
	require.NoError(t, err)
	_, err = closed.Authenticate("")
	require.ErrorIs(t, err, auth.ErrUnauthorized)
}

func TestBadEntries(t *testing.T) {
	_, sum, _ := auth.Generate("a")
	for _, es := range [][]auth.Entry{
		{{ID: "", SHA256: sum}}, {{ID: "a_b", SHA256: sum}}, {{ID: "a", SHA256: "zz"}},
		{{ID: "a", SHA256: sum}, {ID: "a", SHA256: sum}}, {{ID: "a", SHA256: sum, Perms: [3][]string{{"[bad"}}}},
	} {
		_, err := auth.New(es, false)
		require.ErrorIs(t, err, auth.ErrBadToken)
	}
	_, _, err := auth.Generate("with space")
	require.ErrorIs(t, err, auth.ErrBadToken)
}

func TestParseFile(t *testing.T) {
	_, sum, _ := auth.Generate("a")
	es, err := auth.ParseFile(strings.NewReader("# tokens\n\na " + sum + " produce=x.*,y consume=z # the worker\nb " + sum + "\n"))
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, []string{"x.*", "y"}, es[0].Perms[auth.Produce])
	require.Equal(t, []string{"z"}, es[0].Perms[auth.Consume])
	_, err = auth.ParseFile(strings.NewReader("a " + sum + " write=x\n"))
	require.True(t, errors.Is(err, auth.ErrBadToken))
	_, err = auth.ParseFile(strings.NewReader("lonely\n"))
	require.True(t, errors.Is(err, auth.ErrBadToken))
	// A permission with no '=' granted nothing, silently; an empty
	// pattern likewise (found by a red team).
	for _, bad := range []string{"admin", "admin=", "produce=a,,b"} {
		_, err = auth.ParseFile(strings.NewReader("a " + sum + " " + bad + "\n"))
		require.ErrorIs(t, err, auth.ErrBadToken, bad)
	}
	// A byte order mark (a file saved by some editors) is not part of
	// the first id.
	es, err = auth.ParseFile(strings.NewReader("\ufeffa " + sum + " produce=x\n"))
	require.NoError(t, err)
	require.Equal(t, "a", es[0].ID)
}
