package readmecheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every relative link of README.md and docs/ reaches a file, and a
// heading where it names one.
func TestDocLinksResolve(t *testing.T) {
	root := Root(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	files := append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "bench", "README.md")}, docs...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range files {
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), path)
			}
			rel, _ := filepath.Rel(root, file)
			if _, err := os.Stat(resolved); !assert.NoError(t, err, "%s: link %s", rel, target) {
				continue
			}
			if anchor != "" {
				assert.Contains(t, headingAnchors(t, resolved), anchor, "%s: link %s", rel, target)
			}
		}
	}
}

// headingAnchors are the anchors GitHub gives the headings of a Markdown
// file: lower case, spaces as '-', punctuation but '-' and '_' dropped.
func headingAnchors(t *testing.T, file string) []string {
	t.Helper()
	text, err := os.ReadFile(file)
	require.NoError(t, err)
	var anchors []string
	fenced := false
	drop := regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		anchors = append(anchors, strings.ReplaceAll(drop.ReplaceAllString(heading, ""), " ", "-"))
	}
	return anchors
}
