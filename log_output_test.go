package limiter

import (
	"bytes"
	"log"
	"sync"
	"testing"
)

// logOutput is what the standard logger wrote during a test.
type logOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *logOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *logOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// captureLogOutput sends the standard logger's output to the returned
// logOutput until the test ends. Not for parallel tests.
func captureLogOutput(t *testing.T) *logOutput {
	o := &logOutput{}
	prev := log.Writer()
	log.SetOutput(o)
	t.Cleanup(func() { log.SetOutput(prev) })
	return o
}
