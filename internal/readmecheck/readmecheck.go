// Package readmecheck holds what README.md and docs/ show a user to what
// the code does: a test finds a fenced block by the HTML comment that
// precedes it, and compares a Go program with its file, or replays a curl
// transcript against the app it was taken from.
//
// A block is marked by a comment on the line before its opening fence:
//
//	<!-- file: example/quickstart/main.go -->
//	<!-- transcript: example/quickstart -->
//
// A transcript holds commands, each a line beginning "$ ", and what each
// printed. Two commands are understood: `curl -i [-X METHOD] [-H 'Name:
// value']... [-d 'form'] URL`, whose output is the status line, the
// response headers shown (a shown transcript leaves out the headers that
// are not about rate limiting, but never one that is), a blank line and
// the body ("..." for a body left out); and `for i in $(seq N); do curl -s
// -o /dev/null [options] URL; done`, which sends the same request N times
// and prints nothing.
package readmecheck

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Root is the repository's root directory: the nearest folder, from the
// test's working directory up, whose go.mod is this module's.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), "module github.com/fiberlimit/limiter\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod of github.com/fiberlimit/limiter above the working directory")
		dir = parent
	}
}

// Block is the text inside the fenced block that follows the line
// "<!-- marker -->" in doc (a path from the repository root), without its
// fences. It fails the test when doc has no such block, or more than one.
func Block(t testing.TB, doc, marker string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(Root(t), doc))
	require.NoError(t, err)
	comment := "<!-- " + marker + " -->\n"
	parts := strings.Split(string(text), comment)
	require.Len(t, parts, 2, "%s: want exactly one %q", doc, strings.TrimSpace(comment))
	rest := parts[1]
	fence, body, ok := strings.Cut(rest, "\n")
	require.True(t, ok && strings.HasPrefix(fence, "```"), "%s: %q is not followed by a fenced block", doc, strings.TrimSpace(comment))
	end := strings.Index(body, "```\n")
	require.GreaterOrEqual(t, end, 0, "%s: the block after %q does not end", doc, strings.TrimSpace(comment))
	return body[:end]
}

// Exchange is one command of a transcript and what it printed.
type Exchange struct {
	// Command is the command as shown, without "$ ".
	Command string
	// Times is how many times the request is sent: 1 for curl -i, N for
	// the seq loop.
	Times int
	// Method, URL, Header and Form describe the request.
	Method string
	URL    string
	Header http.Header
	Form   string
	// Status is the status line shown, such as "HTTP/1.1 429 Too Many
	// Requests"; "" for a command that prints nothing.
	Status string
	// Fields are the response headers shown, in order, as [name, value].
	Fields [][2]string
	// Body is the body shown, its lines joined by "\n"; "..." when it is
	// left out.
	Body string
}

// Transcript parses a transcript block (see the package doc).
func Transcript(block string) ([]Exchange, error) {
	var out []Exchange
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	for i := 0; i < len(lines); {
		cmd, ok := strings.CutPrefix(lines[i], "$ ")
		if !ok {
			return nil, fmt.Errorf("readmecheck: line %d: %q is not a command", i+1, lines[i])
		}
		i++
		ex, err := parseCommand(cmd)
		if err != nil {
			return nil, fmt.Errorf("readmecheck: line %d: %w", i, err)
		}
		var shown []string
		for ; i < len(lines) && !strings.HasPrefix(lines[i], "$ "); i++ {
			shown = append(shown, lines[i])
		}
		if ex.Times > 1 || len(shown) == 0 {
			if len(shown) > 0 {
				return nil, fmt.Errorf("readmecheck: %q prints nothing, but output is shown", cmd)
			}
			out = append(out, ex)
			continue
		}
		ex.Status = shown[0]
		j := 1
		for ; j < len(shown) && shown[j] != ""; j++ {
			name, value, ok := strings.Cut(shown[j], ": ")
			if !ok {
				return nil, fmt.Errorf("readmecheck: %q: header line %q has no \": \"", cmd, shown[j])
			}
			ex.Fields = append(ex.Fields, [2]string{name, value})
		}
		if j < len(shown) {
			ex.Body = strings.Join(shown[j+1:], "\n")
		}
		out = append(out, ex)
	}
	return out, nil
}

// parseCommand reads one of the two commands the package knows.
func parseCommand(cmd string) (Exchange, error) {
	ex := Exchange{Command: cmd, Times: 1, Method: http.MethodGet, Header: http.Header{}}
	words, err := shellWords(cmd)
	if err != nil {
		return ex, err
	}
	if len(words) > 5 && words[0] == "for" && words[2] == "in" && words[3] == "$(seq" && words[len(words)-1] == "done" {
		n, err := strconv.Atoi(strings.TrimSuffix(words[4], ");"))
		if err != nil || !strings.HasSuffix(words[4], ");") || words[5] != "do" || n < 1 {
			return ex, fmt.Errorf("%q: want for i in $(seq N); do curl ...; done", cmd)
		}
		words = words[6 : len(words)-1]
		last := len(words) - 1
		if last < 0 || !strings.HasSuffix(words[last], ";") {
			return ex, fmt.Errorf("%q: the loop's curl must end with ;", cmd)
		}
		words[last] = strings.TrimSuffix(words[last], ";")
		ex.Times = n
	}
	if len(words) == 0 || words[0] != "curl" {
		return ex, fmt.Errorf("%q: only curl is understood", cmd)
	}
	quiet := ex.Times > 1
	for k := 1; k < len(words); k++ {
		switch w := words[k]; {
		case w == "-i" && !quiet:
		case w == "-s" && quiet:
		case w == "-o" && quiet && k+1 < len(words) && words[k+1] == "/dev/null":
			k++
		case (w == "-X" || w == "-H" || w == "-d") && k+1 < len(words):
			k++
			switch w {
			case "-X":
				ex.Method = words[k]
			case "-H":
				name, value, ok := strings.Cut(words[k], ": ")
				if !ok {
					return ex, fmt.Errorf("%q: header %q", cmd, words[k])
				}
				ex.Header.Add(name, value)
			case "-d":
				ex.Form = words[k]
				if ex.Method == http.MethodGet {
					ex.Method = http.MethodPost
				}
			}
		case k == len(words)-1 && strings.HasPrefix(w, "http://"):
			ex.URL = w
		default:
			return ex, fmt.Errorf("%q: %q is not understood here", cmd, w)
		}
	}
	if ex.URL == "" {
		return ex, fmt.Errorf("%q: no URL at the end", cmd)
	}
	return ex, nil
}

// shellWords splits cmd at spaces, keeping single-quoted text whole.
func shellWords(cmd string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, r := range cmd {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("%q: unbalanced quote", cmd)
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// Request is the http.Request that ex sends.
func (ex Exchange) Request(t testing.TB) *http.Request {
	t.Helper()
	u, err := url.Parse(ex.URL)
	require.NoError(t, err, ex.Command)
	var req *http.Request
	if ex.Form != "" {
		req = httptest.NewRequest(ex.Method, u.RequestURI(), strings.NewReader(ex.Form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(ex.Method, u.RequestURI(), nil)
	}
	for name, values := range ex.Header {
		req.Header[name] = values
	}
	return req
}

// rateFields are the response headers a transcript may not leave out.
var rateFields = []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After", "Ratelimit-Policy", "Ratelimit"}

// secondsFields count down with the clock: a replay a second slower than
// the shown run may show one less.
var secondsFields = map[string]bool{"X-Ratelimit-Reset": true, "Retry-After": true}

// Replay sends each exchange of exchanges, in order, through send (an
// app's Test method, say), and fails the test where a response differs
// from what the transcript shows: its status line, a header shown (its
// name as written on the wire, so in canonical form, and its value; a
// value in whole seconds may be one less than shown), a rate-limit header
// not shown, or the body.
func Replay(t testing.TB, send func(*http.Request) (*http.Response, error), exchanges []Exchange) {
	t.Helper()
	for _, ex := range exchanges {
		for range ex.Times {
			resp, err := send(ex.Request(t))
			require.NoError(t, err, ex.Command)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err, ex.Command)
			require.NoError(t, resp.Body.Close())
			if ex.Status == "" {
				continue
			}
			require.Equal(t, ex.Status, resp.Proto+" "+resp.Status, ex.Command)
			shown := map[string]bool{}
			for _, f := range ex.Fields {
				name, want := f[0], f[1]
				require.Equal(t, http.CanonicalHeaderKey(name), name, "%s: a server sends the header as %s", ex.Command, http.CanonicalHeaderKey(name))
				got := resp.Header.Get(name)
				shown[name] = true
				if secondsFields[name] {
					w, errW := strconv.Atoi(want)
					g, errG := strconv.Atoi(got)
					require.NoError(t, errW, "%s: %s: %s", ex.Command, name, want)
					require.NoError(t, errG, "%s: %s: %q", ex.Command, name, got)
					require.True(t, g == w || g == w-1, "%s: %s is %d, shown %d", ex.Command, name, g, w)
					continue
				}
				require.Equal(t, want, got, "%s: %s", ex.Command, name)
			}
			for _, name := range rateFields {
				if v := resp.Header.Get(name); v != "" {
					require.True(t, shown[name], "%s: the response has %s: %s, which the transcript does not show", ex.Command, name, v)
				}
			}
			if ex.Body != "..." {
				require.Equal(t, ex.Body, strings.TrimSuffix(string(body), "\n"), "%s: body", ex.Command)
			}
		}
	}
}

// ShowsFile fails the test unless doc shows the file at path (from the
// working directory) whole, in the block marked "file: <name>".
func ShowsFile(t testing.TB, doc, name, path string) {
	t.Helper()
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(file), Block(t, doc, "file: "+name), "%s shows %s as it is", doc, name)
}

// ReplayTranscript replays the transcript of doc marked "transcript:
// <name>" through send (see Replay).
func ReplayTranscript(t testing.TB, doc, name string, send func(*http.Request) (*http.Response, error)) {
	t.Helper()
	exchanges, err := Transcript(Block(t, doc, "transcript: "+name))
	require.NoError(t, err)
	require.NotEmpty(t, exchanges)
	Replay(t, send, exchanges)
}
