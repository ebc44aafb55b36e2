package queries

import (
	"bytes"
	"encoding/json"
	"testing"
)

func FuzzPageAppendJSONMatchesEncodingJSON(f *testing.F) {
	f.Add("915184806927532032", "1", "hello from ana", "2026-11-30T10:17:41.283Z", "AQAAAZ", true, 2)
	f.Add("1", "2", "<b>&amp;</b> \u2028 \x00 \"q\" \\ \xff\xfe é 😀", "x", "", false, 1)
	f.Add("", "", "", "", "\n\t", true, 0)
	f.Fuzz(func(t *testing.T, id, author, content, at, cursor string, hasCursor bool, n int) {
		p := Page{}
		if n >= 0 {
			p.Items = []Post{}
			for range n % 4 {
				p.Items = append(p.Items, Post{ID: id, AuthorID: author, Content: content, CreatedAt: at})
			}
		}
		if hasCursor {
			p.NextCursor = &cursor
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON\n%s\nencoding/json\n%s", got, want)
		}
	})
}
