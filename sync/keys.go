package sync

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardlimit/shardlimit"
)

// DefaultPrefix is the prefix of every Redis key the package writes when
// none is configured.
const DefaultPrefix = "shardlimit:"

// MaxPrefixBytes is the longest accepted key prefix.
const MaxPrefixBytes = 256

// checkPrefix validates a key prefix: at most MaxPrefixBytes bytes and no
// brace, which would move the hash tag into the prefix.
func checkPrefix(p string) error {
	if len(p) > MaxPrefixBytes {
		return fmt.Errorf("%w: prefix of %d bytes is longer than %d", shardlimit.ErrInvalidConfig, len(p), MaxPrefixBytes)
	}
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: prefix %q contains a brace", shardlimit.ErrInvalidConfig, p)
	}
	return nil
}

// tagged returns <prefix>{<key>} or, for a key with a brace, the
// hex-encoded form <prefix>#{<hex>}. Both forms put the limiter key, and
// nothing else, inside the hash tag, and they cannot collide: the byte after
// the prefix is '{' in one and '#' in the other.
func tagged(prefix, key string) string {
	var b strings.Builder
	b.Grow(taggedLen(prefix, key) + 24)
	writeTagged(&b, prefix, key)
	return b.String()
}

// taggedLen returns the length of tagged(prefix, key).
func taggedLen(prefix, key string) int {
	if strings.ContainsAny(key, "{}") {
		return len(prefix) + 3 + 2*len(key)
	}
	return len(prefix) + 2 + len(key)
}

// writeTagged writes tagged(prefix, key) to b.
func writeTagged(b *strings.Builder, prefix, key string) {
	const hexDigits = "0123456789abcdef"
	b.WriteString(prefix)
	if strings.ContainsAny(key, "{}") {
		b.WriteString("#{")
		for i := 0; i < len(key); i++ {
			b.WriteByte(hexDigits[key[i]>>4])
			b.WriteByte(hexDigits[key[i]&15])
		}
	} else {
		b.WriteByte('{')
		b.WriteString(key)
	}
	b.WriteByte('}')
}

// counterKey returns the Redis key of the counter of window or bucket id:
// <prefix>{<key>}:sh:<id>, or for the rate of window w > 0 of a limiter of
// several rates <prefix>{<key>}:sh:<w in microseconds>:<id>. The "sh"
// segment names the hash form of the counter (each node's share and their
// sum): releases that kept a counter as a string named it without it, so
// an old node and a new one never read each other's keys.
func counterKey(tag string, w time.Duration, id int64) string {
	if w == 0 {
		return tag + ":sh:" + strconv.FormatInt(id, 10)
	}
	return tag + ":sh:" + strconv.FormatInt(int64(w/time.Microsecond), 10) + ":" + strconv.FormatInt(id, 10)
}
