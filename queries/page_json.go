package queries

import "github.com/feedco/feed/events"

// AppendJSON appends the page as JSON, byte for byte what encoding/json
// writes for it (HTML-safe escaping, invalid UTF-8 as U+FFFD, a nil Items
// as null), without reflection or per-field allocations: the read path
// encodes one page per request.
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
	return append(dst, '}')
}

// AppendJSON appends the post as encoding/json writes it.
func (p *Post) AppendJSON(dst []byte) []byte {
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
