package dashboard

// A small W3C WebDriver client (https://www.w3.org/TR/webdriver2/) over
// net/http and encoding/json, driving Debian's chromium through
// chromedriver, headless, on loopback. No dependency beyond the standard
// library.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envRequireBrowser set (not "0") makes the browser tests fail, not skip,
// where chromium or chromedriver is missing. .ci/run sets it.
const envRequireBrowser = "WHEELQ_REQUIRE_BROWSER"

// envScreenshots names a directory for the browser tests' screenshots
// (default: the test's temporary directory, removed after it).
const envScreenshots = "WHEELQ_SCREENSHOTS"

// The browser and its driver: Debian's paths, or those the variables
// WHEELQ_CHROMIUM and WHEELQ_CHROMEDRIVER give.
const (
	envChromium     = "WHEELQ_CHROMIUM"
	envChromedriver = "WHEELQ_CHROMEDRIVER"
)

type browser struct {
	t       testing.TB
	base    string // http://127.0.0.1:port/session/ID
	hc      *http.Client
	shots   string
	timeout time.Duration
}

// startBrowser starts chromedriver on a free loopback port and a headless
// chromium session, both stopped at the test's cleanup. It skips the test
// (or fails it, under WHEELQ_REQUIRE_BROWSER) where either is missing.
func startBrowser(t testing.TB) *browser {
	t.Helper()
	driver := os.Getenv(envChromedriver)
	if driver == "" {
		driver = "/usr/bin/chromedriver"
	}
	chromium := os.Getenv(envChromium)
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	var missing []string
	for _, p := range []string{chromium, driver} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("browser test: %s not installed (Debian: apt-get install chromium chromium-driver)", strings.Join(missing, " and "))
		if v := os.Getenv(envRequireBrowser); v != "" && v != "0" {
			t.Fatalf("%s, and %s=%s requires it", msg, envRequireBrowser, v)
		}
		t.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	logPath := filepath.Join(t.TempDir(), "chromedriver.log")
	cmd := exec.Command(driver, "--port="+strconv.Itoa(port), "--log-path="+logPath)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromedriver: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	b := &browser{t: t, hc: &http.Client{Timeout: time.Minute}, timeout: 15 * time.Second}
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st struct {
			Ready bool `json:"ready"`
		}
		if err := b.call(http.MethodGet, root+"/status", nil, &st); err == nil && st.Ready {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("chromedriver exited: %s", tailOf(log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver not ready on port %d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	profile := t.TempDir()
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName":       "chrome",
		"goog:loggingPrefs": map[string]string{"browser": "ALL"},
		"goog:chromeOptions": map[string]any{
			"binary": chromium,
			"args": []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
				"--disable-background-networking", "--disable-component-update", "--disable-sync",
				"--disable-dev-shm-usage", "--window-size=1280,900", "--user-data-dir=" + profile},
		},
	}}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(http.MethodPost, root+"/session", caps, &sess); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("new WebDriver session: %v\nchromedriver log: %s", err, tailOf(log))
	}
	b.base = root + "/session/" + sess.SessionID
	t.Cleanup(func() { _ = b.call(http.MethodDelete, b.base, nil, nil) })
	b.shots = os.Getenv(envScreenshots)
	if b.shots == "" {
		b.shots = t.TempDir()
	} else if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatalf("screenshots: %v", err)
	}
	return b
}

func tailOf(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// call sends a WebDriver command and decodes its "value" into out.
func (b *browser) call(method, url string, in, out any) error {
	var body *bytes.Reader
	if in == nil && method == http.MethodPost {
		in = map[string]any{}
	}
	if in != nil {
		j, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(j)
	}
	var req *http.Request
	var err error
	if body != nil {
		req, err = http.NewRequest(method, url, body)
	} else {
		req, err = http.NewRequest(method, url, nil)
	}
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil {
		return fmt.Errorf("%s %s: %s: %v", method, url, res.Status, err)
	}
	if res.StatusCode != http.StatusOK {
		e := &webdriverError{Status: res.Status, Request: method + " " + url}
		_ = json.Unmarshal(env.Value, e)
		return e
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

// webdriverError is an error a WebDriver command answered with; Code is
// the W3C error code ("stale element reference", ...).
type webdriverError struct {
	Status  string
	Request string
	Code    string `json:"error"`
	Message string `json:"message"`
}

func (e *webdriverError) Error() string {
	return fmt.Sprintf("%s: %s: %s: %s", e.Request, e.Status, e.Code, e.Message)
}

// passing reports whether err says the element found a moment ago is not
// the one on the page any more, or not yet clickable: the page re-rendered
// (its periodic refresh, an action's reply) between finding and clicking.
// Finding the element again is the cure.
func passing(err error) bool {
	var e *webdriverError
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case "stale element reference", "no such element", "element click intercepted", "element not interactable":
		return true
	}
	return false
}

func (b *browser) must(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatalf("webdriver: %v", err)
	}
}

// open loads url and waits for the document to be ready.
func (b *browser) open(url string) {
	b.t.Helper()
	b.must(b.call(http.MethodPost, b.base+"/url", map[string]any{"url": url}, nil))
}

// fresh parks the browser on a blank page and drops the console's
// entries so far: a subtest's checks of the console see only its own page.
// The page of the subtest before refreshes itself, against a server that
// subtest's cleanup has closed (ERR_CONNECTION_REFUSED), for as long as it
// stays open.
func (b *browser) fresh() {
	b.t.Helper()
	b.open("about:blank")
	_ = b.consoleErrors()
}

// url returns the address the page is at.
func (b *browser) url() string {
	b.t.Helper()
	var u string
	b.must(b.call(http.MethodGet, b.base+"/url", nil, &u))
	return u
}

// elements returns the ids of the elements matching css (none: empty).
func (b *browser) elements(css string) []string {
	b.t.Helper()
	var els []map[string]string
	b.must(b.call(http.MethodPost, b.base+"/elements", map[string]any{"using": "css selector", "value": css}, &els))
	ids := make([]string, 0, len(els))
	for _, e := range els {
		for _, id := range e { // the one key is the W3C element identifier
			ids = append(ids, id)
		}
	}
	return ids
}

// waitFor waits until cond holds, polling; it fails the test with what
// after the browser's timeout, with a screenshot of the page as it was.
func (b *browser) waitFor(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(b.timeout)
	for !cond() {
		if time.Now().After(deadline) {
			p := b.screenshot("timeout")
			b.t.Fatalf("browser: waited %v for %s (screenshot %s; page text: %q)", b.timeout, what, p, b.pageText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// element waits for an element matching css and returns the first.
func (b *browser) element(css string) string {
	b.t.Helper()
	var ids []string
	b.waitFor("an element "+css, func() bool { ids = b.elements(css); return len(ids) > 0 })
	return ids[0]
}

// waitText waits until the first element matching css has text want.
func (b *browser) waitText(css, want string) {
	b.t.Helper()
	b.waitFor(fmt.Sprintf("%s to read %q", css, want), func() bool {
		ids := b.elements(css)
		return len(ids) > 0 && b.text(ids[0]) == want
	})
}

// waitContains waits until the first element matching css contains want.
func (b *browser) waitContains(css, want string) {
	b.t.Helper()
	b.waitFor(fmt.Sprintf("%s to contain %q", css, want), func() bool {
		ids := b.elements(css)
		return len(ids) > 0 && strings.Contains(b.text(ids[0]), want)
	})
}

func (b *browser) text(id string) string {
	b.t.Helper()
	var s string
	if err := b.call(http.MethodGet, b.base+"/element/"+id+"/text", nil, &s); err != nil {
		return "" // gone meanwhile (the page re-rendered): the caller polls again
	}
	return s
}

// click clicks the first element matching css. It finds the element anew
// for each try: one that the page replaced between finding and clicking
// (a re-render) is found again and clicked, until the browser's timeout.
func (b *browser) click(css string) {
	b.t.Helper()
	b.waitFor("a click on "+css, func() bool {
		ids := b.elements(css)
		if len(ids) == 0 {
			return false
		}
		err := b.call(http.MethodPost, b.base+"/element/"+ids[0]+"/click", nil, nil)
		if err != nil && !passing(err) {
			b.must(err)
		}
		return err == nil
	})
}

// alertText waits for a dialog and returns its text (leaving it open).
func (b *browser) alertText() string {
	b.t.Helper()
	var text string
	b.waitFor("a dialog's text", func() bool {
		return b.call(http.MethodGet, b.base+"/alert/text", nil, &text) == nil
	})
	return text
}

func (b *browser) acceptAlert() {
	b.t.Helper()
	b.waitFor("a confirm dialog", func() bool {
		return b.call(http.MethodPost, b.base+"/alert/accept", nil, nil) == nil
	})
}

func (b *browser) pageText() string {
	var s string
	_ = b.call(http.MethodPost, b.base+"/execute/sync", map[string]any{"script": "return document.body ? document.body.innerText : ''", "args": []any{}}, &s)
	return s
}

// execAsync runs script in the page; it calls its last argument with the
// result.
func (b *browser) execAsync(script string, out any) {
	b.t.Helper()
	b.must(b.call(http.MethodPost, b.base+"/execute/async", map[string]any{"script": script, "args": []any{}}, out))
}

// consoleErrors returns the page's console messages of level SEVERE
// since the last call: script errors, Content-Security-Policy violations,
// failed requests (chromedriver's log endpoint, not W3C).
func (b *browser) consoleErrors() []string {
	b.t.Helper()
	var entries []struct {
		Level   string `json:"level"`
		Message string `json:"message"`
	}
	b.must(b.call(http.MethodPost, b.base+"/se/log", map[string]any{"type": "browser"}, &entries))
	var out []string
	for _, e := range entries {
		if e.Level == "SEVERE" {
			out = append(out, e.Message)
		}
	}
	return out
}

// screenshot saves the page as name.png in the screenshots directory and
// returns its path.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	var data string
	if err := b.call(http.MethodGet, b.base+"/screenshot", nil, &data); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	png, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	b.t.Logf("screenshot: %s", p)
	return p
}
