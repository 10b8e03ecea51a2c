// Package auth decides who may do what on the wheelq server. A token is
// "wq_<id>_<secret>": the id, not secret, finds its entry; the server
// keeps only the SHA-256 of the whole token and compares digests in
// constant time. Each token carries three permissions, each for a list of
// topic patterns (path.Match globs: "orders.*", "*"): Produce (schedule,
// cancel, reschedule, get), Consume (reserve, ack, nack, touch, get),
// Admin (everything, lists, counts, pause, resume, dead jobs, requeue).
package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// Errors of Authenticate and Allow.
var (
	// ErrUnauthorized: no token, or one that is not known.
	ErrUnauthorized = errors.New("auth: unauthorized")
	// ErrForbidden: a known token without the permission.
	ErrForbidden = errors.New("auth: forbidden")
	// ErrBadToken is a malformed token entry or token file line.
	ErrBadToken = errors.New("auth: bad token entry")
)

// Perm is a permission.
type Perm int

// The permissions.
const (
	Produce Perm = iota
	Consume
	Admin
	numPerms
)

var permNames = [numPerms]string{"produce", "consume", "admin"}

// String names the permission as the configuration does.
func (p Perm) String() string {
	if p < 0 || p >= numPerms {
		return fmt.Sprintf("perm(%d)", int(p))
	}
	return permNames[p]
}

// Entry is a token as configured: its id, the hex SHA-256 of the whole
// token, and its patterns per permission.
type Entry struct {
	ID     string
	SHA256 string
	Perms  [numPerms][]string
}

// Principal is who made a request: a token's entry, or the anonymous
// principal of a server without tokens (loopback only), which may do
// everything.
type Principal struct {
	ID    string
	perms [numPerms][]string
	all   bool
}

// anonymous may do everything: the principal of a loopback server that
// has no tokens.
func anonymous() *Principal { return &Principal{ID: "anonymous", all: true} }

// Allow says whether p may act with perm on topic ("" for an act on
// every topic, which needs a "*" pattern). Admin covers every
// permission.
func (p *Principal) Allow(perm Perm, topic string) error {
	if p.all {
		return nil
	}
	for _, pp := range []Perm{perm, Admin} {
		for _, pat := range p.perms[pp] {
			if pat == "*" {
				return nil
			}
			if topic == "" {
				continue
			}
			if ok, _ := path.Match(pat, topic); ok {
				return nil
			}
		}
	}
	if topic == "" {
		return fmt.Errorf("%w: token %s may not %s every topic", ErrForbidden, p.ID, perm)
	}
	return fmt.Errorf("%w: token %s may not %s topic %q", ErrForbidden, p.ID, perm, topic)
}

// AllowAny says whether p may act on topic with any of perms.
func (p *Principal) AllowAny(topic string, perms ...Perm) error {
	var err error
	for _, pp := range perms {
		if err = p.Allow(pp, topic); err == nil {
			return nil
		}
	}
	return err
}

// Authorizer authenticates tokens. Its zero value is not usable: see
// New. It is immutable: a reload builds a new one.
type Authorizer struct {
	byID map[string]*entry
	open bool
}

type entry struct {
	digest [32]byte
	p      *Principal
}

// New builds an authorizer from entries. With none, and open true (a
// loopback server), every request is the anonymous principal's; with
// none and open false, every request is refused.
func New(entries []Entry, open bool) (*Authorizer, error) {
	a := &Authorizer{byID: make(map[string]*entry, len(entries)), open: open && len(entries) == 0}
	for _, e := range entries {
		if e.ID == "" || strings.ContainsAny(e.ID, "_ \t") {
			return nil, fmt.Errorf("%w: id %q (want a name without '_' or spaces)", ErrBadToken, e.ID)
		}
		d, err := hex.DecodeString(e.SHA256)
		if err != nil || len(d) != 32 {
			return nil, fmt.Errorf("%w: token %s: sha256 must be 64 hex digits", ErrBadToken, e.ID)
		}
		if _, dup := a.byID[e.ID]; dup {
			return nil, fmt.Errorf("%w: token id %s given twice", ErrBadToken, e.ID)
		}
		for pp, pats := range e.Perms {
			for _, pat := range pats {
				if _, err := path.Match(pat, ""); err != nil {
					return nil, fmt.Errorf("%w: token %s: %s pattern %q: %v", ErrBadToken, e.ID, Perm(pp), pat, err)
				}
			}
		}
		en := &entry{p: &Principal{ID: e.ID, perms: e.Perms}}
		copy(en.digest[:], d)
		a.byID[e.ID] = en
	}
	return a, nil
}

// Open says whether the authorizer lets every request in as anonymous.
func (a *Authorizer) Open() bool { return a.open }

// Authenticate finds the principal of token ("" when the request had
// none).
func (a *Authorizer) Authenticate(token string) (*Principal, error) {
	if a.open {
		return anonymous(), nil
	}
	if token == "" {
		return nil, fmt.Errorf("%w: no token (send Authorization: Bearer wq_...)", ErrUnauthorized)
	}
	id, ok := tokenID(token)
	e := a.byID[id]
	// Hash and compare in any case, so that an unknown id costs what a
	// wrong secret does.
	sum := sha256.Sum256([]byte(token))
	var want [32]byte
	if e != nil {
		want = e.digest
	}
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !ok || e == nil {
		return nil, fmt.Errorf("%w: unknown token", ErrUnauthorized)
	}
	return e.p, nil
}

func tokenID(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, "wq_")
	if !ok {
		return "", false
	}
	id, secret, ok := strings.Cut(rest, "_")
	return id, ok && id != "" && secret != ""
}

// Generate makes a new random token for id and its entry's digest.
func Generate(id string) (token, sha string, err error) {
	if id == "" || strings.ContainsAny(id, "_ \t") {
		return "", "", fmt.Errorf("%w: id %q (want a name without '_' or spaces)", ErrBadToken, id)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = "wq_" + id + "_" + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	return token, hex.EncodeToString(sum[:]), nil
}

// ParseFile reads a token file: one entry per line,
//
//	id sha256hex produce=glob,glob consume=glob admin=glob
//
// with blank lines and '#' comments.
func ParseFile(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		text := sc.Text()
		if n == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // a byte order mark
		}
		line, _, _ := strings.Cut(text, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("%w: line %d: want \"id sha256 perm=glob,...\"", ErrBadToken, n)
		}
		e := Entry{ID: f[0], SHA256: f[1]}
		for _, kv := range f[2:] {
			k, v, ok := strings.Cut(kv, "=")
			i := -1
			for pp, name := range permNames {
				if name == k {
					i = pp
				}
			}
			if i < 0 {
				return nil, fmt.Errorf("%w: line %d: unknown permission %q (want produce, consume or admin)", ErrBadToken, n, k)
			}
			pats := strings.Split(v, ",")
			if !ok || slices.Contains(pats, "") {
				return nil, fmt.Errorf("%w: line %d: %q: want %s=glob,... (no empty pattern)", ErrBadToken, n, kv, k)
			}
			e.Perms[i] = append(e.Perms[i], pats...)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// LoadFile reads the token file at name.
func LoadFile(name string) ([]Entry, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := ParseFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return es, nil
}
