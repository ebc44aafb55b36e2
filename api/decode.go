package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// Page sizes of GET /api/feed and GET /api/users/{id}/posts.
const (
	DefaultLimit = 20
	MaxLimit     = 50
)

type registerUserRequest struct {
	Name string `json:"name"`
}

// createPostRequest is POST /api/posts's body: replyTo and quoteOf are
// post ids as JSON strings (null or absent: none).
type createPostRequest struct {
	Content string         `json:"content"`
	ReplyTo *string        `json:"replyTo"`
	QuoteOf *string        `json:"quoteOf"`
	Media   []mediaRequest `json:"media"`
}

type mediaRequest struct {
	URL      string `json:"url"`
	MIMEType string `json:"mimeType"`
	Alt      string `json:"alt"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
}

// editPostRequest is PATCH /api/posts/{id}'s body: an edit replaces the
// content only.
type editPostRequest struct {
	Content string `json:"content"`
}

// readBody reads the whole (size-limited) request body; an oversized body
// surfaces as *http.MaxBytesError, answered 413.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	if bb, ok := r.Body.(bufferedBody); ok {
		return bb.b, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, &badInput{"could not read the request body"}
	}
	return b, nil
}

// decodeBody reads the request body and decodes it as decodeJSON does.
func decodeBody(r *http.Request, dst any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeJSON(body, dst)
}

// decodeJSON decodes exactly one JSON object into dst: valid UTF-8, no
// unknown fields, no trailing data, no unpaired surrogate escapes (which
// encoding/json would silently turn into U+FFFD).
func decodeJSON(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return &badInput{"the request body is empty; a JSON object is required"}
	}
	if !utf8.Valid(body) {
		return &badInput{"the request body is not valid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return &badInput{"the request body is not a valid JSON object of the expected shape: " + jsonErrDetail(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &badInput{"the request body has data after the JSON object"}
	}
	if err := checkSurrogates(body); err != nil {
		return err
	}
	return nil
}

func jsonErrDetail(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be a %s", te.Field, te.Type)
	}
	return err.Error() // e.g. `json: unknown field "x"`, unexpected EOF
}

// checkSurrogates rejects \u escapes that do not form valid UTF-16: a high
// surrogate not followed by a low one, or a lone low surrogate. body is
// valid JSON, so every backslash is inside a string.
func checkSurrogates(body []byte) error {
	bad := &badInput{"the request body has an invalid \\u escape (unpaired UTF-16 surrogate)"}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if i+1 < len(body) && body[i+1] != 'u' {
			i++ // a two-character escape such as \\ or \"
			continue
		}
		r, ok := hex4(body, i+2)
		if !ok {
			return bad
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return bad
		case r >= 0xD800 && r <= 0xDBFF:
			if i+7 >= len(body) || body[i+6] != '\\' || body[i+7] != 'u' {
				return bad
			}
			lo, ok := hex4(body, i+8)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return bad
			}
			i += 11
		default:
			i += 5
		}
	}
	return nil
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return rune(n), err == nil
}

// parseID parses a path id: decimal digits only, positive, within int64.
func parseID(field, s string) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, &badInput{fmt.Sprintf("%s must be a positive decimal id", field)}
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, &badInput{fmt.Sprintf("%s must be a positive decimal id", field)}
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, &badInput{fmt.Sprintf("%s must be a positive decimal id", field)}
	}
	return n, nil
}

// parseLimit parses the limit query parameter: absent means DefaultLimit,
// otherwise 1..MaxLimit.
func parseLimit(s string) (int, error) {
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit || len(s) > 3 || s[0] < '0' || s[0] > '9' {
		return 0, &badInput{fmt.Sprintf("limit must be an integer from 1 to %d", MaxLimit)}
	}
	return n, nil
}
