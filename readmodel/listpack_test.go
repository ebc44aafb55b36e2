package readmodel

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/feedco/feed/testkit/testenv"
)

// Redis's own test vector for its crc64 (src/crc64.c).
func TestRedisCRC64(t *testing.T) {
	if got := redisCRC64(0, []byte("123456789")); got != 0xe9c6d914c4b8d9ca {
		t.Fatalf("crc64(123456789) = %#x, want 0xe9c6d914c4b8d9ca", got)
	}
	long := []byte("This is a test of the emergency broadcast system.")
	// The same bytes fed in two parts give the same checksum (the sliced
	// loop and the byte loop agree).
	if a, b := redisCRC64(0, long), redisCRC64(redisCRC64(0, long[:13]), long[13:]); a != b {
		t.Fatalf("split checksum %#x != %#x", b, a)
	}
}

// A payload RESTOREs into exactly the set that ZADD makes of the same
// members: the server's DUMP of both keys is the same byte string (DUMP
// serializes the listpack Redis holds, so equal DUMPs are equal sets in
// equal encodings), and so are ZRANGE WITHSCORES and OBJECT ENCODING. The
// members cover every integer width of the listpack (both signs), the
// sentinels, ties broken by the member's bytes ("10" before "9"), -inf/+inf
// and the inbox's real shapes (19-digit ids, millisecond scores).
func TestListpackPayloadMatchesZADD(t *testing.T) {
	t.Parallel()
	rd := testenv.NewRedis(t)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))

	widths := []int64{0, 1, 127, 128, -1, -4096, 4095, 4096, -4097, 32767, -32768, 32768, -32769,
		1<<23 - 1, -(1 << 23), 1 << 23, -(1<<23 + 1), math.MaxInt32, math.MinInt32, math.MaxInt32 + 1,
		math.MinInt32 - 1, math.MaxInt64, math.MinInt64, 7400828001009348608}
	cases := map[string][]lpEntry{
		"one": {{score: 5, id: 9}},
		"sentinels": {{score: 1764498000000, str: SentinelFloor}, {score: 1764498000001, id: 7400828001009348608},
			{score: math.Inf(1), str: SentinelBuilt}},
		"ties by bytes": {{score: 3, id: 9}, {score: 3, id: 10}, {score: 3, id: -5}, {score: 3, id: -40},
			{score: 3, str: "~x"}, {score: 3, id: 100}, {score: 3, id: 0}},
		"negative inf": {{score: math.Inf(-1), id: 1}, {score: -7, id: 2}, {score: 0, id: 3}},
	}
	var w []lpEntry
	for i, v := range widths {
		// Each width as a member and as a score.
		w = append(w, lpEntry{score: float64(i), id: v})
		if f := float64(v); f > -4503599627370495 && f < 4503599627370496 {
			w = append(w, lpEntry{score: f, id: int64(1000 + i)})
		}
	}
	cases["widths"] = w
	// 501: the default inbox (a 2-byte RDB length); 1000: over 16 KB (the
	// 5-byte length form).
	for _, n := range []int{130, 501, 1000} {
		var es []lpEntry
		base := int64(1764498000000)
		for i := range n {
			ms := base + int64(rnd.IntN(n/3)) // many ties
			es = append(es, lpEntry{score: float64(ms), id: ms<<22 | int64(i)})
		}
		es = append(es, lpEntry{score: float64(base - 1), str: SentinelFloor}, lpEntry{score: math.Inf(1), str: SentinelBuilt})
		cases["inbox "+strconv.Itoa(n)] = es
	}

	for name, es := range cases {
		zadd, restore := rd.Prefix+name+":zadd", rd.Prefix+name+":restore"
		zs := make([]redis.Z, len(es))
		for i, e := range es {
			var b [24]byte
			zs[i] = redis.Z{Score: e.score, Member: string(e.member(b[:0]))}
		}
		if err := rd.Client.ZAdd(ctx, zadd, zs...).Err(); err != nil {
			t.Fatalf("%s: zadd: %v", name, err)
		}
		sorted := append([]lpEntry(nil), es...)
		sortListpack(sorted)
		payload, lp, err := appendListpackPayload(nil, nil, sorted)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		if name == "inbox 1000" && len(lp) < 1<<14 {
			t.Fatalf("%s: listpack of %d bytes, want over 16 KB", name, len(lp))
		}
		if err := rd.Client.Restore(ctx, restore, 0, string(payload)).Err(); err != nil {
			t.Fatalf("%s: restore: %v", name, err)
		}
		a, b := rd.Client.Dump(ctx, zadd).Val(), rd.Client.Dump(ctx, restore).Val()
		if a == "" || a != b {
			t.Errorf("%s: DUMP differs:\n zadd    %q\n restore %q", name, a, b)
		}
		ea, eb := rd.Client.ObjectEncoding(ctx, zadd).Val(), rd.Client.ObjectEncoding(ctx, restore).Val()
		za, zb := rd.Client.ZRangeWithScores(ctx, zadd, 0, -1).Val(), rd.Client.ZRangeWithScores(ctx, restore, 0, -1).Val()
		if ea != eb || len(za) != len(es) || len(za) != len(zb) {
			t.Fatalf("%s: encodings %s/%s, sizes %d/%d of %d", name, ea, eb, len(za), len(zb), len(es))
		}
		for i := range za {
			if za[i] != zb[i] {
				t.Errorf("%s: entry %d: zadd %v, restore %v", name, i, za[i], zb[i])
			}
		}
	}
}

// What the encoder does not write is refused, for ZADD to do it: non-integer
// scores, -0, long or integer-looking string members, empty sets.
func TestListpackPayloadRefuses(t *testing.T) {
	for name, es := range map[string][]lpEntry{
		"fraction":    {{score: 1.5, id: 1}},
		"huge":        {{score: 1e300, id: 1}},
		"nan":         {{score: math.NaN(), id: 1}},
		"minus zero":  {{score: math.Copysign(0, -1), id: 1}},
		"long string": {{score: 1, str: string(make([]byte, 64))}},
		"numeric str": {{score: 1, str: "12"}},
		"empty":       nil,
	} {
		if _, _, err := appendListpackPayload(nil, nil, es); !errors.Is(err, errNotEncodable) {
			t.Errorf("%s: got %v, want errNotEncodable", name, err)
		}
	}
}
