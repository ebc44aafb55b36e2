package homefeed

// The feed rules: which entries a home feed shows. They are pure
// functions over what a reader already knows about an entry and the
// viewer's relations to the accounts it names; the read side applies them
// to every page (the inbox holds candidates, not answers). The
// convergence oracle (package verify) computes the same rules
// independently from PostgreSQL.
//
// The fan-out does not apply them: a reply or a repost is pushed to every
// active follower of its author like a post. A filter at push time would
// decide on relations that may change later (a follower who follows the
// original's author at the push and unfollows them after must then see
// the repost; one who follows a parent's author only later must then see
// the reply), and no backfill would bring such an entry back. The cost is
// inbox room and read-time hydration for entries a reader may never see.
//
// An original post appears at most once in a feed: as itself when the
// viewer follows its author (or is its author), otherwise as the earliest
// live repost of it by an account the viewer follows. A reply appears only
// when the viewer wrote its parent, follows the parent's author, or the
// reply is its author's reply to themself (Mastodon's home rule); the
// viewer's own replies always appear (Mastodon never filters the reader's
// own posts from their home). Mutes and blocks apply to reposters,
// reposted authors, quoted authors and parents' authors alike.

// Entry is what the rules need to know about one candidate entry of a
// home feed: a post, or a repost (RepostOf set) and its original.
type Entry struct {
	ID      int64
	Author  int64 // the post's author, or the reposter
	Deleted bool  // a deleted post, or an undone repost
	// ReplyToAuthor is the author of the post this one replies to, 0 when
	// it is no reply. For a repost: of the original.
	ReplyToAuthor int64
	// RepostOf is the original a repost points at, 0 for a post;
	// RepostOfAuthor its author and OriginalDeleted whether it is deleted.
	RepostOf        int64
	RepostOfAuthor  int64
	OriginalDeleted bool
}

// Relation is the viewer's relation to one account.
type Relation struct {
	Follows bool // in following:{viewer}: followed and not muted
	Muted   bool // the viewer mutes the account
	Blocked bool // a block either way between the viewer and the account
}

// Hidden reports whether r keeps an account's posts, reposts, quotes and
// replies out of the viewer's sight.
func (r Relation) Hidden() bool { return r.Muted || r.Blocked }

// Verdict is what the rules say about an entry before the one question
// that needs the original's reposts (Earliest).
type Verdict uint8

const (
	// Hide: the entry is not shown.
	Hide Verdict = iota
	// Show: the entry is shown.
	Show
	// ShowIfEarliest: a repost shown only if no live repost of its
	// original earlier than it is by an account the viewer follows.
	ShowIfEarliest
)

// Judge applies the feed rules to e for viewer, rel answering the viewer's
// relation to any account e names (its author or reposter, the original's
// author, the parent's author). The viewer's relation to themself is
// never asked.
func Judge(viewer int64, e Entry, rel func(account int64) Relation) Verdict {
	if e.Deleted {
		return Hide
	}
	if e.Author != viewer && !rel(e.Author).Follows {
		return Hide
	}
	if e.RepostOf == 0 {
		if e.Author != viewer && !ReplyShown(viewer, e.Author, e.ReplyToAuthor, rel) {
			return Hide
		}
		return Show
	}
	if e.OriginalDeleted || e.RepostOfAuthor == viewer {
		return Hide
	}
	if r := rel(e.RepostOfAuthor); r.Follows || r.Hidden() {
		return Hide // followed: the original shows as itself
	}
	if p := e.ReplyToAuthor; p != 0 && p != viewer && p != e.RepostOfAuthor && rel(p).Hidden() {
		return Hide
	}
	return ShowIfEarliest
}

// ReplyShown is the home rule for a post by author replying to a post by
// parentAuthor (0: no reply): shown when the viewer wrote the parent,
// follows its author, or author replies to themself, and the viewer
// neither mutes the parent's author nor is in a block with them.
func ReplyShown(viewer, author, parentAuthor int64, rel func(int64) Relation) bool {
	if parentAuthor == 0 || parentAuthor == viewer {
		return true
	}
	r := rel(parentAuthor)
	if r.Hidden() {
		return false
	}
	return parentAuthor == author || r.Follows
}

// Repost is one live repost of an original, as the reposts read model
// lists them (earliest first).
type Repost struct {
	ID       int64
	Reposter int64
}

// Earliest reports whether the repost with id is the earliest live repost
// of its original by the viewer or an account they follow (the viewer's
// own entries are in their feed as a followed account's are), given earlier: live
// reposts of that original with smaller ids (any order, any length; the
// caller pages through them all), and follows answering for the viewer.
func Earliest(viewer, id int64, earlier []Repost, follows func(account int64) bool) bool {
	for _, r := range earlier {
		if r.ID < id && (r.Reposter == viewer || follows(r.Reposter)) {
			return false
		}
	}
	return true
}

// QuoteAvailable reports whether a quoted post can be shown inside an
// item: it exists, is not deleted, and its author is neither muted by the
// viewer nor in a block with them. An unavailable quote is shown as
// `{"id","unavailable":true}`; the quoting item itself still shows.
func QuoteAvailable(viewer int64, exists, deleted bool, author int64, rel func(int64) Relation) bool {
	if !exists || deleted {
		return false
	}
	return author == viewer || !rel(author).Hidden()
}
