package commands

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/feedco/feed/events"
)

// Media bounds (docs/api.md, Create a post).
const (
	// MaxMedia is the most attachments a post may have.
	MaxMedia = 4
	// MaxMediaAltChars bounds an attachment's alternative text, in runes.
	MaxMediaAltChars = 1500
	// MaxMediaURLBytes bounds an attachment's URL, in bytes.
	MaxMediaURLBytes = 2048
	// MaxMediaPixels bounds an attachment's width and height.
	MaxMediaPixels = 100_000
)

// MediaTypes are the MIME types a post's attachment may have, spelled as
// they must be sent (lower case, no parameters).
var MediaTypes = []string{
	"image/jpeg", "image/png", "image/gif", "image/webp", "image/avif",
	"video/mp4", "video/webm",
}

// validateMedia checks a post's attachments: at most MaxMedia, each an
// absolute https URL with a host and no user information, a MIME type of
// MediaTypes, an alternative text of at most MaxMediaAltChars (empty is
// allowed), and a width and height from 1 to MaxMediaPixels.
func validateMedia(media []events.Media) error {
	if len(media) > MaxMedia {
		return invalid("media", "has %d items, more than the maximum of %d", len(media), MaxMedia)
	}
	for i, m := range media {
		field := "media[" + strconv.Itoa(i) + "]"
		if len(m.URL) > MaxMediaURLBytes {
			return invalid(field+".url", "is longer than %d bytes", MaxMediaURLBytes)
		}
		u, err := url.Parse(m.URL)
		if err != nil || !utf8.ValidString(m.URL) || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Opaque != "" {
			return invalid(field+".url", "must be an absolute https URL with a host")
		}
		if !slices.Contains(MediaTypes, m.MIMEType) {
			return invalid(field+".mimeType", "must be one of %s", strings.Join(MediaTypes, ", "))
		}
		switch {
		case !utf8.ValidString(m.Alt):
			return invalid(field+".alt", "must be valid UTF-8")
		case strings.IndexByte(m.Alt, 0) >= 0:
			return invalid(field+".alt", "must not contain NUL characters")
		}
		if n := utf8.RuneCountInString(m.Alt); n > MaxMediaAltChars {
			return invalid(field+".alt", "has %d characters, more than the maximum of %d", n, MaxMediaAltChars)
		}
		if m.Width < 1 || m.Width > MaxMediaPixels || m.Height < 1 || m.Height > MaxMediaPixels {
			return invalid(field, "width and height must be from 1 to %d pixels", MaxMediaPixels)
		}
	}
	return nil
}
