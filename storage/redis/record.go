package redis

import (
	"strconv"
	"strings"
	"sync"
)

// An idempotent take keeps its answer in a record, a key of its own that
// must lie in the limited key's hash slot: one script call reads and
// writes both, which Redis Cluster refuses across slots (CROSSSLOT).

// slotTags are, for each Redis Cluster hash slot, a hash tag ("{n}") whose
// keys lie in that slot: made once, when an idempotent take first needs
// one.
var slotTags = sync.OnceValue(func() *[16384]string {
	// About 170,000 numbers are tried: each without an allocation, so
	// that the table takes a few ms, well within a first call's timeout.
	var tags [16384]string
	left := len(tags)
	buf := []byte{'{'}
	for n := 0; left > 0; n++ {
		buf = strconv.AppendInt(buf[:1], int64(n), 10)
		if s := int(crc16(buf[1:])) % 16384; tags[s] == "" {
			tags[s], left = string(append(buf, '}')), left-1
		}
	}
	return &tags
})

// recordKeyOf is the name an idempotent take keeps its answer under:
// record, in key's hash slot. A record that is there already (its prefix
// and key's share a hash tag) is used as it is; one without a '{' gets the
// slot's tag at its end, so that it keeps its prefix (for ACLs and scans
// by prefix); any other gets the tag in front.
func recordKeyOf(key, record string) string {
	slot := hashSlot(key)
	switch {
	case hashSlot(record) == slot:
		return record
	case strings.IndexByte(record, '{') < 0:
		return record + slotTag(slot)
	}
	return slotTag(slot) + record
}

// slotTag is the hash tag of slot.
func slotTag(slot int) string { return slotTags()[slot] }
