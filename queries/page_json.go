package queries

import (
	"strconv"

	"github.com/feedco/feed/events"
)

// AppendJSON appends the page as JSON, byte for byte what encoding/json
// writes for it (HTML-safe escaping, invalid UTF-8 as U+FFFD, a nil Items
// as null), without reflection or per-field allocations: the read path
// encodes one page per request. json.Marshal(p) is the plain way: a page
// of posts encoded once (encodePost) copies in a tenth of its CPU and
// without its allocations (BenchmarkPageAppendJSON in page_json_test.go);
// FuzzPageAppendJSONMatchesEncodingJSON and
// FuzzEncodedPostMatchesEncodingJSON hold the two equal.
func (p Page) AppendJSON(dst []byte) []byte {
	if p.Items == nil {
		dst = append(dst, `{"items":null`...)
	} else {
		dst = append(dst, `{"items":[`...)
		for i := range p.Items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = p.Items[i].AppendJSON(dst)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"nextCursor":`...)
	if p.NextCursor == nil {
		dst = append(dst, "null"...)
	} else {
		dst = events.AppendJSONString(dst, *p.NextCursor)
	}
	dst = append(dst, `,"prevCursor":`...)
	if p.PrevCursor == nil {
		dst = append(dst, "null"...)
	} else {
		dst = events.AppendJSONString(dst, *p.PrevCursor)
	}
	return append(dst, '}')
}

// AppendJSON appends the post as encoding/json writes it: the JSON
// encoded when the query side made the post (a copy, no escaping per
// read), or, for a Post made or changed elsewhere, encoded now.
func (p *Post) AppendJSON(dst []byte) []byte {
	if e := p.enc; e != nil && e.of == [4]string{p.ID, p.AuthorID, p.Content, p.CreatedAt} {
		// (string comparisons of the same memory stop at the pointers)
		return append(dst, e.json...)
	}
	return p.appendJSON(dst)
}

// postJSON is a post's JSON and the fields it was encoded from.
type postJSON struct {
	of   [4]string // ID, AuthorID, Content, CreatedAt
	json string
}

// encodePost makes the Post of a feed item with its JSON encoded once: a
// cached post is shown by many pages, each of which then copies bytes
// instead of escaping its content again. The fields are slices of the
// JSON wherever it holds them verbatim (always the ids and the time; the
// content unless it needed escaping), so the encoding costs little memory
// beyond the fields themselves.
func encodePost(id, author int64, content string, ms int64) Post {
	b := make([]byte, 0, len(content)+len(`{"id":"","authorId":"","content":"","createdAt":""}`)+19+19+24+8)
	b = append(b, `{"id":"`...)
	idAt := len(b)
	b = strconv.AppendInt(b, id, 10)
	idEnd := len(b)
	b = append(b, `","authorId":"`...)
	auAt := len(b)
	b = strconv.AppendInt(b, author, 10)
	auEnd := len(b)
	b = append(b, `","content":`...)
	cAt := len(b)
	b = events.AppendJSONString(b, content)
	cEnd := len(b)
	b = append(b, `,"createdAt":`...)
	at := formatTime(ms)
	tAt := len(b)
	b = events.AppendJSONString(b, at)
	tEnd := len(b)
	b = append(b, '}')
	js := string(b)
	p := Post{ID: js[idAt:idEnd], AuthorID: js[auAt:auEnd], Content: content, CreatedAt: at}
	// Escaping only lengthens: the same length means the same bytes.
	if cEnd-cAt == len(content)+2 { // the JSON holds the content as is
		p.Content = js[cAt+1 : cEnd-1]
	}
	if tEnd-tAt == len(at)+2 {
		p.CreatedAt = js[tAt+1 : tEnd-1]
	}
	p.enc = &postJSON{of: [4]string{p.ID, p.AuthorID, p.Content, p.CreatedAt}, json: js}
	return p
}

// appendJSON encodes the post's fields.
func (p *Post) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = events.AppendJSONString(dst, p.ID)
	dst = append(dst, `,"authorId":`...)
	dst = events.AppendJSONString(dst, p.AuthorID)
	dst = append(dst, `,"content":`...)
	dst = events.AppendJSONString(dst, p.Content)
	dst = append(dst, `,"createdAt":`...)
	dst = events.AppendJSONString(dst, p.CreatedAt)
	return append(dst, '}')
}
