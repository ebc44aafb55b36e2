package queries

import (
	"encoding/json"
	"strconv"

	"github.com/feedco/feed/events"
	"github.com/feedco/feed/readmodel"
)

// Post is one item as the HTTP API returns it: a post, or a repost entry.
// Ids are decimal strings (JavaScript numbers lose precision past 2^53).
//
// A post has every field but RepostOf: its author (id and name), content,
// time, its media, the post it replies to, the post it quotes (Quote),
// its counts and the viewer's own state. A repost entry has only ID (the
// repost's own id, which orders it in a feed), AuthorID and Author (the
// reposter), CreatedAt (the repost's time) and RepostOf: the original,
// hydrated as a post.
type Post struct {
	ID        string         `json:"id"`
	AuthorID  string         `json:"authorId"`
	Author    Author         `json:"author"`
	Content   string         `json:"content,omitempty"` // a post's is never empty
	CreatedAt string         `json:"createdAt"`         // RFC 3339, UTC, milliseconds
	EditedAt  string         `json:"editedAt,omitempty"`
	Media     []events.Media `json:"media,omitempty"`
	ReplyTo   *PostRef       `json:"replyTo,omitempty"`
	Quote     *Quote         `json:"quote,omitempty"`
	Counts    *Counts        `json:"counts,omitempty"` // set on every post, never on a repost entry
	Viewer    *ViewerState   `json:"viewer,omitempty"` // likewise
	RepostOf  *Post          `json:"repostOf,omitempty"`

	// enc is the static part of the item's JSON as the query side encoded
	// it once (encodePost), copied into every page that shows the item;
	// AppendJSON uses it only while the fields it was made from are
	// unchanged, and appends the dynamic part (the author's name, quote,
	// counts, viewer state, original) per page.
	enc *postJSON
}

// PostView is the item of one post as GET /api/posts/{id} shows it: the
// feed's item.
type PostView = Post

// Author is an item's author as items carry it.
type Author struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// PostRef names a post and its author (a reply's parent).
type PostRef struct {
	ID       string `json:"id"`
	AuthorID string `json:"authorId"`
}

// Counts are a post's live replies, reposts and likes.
type Counts struct {
	Likes   int64 `json:"likes"`
	Reposts int64 `json:"reposts"`
	Replies int64 `json:"replies"`
}

// ViewerState says whether the viewer likes and reposted the post.
type ViewerState struct {
	Liked    bool `json:"liked"`
	Reposted bool `json:"reposted"`
}

// Quote is the post a post quotes: the quoted item (Post), or, when the
// viewer may not see it (missing or deleted; its author muted by the
// viewer, or a block between them either way), only its id with
// Unavailable. A quote inside a quoted post is its id alone (or
// Unavailable): hydration goes one level deep.
type Quote struct {
	ID          string
	Unavailable bool
	Post        *Post
}

// MarshalJSON writes the quoted item, {"id","unavailable":true}, or {"id"}.
func (q Quote) MarshalJSON() ([]byte, error) {
	if q.Post != nil {
		return json.Marshal(q.Post)
	}
	return q.appendJSON(nil), nil
}

// appendJSON appends the quote as MarshalJSON writes it.
func (q *Quote) appendJSON(dst []byte) []byte {
	if q.Post != nil {
		return q.Post.AppendJSON(dst)
	}
	dst = append(dst, `{"id":`...)
	dst = events.AppendJSONString(dst, q.ID)
	if q.Unavailable {
		dst = append(dst, `,"unavailable":true`...)
	}
	return append(dst, '}')
}

// postJSON is the static part of an item's JSON and the fields it was
// encoded from: json[:nameAt] is everything up to the author's name,
// json[nameAt:] what follows it up to the dynamic fields (for a post, up
// to replyTo; for a repost entry, its time).
type postJSON struct {
	of      [6]string // ID, AuthorID, Author.ID, Content, CreatedAt, EditedAt
	media   int       // len(Media)
	replyTo *PostRef
	json    string
	nameAt  int
}

// postFacts is what the static part of an item is made from.
type postFacts struct {
	id, author    int64
	content       string
	ms            int64  // the creation time
	editedAt      string // RFC 3339, "" when never edited
	media         []events.Media
	replyTo       int64
	replyToAuthor int64
	repost        bool // a repost entry (content, media and replyTo unset)

	// Not in the static JSON: what the rules and the page's hydration
	// need to know of the item.
	quoteOf, quoteAuthor     int64 // the quoted post and its author, 0: none
	repostOf, repostOfAuthor int64 // a repost entry's original and its author
}

// factsOf are the facts of a body of the Redis post cache, shown at ms.
func factsOf(p readmodel.Post, ms int64) postFacts {
	fa := postFacts{id: p.ID, author: p.AuthorID, content: p.Content, ms: ms, editedAt: p.EditedAt,
		replyTo: p.ReplyTo, replyToAuthor: p.ReplyToAuthor, quoteOf: p.QuoteOf, quoteAuthor: p.QuoteAuthor,
		repostOf: p.RepostOf, repostOfAuthor: p.RepostOfAuthor, repost: p.RepostOf != 0}
	for _, m := range p.Media {
		fa.media = append(fa.media, events.Media{URL: m.URL, MIMEType: m.MIMEType, Alt: m.Alt, Width: m.Width, Height: m.Height})
	}
	return fa
}

// itemOf is the item of fa at its own key.
func itemOf(fa postFacts) item {
	return item{key: key{ms: fa.ms, id: fa.id}, post: encodePost(fa)}
}

// encodePost makes the Post of an item with the static part of its JSON
// encoded once: a cached post is shown by many pages, each of which then
// copies bytes instead of escaping its content again. The strings are
// slices of the JSON wherever it holds them verbatim (always the ids and
// the time; the content unless it needed escaping), so the encoding costs
// little memory beyond the fields themselves.
func encodePost(fa postFacts) Post {
	b := make([]byte, 0, len(fa.content)+len(`{"id":"","authorId":"","author":{"id":"","name":},"content":"","createdAt":""}`)+3*19+24+8)
	b = append(b, `{"id":"`...)
	idAt := len(b)
	b = strconv.AppendInt(b, fa.id, 10)
	idEnd := len(b)
	b = append(b, `","authorId":"`...)
	auAt := len(b)
	b = strconv.AppendInt(b, fa.author, 10)
	auEnd := len(b)
	b = append(b, `","author":{"id":"`...)
	b = strconv.AppendInt(b, fa.author, 10)
	b = append(b, `","name":`...)
	nameAt := len(b)
	b = append(b, '}')
	cAt, cEnd := 0, 0
	if !fa.repost && fa.content != "" { // omitempty: a repost entry has none
		b = append(b, `,"content":`...)
		cAt = len(b)
		b = events.AppendJSONString(b, fa.content)
		cEnd = len(b)
	}
	b = append(b, `,"createdAt":`...)
	at := formatTime(fa.ms)
	tAt := len(b)
	b = events.AppendJSONString(b, at)
	tEnd := len(b)
	p := Post{}
	if !fa.repost {
		if fa.editedAt != "" {
			b = append(b, `,"editedAt":`...)
			b = events.AppendJSONString(b, fa.editedAt)
			p.EditedAt = fa.editedAt
		}
		if len(fa.media) > 0 {
			p.Media = fa.media
			b = appendMedia(append(b, `,"media":`...), fa.media)
		}
		if fa.replyTo != 0 {
			p.ReplyTo = &PostRef{ID: strconv.FormatInt(fa.replyTo, 10), AuthorID: strconv.FormatInt(fa.replyToAuthor, 10)}
			b = appendRef(append(b, `,"replyTo":`...), p.ReplyTo)
		}
	}
	js := string(b)
	p.ID, p.AuthorID, p.CreatedAt = js[idAt:idEnd], js[auAt:auEnd], at
	p.Author.ID = p.AuthorID
	if !fa.repost {
		p.Content = fa.content
		// Escaping only lengthens: the same length means the same bytes.
		if cEnd-cAt == len(fa.content)+2 { // the JSON holds the content as is
			p.Content = js[cAt+1 : cEnd-1]
		}
	}
	if tEnd-tAt == len(at)+2 {
		p.CreatedAt = js[tAt+1 : tEnd-1]
	}
	p.enc = &postJSON{of: [6]string{p.ID, p.AuthorID, p.Author.ID, p.Content, p.CreatedAt, p.EditedAt},
		media: len(p.Media), replyTo: p.ReplyTo, json: js, nameAt: nameAt}
	return p
}

// AppendJSON appends the item as encoding/json writes it: the static part
// encoded when the query side made the item (a copy, no escaping per
// read) and the dynamic part, or, for a Post made or changed elsewhere,
// all of it encoded now.
func (p *Post) AppendJSON(dst []byte) []byte {
	e := p.enc
	if e == nil || e.of != [6]string{p.ID, p.AuthorID, p.Author.ID, p.Content, p.CreatedAt, p.EditedAt} ||
		e.media != len(p.Media) || e.replyTo != p.ReplyTo {
		// (string comparisons of the same memory stop at the pointers)
		return p.appendJSON(dst)
	}
	dst = append(dst, e.json[:e.nameAt]...)
	dst = events.AppendJSONString(dst, p.Author.Name)
	dst = append(dst, e.json[e.nameAt:]...)
	return p.appendDynamic(dst)
}

// appendJSON encodes every field of the item.
func (p *Post) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = events.AppendJSONString(dst, p.ID)
	dst = append(dst, `,"authorId":`...)
	dst = events.AppendJSONString(dst, p.AuthorID)
	dst = append(dst, `,"author":{"id":`...)
	dst = events.AppendJSONString(dst, p.Author.ID)
	dst = append(dst, `,"name":`...)
	dst = events.AppendJSONString(dst, p.Author.Name)
	dst = append(dst, '}')
	if p.Content != "" {
		dst = append(dst, `,"content":`...)
		dst = events.AppendJSONString(dst, p.Content)
	}
	dst = append(dst, `,"createdAt":`...)
	dst = events.AppendJSONString(dst, p.CreatedAt)
	if p.EditedAt != "" {
		dst = append(dst, `,"editedAt":`...)
		dst = events.AppendJSONString(dst, p.EditedAt)
	}
	if len(p.Media) > 0 {
		dst = appendMedia(append(dst, `,"media":`...), p.Media)
	}
	if p.ReplyTo != nil {
		dst = appendRef(append(dst, `,"replyTo":`...), p.ReplyTo)
	}
	return p.appendDynamic(dst)
}

// appendDynamic appends the fields a page sets (quote, counts, viewer
// state, a repost's original) and closes the object.
func (p *Post) appendDynamic(dst []byte) []byte {
	if p.Quote != nil {
		dst = p.Quote.appendJSON(append(dst, `,"quote":`...))
	}
	if c := p.Counts; c != nil {
		dst = append(dst, `,"counts":{"likes":`...)
		dst = strconv.AppendInt(dst, c.Likes, 10)
		dst = append(dst, `,"reposts":`...)
		dst = strconv.AppendInt(dst, c.Reposts, 10)
		dst = append(dst, `,"replies":`...)
		dst = strconv.AppendInt(dst, c.Replies, 10)
		dst = append(dst, '}')
	}
	if v := p.Viewer; v != nil {
		dst = append(dst, `,"viewer":{"liked":`...)
		dst = strconv.AppendBool(dst, v.Liked)
		dst = append(dst, `,"reposted":`...)
		dst = strconv.AppendBool(dst, v.Reposted)
		dst = append(dst, '}')
	}
	if p.RepostOf != nil {
		dst = p.RepostOf.AppendJSON(append(dst, `,"repostOf":`...))
	}
	return append(dst, '}')
}

func appendRef(dst []byte, r *PostRef) []byte {
	dst = append(dst, `{"id":`...)
	dst = events.AppendJSONString(dst, r.ID)
	dst = append(dst, `,"authorId":`...)
	dst = events.AppendJSONString(dst, r.AuthorID)
	return append(dst, '}')
}

func appendMedia(dst []byte, media []events.Media) []byte {
	dst = append(dst, '[')
	for i, m := range media {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"url":`...)
		dst = events.AppendJSONString(dst, m.URL)
		dst = append(dst, `,"mimeType":`...)
		dst = events.AppendJSONString(dst, m.MIMEType)
		dst = append(dst, `,"alt":`...)
		dst = events.AppendJSONString(dst, m.Alt)
		dst = append(dst, `,"width":`...)
		dst = strconv.AppendInt(dst, int64(m.Width), 10)
		dst = append(dst, `,"height":`...)
		dst = strconv.AppendInt(dst, int64(m.Height), 10)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}
