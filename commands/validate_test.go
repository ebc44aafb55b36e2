package commands

import (
	"strings"
	"testing"
)

func TestValidateText(t *testing.T) {
	for _, c := range []struct {
		name, text string
		reason     string // "" valid, else a part of the reason
	}{
		{"plain", "hello", ""},
		{"newlines and tabs", "line one\n\tline two", ""},
		{"emoji with joiners", "👩\u200d💻 at work", ""},
		{"flag and variation selector", "❤\ufe0f 🇵🇹", ""},
		{"right-to-left with marks", "\u200fשלום\u200e ok", ""},
		{"combining mark on a letter", "e\u0301", ""},
		{"empty", "", "empty"},
		{"spaces", " \n\t ", "empty"},
		{"zero-width only", "\u200b\u200c\u200d", "visible"},
		{"BOM only", "\ufeff", "visible"},
		{"word joiner and BOM", "\u2060\ufeff \u200b", "visible"},
		{"Hangul filler", "\u3164\u3164", "visible"},
		{"Braille blank", "\u2800", "visible"},
		{"variation selector only", "\ufe0f", "visible"},
		{"NUL", "a\x00b", "NUL"},
		{"carriage return", "a\r\nb", "control"},
		{"escape sequence", "\x1b[31mred", "control"},
		{"C1 control", "a\u0085b", "control"},
		{"DEL", "a\x7fb", "control"},
		{"right-to-left override", "invoice\u202egnp.exe", "bidirectional"},
		{"left-to-right embedding", "\u202aabc\u202c", "bidirectional"},
		{"isolate", "a\u2067b\u2069", "bidirectional"},
		{"invalid UTF-8", "a\xffb", "UTF-8"},
		{"too long", strings.Repeat("é", 11), "more than the maximum"},
	} {
		max := 30
		if c.name == "too long" {
			max = 10
		}
		err := validateText("content", c.text, max)
		switch {
		case c.reason == "" && err != nil:
			t.Errorf("%s: %v, want valid", c.name, err)
		case c.reason != "" && (err == nil || !strings.Contains(err.Error(), c.reason)):
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.reason)
		}
	}
}
