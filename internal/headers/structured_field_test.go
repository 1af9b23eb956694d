package headers

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// exhaustedMembers reads the t of spent policies from RateLimit fields as
// other limiters may write them, and passes over what it cannot read.
func TestExhaustedMembers(t *testing.T) {
	for _, tc := range []struct {
		field, self string
		want        int64
	}{
		{`"a";r=0;t=60, "b";r=0;t=10`, `"b"`, 60},
		{`"a";r=0;t=60, "b";r=0;t=10`, `"a"`, 10},
		{`"a";r=0;t=60`, `"a"`, 0},
		{`"a";r=1;t=60`, `"b"`, 0},
		{`"a";t=40;r=0`, `"b"`, 40},
		{`"a,b";r=0;t=30`, `"b"`, 30},
		{`"a\"b";r=0;t=31`, `"b"`, 31},
		{`tok;r=0;t=5`, `"b"`, 5},
		{`"a";r=0;t=7,"c";r=0;t=9`, `"b"`, 9},
		{`"a";r=0;x;t=8`, `"b"`, 8},
		{`"a";r=0;t=60;pk=:YWJj:`, `"b"`, 60},
		{`"a";r=0;t=60, ;;garbage`, `"b"`, 60},
		{`"a";r=0;t=-5`, `"b"`, 0},
		{`"a";r=0;t=1234567890123456`, `"b"`, 0},
		{`"a";r=0`, `"b"`, 0},
		{`"unterminated;r=0;t=5`, `"b"`, 0},
		{`"a";R=0;t=5`, `"b"`, 0},
		{``, `"b"`, 0},
	} {
		assert.Equal(t, tc.want, exhaustedMembers([]byte(tc.field), [][]byte{[]byte(tc.self)}), "%s (self %s)", tc.field, tc.self)
	}
}

// FuzzExhaustedMembers: any bytes in a RateLimit field set by a handler in
// front neither panic nor give a negative wait.
func FuzzExhaustedMembers(f *testing.F) {
	for _, s := range []string{`"a";r=0;t=60, "b";r=0;t=10`, `"a\`, `"a";r=0;t=`, `,,;=`, `"x";r=0;t=999999999999999`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, field []byte) {
		if w := exhaustedMembers(field, [][]byte{[]byte(`"self"`)}); w < 0 {
			t.Fatalf("wait %d for %q", w, field)
		}
	})
}
