// Package seed generates a deterministic social graph (users, a heavy-tailed
// follower distribution, posts spread over past days) and writes it into
// the event log as the commands would have: every change is an event with
// the payload, stream and version the write side gives it, and the inline
// tables (users with their counts, follows, posts) agree with the events at
// every commit. The write is batched (COPY, big transactions) for speed.
package seed

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/feedco/feed/internal/snowflake"
)

// Params describes the dataset. The same Params give the same dataset: same
// users, edges in the same order, same posts with the same ids and times.
type Params struct {
	// Users is how many accounts to create. Default 50,000.
	Users int
	// Seed selects the dataset. Default 1.
	Seed uint64
	// AvgFollows is the mean follower (and following) count. Default 300.
	AvgFollows float64
	// Posts is how many posts to create. Default 10 per user.
	Posts int
	// Celebrities is how many accounts get far more followers than
	// Threshold (2x to 5x, capped at Users-1). Default 10.
	Celebrities int
	// Threshold is the celebrity threshold the dataset is built around
	// (FEED_CELEBRITY_THRESHOLD). Default 10,000.
	Threshold int64
	// Days is how far back the posts' created_at go. Default 7.
	Days float64
	// End is the newest a post can be (posts lie in [End-Days, End)). It
	// is part of the dataset: the ids encode these times. Zero means
	// "not set" and is refused by Validate; the CLI passes now, rounded.
	End time.Time
	// IDOffset is added to every user id (0 for an empty database: ids
	// 1..Users). A forced seed into a non-empty database uses max(id).
	IDOffset int64
	// Node is the Snowflake node id the post ids carry; pick one no live
	// writer uses. Default 1023.
	Node int64
	// ZipfS is the exponent of the non-celebrity follower distribution
	// (followers of rank r proportional to (r+10)^-s). Default 0.9.
	ZipfS float64
}

// WithDefaults fills the zero fields.
func (p Params) WithDefaults() Params {
	p.Users = cmp.Or(p.Users, 50_000)
	p.Seed = cmp.Or(p.Seed, 1)
	p.AvgFollows = cmp.Or(p.AvgFollows, 300)
	p.Posts = cmp.Or(p.Posts, 10*p.Users)
	p.Celebrities = cmp.Or(p.Celebrities, 10)
	p.Threshold = cmp.Or(p.Threshold, 10_000)
	p.Days = cmp.Or(p.Days, 7)
	p.Node = cmp.Or(p.Node, 1023)
	p.ZipfS = cmp.Or(p.ZipfS, 0.9)
	return p
}

// Validate reports the first parameter that cannot work.
func (p Params) Validate() error {
	switch {
	case p.Users < 2:
		return fmt.Errorf("users %d: want at least 2", p.Users)
	case p.Users > 10_000_000:
		return fmt.Errorf("users %d: want at most 10,000,000", p.Users)
	case p.AvgFollows < 0 || p.AvgFollows > float64(p.Users-1)/2:
		return fmt.Errorf("avg follows %g: want 0..%d (half the other users)", p.AvgFollows, (p.Users-1)/2)
	case p.Posts < 0:
		return fmt.Errorf("posts %d: want at least 0", p.Posts)
	case p.Celebrities < 0 || p.Celebrities > p.Users:
		return fmt.Errorf("celebrities %d: want 0..users", p.Celebrities)
	case p.Threshold < 1:
		return fmt.Errorf("threshold %d: want at least 1", p.Threshold)
	case p.Days <= 0:
		return fmt.Errorf("days %g: want positive", p.Days)
	case p.End.IsZero():
		return errors.New("end time: not set")
	case p.End.Add(-time.Duration(p.Days * float64(24*time.Hour))).Before(snowflake.Epoch):
		return fmt.Errorf("posts would start before the Snowflake epoch %s", snowflake.Epoch)
	case p.IDOffset < 0:
		return fmt.Errorf("id offset %d: want at least 0", p.IDOffset)
	case p.Node < 0 || p.Node > 1023:
		return fmt.Errorf("node %d: want 0..1023", p.Node)
	case p.ZipfS <= 0:
		return fmt.Errorf("zipf exponent %g: want positive", p.ZipfS)
	}
	return nil
}

// Post is one generated post.
type Post struct {
	ID        int64
	AuthorID  int64
	CreatedAt time.Time
	Content   string
}

// Dataset is a generated graph, ready to write. Users are IDOffset+1 ..
// IDOffset+Users, in order.
type Dataset struct {
	Params Params
	// InDegree[i] is the final follower count of user IDOffset+1+i.
	InDegree []int32
	// OutDegree[i] is the final following count of user IDOffset+1+i.
	OutDegree []int32
	// Edges are the follows in the order they are written (a shuffle, so
	// one followee's follows are spread through the log), packed as
	// follower index << 32 | followee index (indexes 0..Users-1).
	Edges []uint64
	// Posts are in created_at order (ids increase with it).
	Posts []Post
}

// UserID returns the id of the user at index i.
func (d *Dataset) UserID(i int) int64 { return d.Params.IDOffset + 1 + int64(i) }

// Edge returns the follower and followee ids of edge k.
func (d *Dataset) Edge(k int) (follower, followee int64) {
	e := d.Edges[k]
	return d.UserID(int(e >> 32)), d.UserID(int(uint32(e)))
}

// UserName is the generated name of the user at index i.
func UserName(i int) string { return "user" + strconv.Itoa(i+1) }

// Generate builds the dataset for p (defaults filled, then validated).
func Generate(p Params) (*Dataset, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("seed params: %w", err)
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))
	n := p.Users
	d := &Dataset{Params: p, InDegree: make([]int32, n), OutDegree: make([]int32, n)}

	// Popularity: a random permutation of users gets the in-degrees by rank.
	rank := rng.Perm(n)
	degrees := inDegrees(p)
	for i, r := range rank {
		d.InDegree[i] = int32(degrees[r])
	}

	// Edges: each followee's followers are a uniform sample of the other
	// users (Floyd's algorithm), so following counts are about AvgFollows
	// each while follower counts are heavy-tailed.
	var total int
	for _, k := range d.InDegree {
		total += int(k)
	}
	d.Edges = make([]uint64, 0, total)
	chosen := make([]bool, n)
	picked := make([]int, 0, 1024)
	for followee := range n {
		k := int(d.InDegree[followee])
		picked = picked[:0]
		m := n - 1 // candidates: everyone but the followee
		for j := m - k; j < m; j++ {
			t := rng.IntN(j + 1)
			if chosen[t] {
				t = j
			}
			chosen[t] = true
			picked = append(picked, t)
		}
		for _, t := range picked {
			chosen[t] = false
			follower := t
			if follower >= followee {
				follower++
			}
			d.OutDegree[follower]++
			d.Edges = append(d.Edges, uint64(follower)<<32|uint64(followee))
		}
	}
	rng.Shuffle(len(d.Edges), func(i, j int) { d.Edges[i], d.Edges[j] = d.Edges[j], d.Edges[i] })

	d.Posts = genPosts(p, rng)
	return d, nil
}

// inDegrees returns the follower counts by popularity rank: the first
// Celebrities ranks get 2x..5x Threshold (capped at Users-1), the rest
// c*(r+10)^-s capped below Threshold, with c solved so that the mean is
// AvgFollows.
func inDegrees(p Params) []int {
	n := p.Users
	out := make([]int, n)
	maxDeg := n - 1
	var celebSum int
	for r := range p.Celebrities {
		f := 2.0
		if p.Celebrities > 1 {
			f = 5.0 - 3.0*float64(r)/float64(p.Celebrities-1)
		}
		out[r] = min(maxDeg, int(f*float64(p.Threshold)))
		celebSum += out[r]
	}
	want := p.AvgFollows*float64(n) - float64(celebSum)
	capDeg := min(maxDeg, int(p.Threshold-1))
	sum := func(c float64) float64 {
		var s float64
		for r := p.Celebrities; r < n; r++ {
			s += math.Min(float64(capDeg), math.Floor(c*math.Pow(float64(r-p.Celebrities+10), -p.ZipfS)))
		}
		return s
	}
	if want > 0 {
		lo, hi := 0.0, float64(capDeg)*math.Pow(float64(n+10), p.ZipfS)
		for range 60 {
			mid := (lo + hi) / 2
			if sum(mid) < want {
				lo = mid
			} else {
				hi = mid
			}
		}
		for r := p.Celebrities; r < n; r++ {
			out[r] = min(capDeg, int(math.Floor(hi*math.Pow(float64(r-p.Celebrities+10), -p.ZipfS))))
		}
	}
	return out
}

// vocabulary fills post contents so that they look like text of varied
// length (about 40-140 characters).
var vocabulary = []string{"feed", "news", "today", "great", "coffee", "launch", "team", "weekend",
	"read", "this", "thread", "about", "kafka", "postgres", "redis", "latency", "ship", "it",
	"hello", "world", "morning", "release", "bug", "fixed", "why", "how", "we", "built", "our"}

// genPosts spreads p.Posts posts uniformly over [End-Days, End) with
// uniformly chosen authors. Ids are Snowflake ids whose millisecond is the
// created_at, with node p.Node and a per-millisecond sequence, so they are
// unique and ordered like the times.
func genPosts(p Params, rng *rand.Rand) []Post {
	span := int64(p.Days * float64(24*time.Hour/time.Millisecond))
	endMs := p.End.Sub(snowflake.Epoch).Milliseconds()
	ms := make([]int64, p.Posts)
	for i := range ms {
		ms[i] = endMs - 1 - rng.Int64N(span)
	}
	slices.Sort(ms)
	posts := make([]Post, p.Posts)
	var lastMs, seq int64 = -1, 0
	for i, m := range ms {
		if m <= lastMs {
			m = lastMs
			seq++
			if seq > 4095 {
				m, seq = m+1, 0
			}
		} else {
			seq = 0
		}
		lastMs = m
		id := m<<22 | p.Node<<12 | seq
		author := rng.IntN(p.Users)
		words := 4 + rng.IntN(16)
		b := make([]byte, 0, 160)
		b = append(b, "post "...)
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, ':')
		for range words {
			b = append(b, ' ')
			b = append(b, vocabulary[rng.IntN(len(vocabulary))]...)
		}
		posts[i] = Post{ID: id, AuthorID: p.IDOffset + 1 + int64(author), CreatedAt: snowflake.Time(id), Content: string(b)}
	}
	return posts
}

// Digest is a SHA-256 over everything the dataset writes (users, edges in
// order, posts), hex encoded: equal digests mean equal datasets.
func (d *Dataset) Digest() string {
	h := sha256.New()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	put(uint64(len(d.InDegree)))
	for i := range d.InDegree {
		h.Write([]byte(UserName(i)))
		put(uint64(d.InDegree[i]))
	}
	for _, e := range d.Edges {
		put(e)
	}
	for _, p := range d.Posts {
		put(uint64(p.ID))
		put(uint64(p.AuthorID))
		put(uint64(p.CreatedAt.UnixMilli()))
		h.Write([]byte(p.Content))
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// Stats summarises the follower distribution, for the seed's output.
type Stats struct {
	Users, Follows, Posts                     int
	MeanFollowers                             float64
	P50, P90, P99, MaxFollowers               int
	OverThreshold                             int
	MeanFollowing, MinFollowing, MaxFollowing int
}

// Stats computes the follower distribution's summary.
func (d *Dataset) Stats() Stats {
	in := make([]int, len(d.InDegree))
	var over int
	for i, k := range d.InDegree {
		in[i] = int(k)
		if int64(k) >= d.Params.Threshold {
			over++
		}
	}
	slices.Sort(in)
	q := func(f float64) int { return in[min(len(in)-1, int(f*float64(len(in))))] }
	minOut, maxOut := math.MaxInt, 0
	for _, k := range d.OutDegree {
		minOut, maxOut = min(minOut, int(k)), max(maxOut, int(k))
	}
	n := len(in)
	return Stats{
		Users: n, Follows: len(d.Edges), Posts: len(d.Posts),
		MeanFollowers: float64(len(d.Edges)) / float64(n),
		P50:           q(0.5), P90: q(0.9), P99: q(0.99), MaxFollowers: in[n-1],
		OverThreshold: over,
		MeanFollowing: len(d.Edges) / n, MinFollowing: minOut, MaxFollowing: maxOut,
	}
}
