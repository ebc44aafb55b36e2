package homefeed

import "testing"

// rels is a viewer's relations by account for the rules' tests.
type rels map[int64]Relation

func (r rels) of(a int64) Relation { return r[a] }

func TestJudgePosts(t *testing.T) {
	const v, a, b, c = 1, 2, 3, 4
	r := rels{a: {Follows: true}, b: {Follows: true}}
	cases := []struct {
		name string
		e    Entry
		want Verdict
	}{
		{"own post", Entry{ID: 10, Author: v}, Show},
		{"followee's post", Entry{ID: 10, Author: a}, Show},
		{"stranger's post", Entry{ID: 10, Author: c}, Hide},
		{"deleted", Entry{ID: 10, Author: a, Deleted: true}, Hide},
		{"reply to the viewer", Entry{ID: 10, Author: a, ReplyToAuthor: v}, Show},
		{"reply to a followee", Entry{ID: 10, Author: a, ReplyToAuthor: b}, Show},
		{"reply to someone the viewer does not follow", Entry{ID: 10, Author: a, ReplyToAuthor: c}, Hide},
		{"self-reply", Entry{ID: 10, Author: a, ReplyToAuthor: a}, Show},
		{"the viewer's own reply to a stranger", Entry{ID: 10, Author: v, ReplyToAuthor: c}, Show},
	}
	for _, tc := range cases {
		if got := Judge(v, tc.e, r.of); got != tc.want {
			t.Errorf("%s: Judge = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestJudgeReposts(t *testing.T) {
	const v, q, a, c, m, x = 1, 2, 3, 4, 5, 6
	r := rels{q: {Follows: true}, a: {Follows: true}, m: {Muted: true}, x: {Blocked: true}}
	cases := []struct {
		name string
		e    Entry
		want Verdict
	}{
		{"repost of a stranger's post", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: c}, ShowIfEarliest},
		{"repost of a followee's post: the original shows itself", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: a}, Hide},
		{"repost of the viewer's own post", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: v}, Hide},
		{"undone repost", Entry{ID: 20, Author: q, Deleted: true, RepostOf: 10, RepostOfAuthor: c}, Hide},
		{"repost of a deleted original", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: c, OriginalDeleted: true}, Hide},
		{"repost of a muted author", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: m}, Hide},
		{"repost of a blocked author", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: x}, Hide},
		{"repost by a stranger", Entry{ID: 20, Author: c, RepostOf: 10, RepostOfAuthor: c}, Hide},
		{"repost of a reply to a blocked author", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: c, ReplyToAuthor: x}, Hide},
		{"repost of a reply to a stranger", Entry{ID: 20, Author: q, RepostOf: 10, RepostOfAuthor: c, ReplyToAuthor: 99}, ShowIfEarliest},
	}
	for _, tc := range cases {
		if got := Judge(v, tc.e, r.of); got != tc.want {
			t.Errorf("%s: Judge = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestEarliest(t *testing.T) {
	const v, q1, q2, s = 1, 2, 3, 4
	follows := func(a int64) bool { return a == q1 || a == q2 }
	earlier := []Repost{{ID: 5, Reposter: s}, {ID: 7, Reposter: q2}}
	if Earliest(v, 9, earlier, follows) {
		t.Error("a followee's earlier repost: the later one must not show")
	}
	if !Earliest(v, 7, earlier[:1], follows) {
		t.Error("only a stranger reposted earlier: the repost shows")
	}
	if Earliest(v, 9, []Repost{{ID: 8, Reposter: v}}, follows) {
		t.Error("the viewer's own earlier repost is in their feed: the later one must not show")
	}
	if !Earliest(v, 9, []Repost{{ID: 12, Reposter: q1}}, follows) {
		t.Error("a later repost does not hide an earlier one")
	}
}

func TestQuoteAvailable(t *testing.T) {
	r := rels{4: {Muted: true}}
	if QuoteAvailable(1, true, false, 4, r.of) || QuoteAvailable(1, true, true, 5, r.of) || QuoteAvailable(1, false, false, 5, r.of) || !QuoteAvailable(1, true, false, 5, r.of) {
		t.Error("QuoteAvailable disagrees with the rule")
	}
}
