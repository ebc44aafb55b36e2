package api

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body    string
		ok      bool
		content string
	}{
		{`{"content":"hi"}`, true, "hi"},
		{` {"content":"a\"b\\c"} `, true, `a"b\c`},
		{`{"content":"\ud83d\udc4b"}`, true, "👋"},
		{`{"content":"\u00e9"}`, true, "é"},
		{`{"content":"\\ud800"}`, true, `\ud800`}, // an escaped backslash, not an escape
		{`{"content":"\ud800"}`, false, ""},
		{`{"content":"\udc00"}`, false, ""},
		{`{"content":"\ud800\u0041"}`, false, ""},
		{`{"content":"\ud800x"}`, false, ""},
		{"{\"content\":\"\xff\"}", false, ""},
		{`{"content":"x"}x`, false, ""},
		{`{"content":"x","y":1}`, false, ""},
		{`{"content":1}`, false, ""},
		{`[]`, false, ""},
		{`null`, true, ""}, // decodes to the zero request; the command rejects the empty content
		{``, false, ""},
		{`   `, false, ""},
		{`{`, false, ""},
	}
	for _, tc := range cases {
		var req createPostRequest
		err := decodeJSON([]byte(tc.body), &req)
		if (err == nil) != tc.ok {
			t.Errorf("decodeJSON(%q) = %v, want ok=%v", tc.body, err, tc.ok)
			continue
		}
		if tc.ok && req.Content != tc.content {
			t.Errorf("decodeJSON(%q) content %q, want %q", tc.body, req.Content, tc.content)
		}
	}
}

func TestParseID(t *testing.T) {
	t.Parallel()
	cases := map[string]int64{
		"1": 1, "42": 42, "9223372036854775807": 1<<63 - 1, "007": 7,
		"": 0, "0": 0, "-1": 0, "+1": 0, "1.0": 0, "abc": 0, " 1": 0, "1e3": 0, "9223372036854775808": 0, "0x10": 0,
	}
	for in, want := range cases {
		got, err := parseID("id", in)
		if (err == nil) != (want > 0) || got != want {
			t.Errorf("parseID(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestParseLimit(t *testing.T) {
	t.Parallel()
	cases := map[string]int{"": DefaultLimit, "1": 1, "50": 50, "20": 20, "0": 0, "51": 0, "-1": 0, "+5": 0, "abc": 0, "1000": 0, "5 ": 0}
	for in, want := range cases {
		got, err := parseLimit(in)
		if (err == nil) != (want > 0) || got != want {
			t.Errorf("parseLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// FuzzDecodeRequest feeds arbitrary bodies, ids and limits to the request
// decoders: they must never panic, and what they accept must be well formed.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"content":"hi"}`), "1", "20")
	f.Add([]byte(`{"content":"\ud83d\udc4b"}`), "9223372036854775807", "")
	f.Add([]byte(`{"content":"\ud800"}`), "-1", "51")
	f.Add([]byte("{\"content\":\"\xff\"}"), "abc", "0")
	f.Add([]byte(`{"name":"ana"}`), "+1", "+5")
	f.Add([]byte(`{"content":"\\u"}`), "0", "1e1")
	f.Add([]byte(`{"content":"re","replyTo":"12","quoteOf":null,"media":[{"url":"https://cdn.example/a.png","mimeType":"image/png","alt":"\u00e9","width":1,"height":2}]}`), "12", "")
	f.Add([]byte(`{"content":"re","replyTo":"-1","media":[{"width":1e9}]}`), "1", "")
	f.Fuzz(func(t *testing.T, body []byte, id, limit string) {
		var post createPostRequest
		if err := decodeJSON(body, &post); err == nil {
			if cmd, err := toCreatePost(7, post); err == nil && (cmd.ReplyTo < 0 || cmd.QuoteOf < 0 || (post.ReplyTo != nil && cmd.ReplyTo == 0) || len(cmd.Media) != len(post.Media)) {
				t.Fatalf("toCreatePost(%q) = %+v", body, cmd)
			}
			for _, m := range post.Media {
				if !utf8.ValidString(m.URL) || !utf8.ValidString(m.Alt) || !utf8.ValidString(m.MIMEType) {
					t.Fatalf("accepted invalid UTF-8 media %+v from %q", m, body)
				}
			}
			if !utf8.ValidString(post.Content) {
				t.Fatalf("accepted invalid UTF-8 content %q from %q", post.Content, body)
			}
			if strings.ContainsRune(post.Content, utf8.RuneError) && !strings.Contains(string(body), "\uFFFD") && !strings.Contains(strings.ToLower(string(body)), `\ufffd`) {
				t.Fatalf("accepted %q, which decoded to a replacement character", body)
			}
		}
		var user registerUserRequest
		_ = decodeJSON(body, &user)
		if n, err := parseID("id", id); err == nil && n <= 0 {
			t.Fatalf("parseID(%q) accepted %d", id, n)
		}
		if n, err := parseLimit(limit); err == nil && (n < 1 || n > MaxLimit) {
			t.Fatalf("parseLimit(%q) accepted %d", limit, n)
		}
	})
}
