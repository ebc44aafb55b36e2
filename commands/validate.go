package commands

import (
	"strings"
	"unicode/utf8"
)

// validateText checks user-supplied text: valid UTF-8, no NUL (PostgreSQL
// text cannot hold it), not blank, at most max runes.
func validateText(field, s string, max int) error {
	switch {
	case !utf8.ValidString(s):
		return invalid(field, "must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(field, "must not contain NUL characters")
	case strings.TrimSpace(s) == "":
		return invalid(field, "must not be empty")
	}
	if n := utf8.RuneCountInString(s); n > max {
		return invalid(field, "has %d characters, more than the maximum of %d", n, max)
	}
	return nil
}

func validateID(field string, id int64) error {
	if id <= 0 {
		return invalid(field, "must be a positive id")
	}
	return nil
}
