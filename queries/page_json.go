package queries

import (
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
