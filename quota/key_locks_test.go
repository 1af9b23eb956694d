package quota

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key's lock is held by one caller at a time; another key's is not
// held up by it; a waiter gives up when its done channel closes; and the
// locks of keys with nothing under way are forgotten.
func TestKeyLocks(t *testing.T) {
	var k keyLocks
	require.True(t, k.lock("a", nil))
	require.True(t, k.lock("b", nil), "another key's lock waited")

	done := make(chan struct{})
	close(done)
	assert.False(t, k.lock("a", done), "took a held lock")

	var inside, most int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			assert.True(t, k.lock("a", nil))
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
			k.unlock("a")
		})
	}
	k.unlock("a") // lets the eight in, one at a time
	k.unlock("b")
	wg.Wait()
	assert.Equal(t, 1, most, "two holders of one key's lock")
	assert.Empty(t, k.held)
}
