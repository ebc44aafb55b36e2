package main

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// redacted replaces a secret in what redactDSN returns.
const redacted = "xxxxx"

// secretKeys are the connection-string settings whose values are secrets,
// as URL query parameters and as PostgreSQL keyword settings.
var secretKeys = map[string]bool{"password": true, "sslpassword": true}

// redactDSN returns a connection string fit for a log line or an error:
// the password of a URL (postgres://, redis://, rediss://, ...) and its
// password query parameters, or the password settings of a PostgreSQL
// keyword string (password=..., quoted or not), are replaced by xxxxx.
// What it cannot parse it hides entirely rather than risk a secret.
func redactDSN(dsn string) string {
	if urlScheme.MatchString(dsn) {
		return redactURL(dsn)
	}
	return redactKeywords(dsn)
}

// urlScheme matches the start of a URL (RFC 3986's scheme, then "://").
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// Without a parse the userinfo's end is a guess: hide everything
		// between the scheme and the host.
		scheme, rest, _ := strings.Cut(s, "://")
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			rest = redacted + rest[i:]
		}
		if i := strings.IndexAny(rest, "?#"); i >= 0 {
			rest = rest[:i] + "?" + redacted
		}
		return scheme + "://" + rest
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if secretKeys[strings.ToLower(k)] {
				q.Set(k, redacted)
			}
		}
		u.RawQuery = q.Encode()
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = redacted, ""
	}
	return u.Redacted()
}

// redactKeywords redacts a keyword/value connection string (libpq's
// "host=h user=u password='a b'"): settings are separated by whitespace,
// a value is single-quoted (with backslash escapes) or runs to the next
// whitespace. A string that does not parse is replaced by a placeholder.
func redactKeywords(s string) string {
	var b strings.Builder
	i := 0
	skipSpace := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		start := i
		skipSpace()
		b.WriteString(s[start:i])
		if i >= len(s) {
			return b.String()
		}
		keyStart := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[keyStart:i]
		skipSpace()
		if i >= len(s) || s[i] != '=' || key == "" {
			return "(unparseable connection string, redacted)"
		}
		i++
		skipSpace()
		b.WriteString(s[keyStart:i])
		valStart := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return "(unparseable connection string, redacted)"
			}
			i++ // the closing quote
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		if secretKeys[strings.ToLower(key)] {
			b.WriteString(redacted)
		} else {
			b.WriteString(s[valStart:i])
		}
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// dsnReason describes why dsn could not be used without printing it: the
// reason of err, with every copy of dsn in it (plain or quoted, as net/url
// and pgconn quote it) replaced by its redacted form.
func dsnReason(dsn string, err error) string {
	msg := err.Error()
	var pce *pgconn.ParseConfigError
	if errors.As(err, &pce) {
		// "cannot parse `DSN`: reason": pgconn's own redaction of DSN is
		// best effort, so drop it and keep the reason.
		if _, reason, ok := strings.Cut(msg, "`: "); ok {
			msg = reason
		} else {
			return "cannot parse it"
		}
	}
	if dsn == "" {
		return msg
	}
	r := redactDSN(dsn)
	msg = strings.ReplaceAll(msg, strconv.Quote(dsn), strconv.Quote(r))
	return strings.ReplaceAll(msg, dsn, r)
}

// scrubDSN returns err, or when its message contains dsn (as some
// drivers' messages do), an error that says the same with dsn redacted
// and still unwraps to err.
func scrubDSN(dsn string, err error) error {
	if err == nil || dsn == "" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, dsn) && !strings.Contains(msg, strconv.Quote(dsn)) {
		return err
	}
	return scrubbedError{msg: dsnReason(dsn, err), err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e scrubbedError) Error() string { return e.msg }
func (e scrubbedError) Unwrap() error { return e.err }
