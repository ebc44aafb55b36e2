package commands

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// validateText checks user-supplied text (a post's content, a user's
// name): valid UTF-8; no control character but newline and tab (no NUL,
// which PostgreSQL text cannot hold, no carriage return, no escape
// sequences); no bidirectional embedding, override or isolate control
// (U+202A..U+202E, U+2066..U+2069: they reorder the text around them, so
// that what a reader sees is not what was written); at least one visible
// character (text of only spaces, zero-width characters, a byte order
// mark or blank-looking letters such as U+3164 would show as nothing);
// at most max runes. The left-to-right and right-to-left marks (U+200E,
// U+200F) and the other format characters (zero-width joiners in emoji
// sequences) are allowed beside visible text.
func validateText(field, s string, max int) error {
	if !utf8.ValidString(s) {
		return invalid(field, "must be valid UTF-8")
	}
	visible := false
	n := 0
	for _, r := range s {
		n++
		switch {
		case r == '\n' || r == '\t':
		case unicode.IsControl(r):
			if r == 0 {
				return invalid(field, "must not contain NUL characters")
			}
			return invalid(field, "must not contain control characters other than newline and tab (found %s)", codePoint(r))
		case bidiControl(r):
			return invalid(field, "must not contain bidirectional embedding, override or isolate characters (found %s)", codePoint(r))
		case !visible && isVisible(r):
			visible = true
		}
	}
	if !visible {
		if strings.TrimSpace(s) == "" {
			return invalid(field, "must not be empty")
		}
		return invalid(field, "must contain a visible character")
	}
	if n > max {
		return invalid(field, "has %d characters, more than the maximum of %d", n, max)
	}
	return nil
}

// bidiControl reports the explicit directional embeddings, overrides and
// isolates (Unicode's Bidi_Control but the marks ALM, LRM and RLM).
func bidiControl(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

// isVisible reports a rune that shows as something: graphic, not a space,
// not a format character (zero-width space and joiners, the byte order
// mark, directional marks), not a variation selector, and none of the
// letters that render blank.
func isVisible(r rune) bool {
	switch r {
	case 0x115F, 0x1160, 0x3164, 0xFFA0, // Hangul fillers
		0x2800, // Braille pattern blank
		0x034F: // combining grapheme joiner
		return false
	}
	return unicode.IsGraphic(r) && !unicode.IsSpace(r) && !unicode.Is(unicode.Cf, r) &&
		!unicode.Is(unicode.Variation_Selector, r)
}

func codePoint(r rune) string { return fmt.Sprintf("U+%04X", r) }

func validateID(field string, id int64) error {
	if id <= 0 {
		return invalid(field, "must be a positive id")
	}
	return nil
}
