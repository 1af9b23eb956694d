package readmecheck

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTranscript(t *testing.T) {
	block := "$ for i in $(seq 3); do curl -s -o /dev/null -d 'user=a b' http://127.0.0.1:3000/login; done\n" +
		"$ curl -i -H 'X-API-Key: k1' http://127.0.0.1:3000/api?x=1\n" +
		"HTTP/1.1 429 Too Many Requests\n" +
		"X-Ratelimit-Limit: 5\n" +
		"Retry-After: 3\n" +
		"\n" +
		"Too Many Requests\n" +
		"$ curl -i http://127.0.0.1:3000/\n" +
		"HTTP/1.1 200 OK\n" +
		"\n" +
		"...\n"
	got, err := Transcript(block)
	require.NoError(t, err)
	require.Len(t, got, 3)

	assert.Equal(t, 3, got[0].Times)
	assert.Equal(t, http.MethodPost, got[0].Method)
	assert.Equal(t, "user=a b", got[0].Form)
	assert.Empty(t, got[0].Status)

	assert.Equal(t, 1, got[1].Times)
	assert.Equal(t, "k1", got[1].Header.Get("X-API-Key"))
	assert.Equal(t, "HTTP/1.1 429 Too Many Requests", got[1].Status)
	assert.Equal(t, [][2]string{{"X-Ratelimit-Limit", "5"}, {"Retry-After", "3"}}, got[1].Fields)
	assert.Equal(t, "Too Many Requests", got[1].Body)
	assert.Equal(t, "/api?x=1", got[1].Request(t).URL.RequestURI())

	assert.Equal(t, "...", got[2].Body)
}

func TestTranscriptRefuses(t *testing.T) {
	for name, block := range map[string]string{
		"output before a command": "HTTP/1.1 200 OK\n",
		"another program":         "$ wget http://127.0.0.1:3000/\n",
		"an unknown curl option":  "$ curl -v http://127.0.0.1:3000/\n",
		"no URL":                  "$ curl -i\n",
		"a loop that prints":      "$ for i in $(seq 2); do curl -s -o /dev/null http://127.0.0.1:3000/; done\nHTTP/1.1 200 OK\n",
		"a header without colon":  "$ curl -i http://127.0.0.1:3000/\nHTTP/1.1 200 OK\nX-Ratelimit-Limit 5\n",
		"an unbalanced quote":     "$ curl -i -H 'X: y http://127.0.0.1:3000/\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Transcript(block)
			assert.Error(t, err)
		})
	}
}
