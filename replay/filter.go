package replay

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/feedco/feed/events"
)

// Filter selects events. Zero fields select everything; the fields that are
// set must all match. Ranges are inclusive at both ends.
type Filter struct {
	// From and To bound the range; each is a position, a commit LSN or a
	// recorded_at timestamp, independently of the other.
	From, To Bound
	// Types are event type names as stored (e.g. post.created.v2; an old
	// version, post.created.v1, is matched by its own name); any of them
	// matches.
	Types []string
	// Stream is one stream id (e.g. post-123).
	Stream string
	// Author is an account id: events whose audience key is that account
	// (its registration, its posts and deletions, follows and unfollows of
	// it), i.e. what the Kafka partition key carries. 0: any.
	Author int64
}

// Validate reports a filter that cannot be meant: an unknown event type, a
// negative author, or a range whose start is after its end.
func (f Filter) Validate() error {
	for _, t := range f.Types {
		if t == "" {
			return invalidf("--type: empty event type")
		}
		if _, err := events.DefaultCodec.Decode(t, json.RawMessage("{}")); errors.Is(err, events.ErrUnknownType) {
			return invalidf("--type %q: unknown event type (known: %s)", t, strings.Join(knownTypes, ", "))
		}
	}
	if f.Author < 0 {
		return invalidf("--author %d: want a positive account id", f.Author)
	}
	if f.From.Kind != BoundNone && f.From.Kind == f.To.Kind {
		after := false
		switch f.From.Kind {
		case BoundPosition:
			after = f.From.Position > f.To.Position
		case BoundLSN:
			after = f.From.LSN > f.To.LSN
		case BoundTime:
			after = f.From.Time.After(f.To.Time)
		}
		if after {
			return invalidf("--from is after --to")
		}
	}
	return nil
}

var knownTypes = []string{
	events.TypeUserRegistered, events.TypePostCreatedV1, events.TypePostCreated, events.TypePostDeleted, events.TypePostEdited,
	events.TypeFollowed, events.TypeUnfollowed, events.TypeMuted, events.TypeUnmuted,
	events.TypeBlocked, events.TypeUnblocked,
	events.TypePostReposted, events.TypePostUnreposted, events.TypePostLiked, events.TypePostUnliked,
}

// Match reports whether e passes every condition of the filter. A commit
// LSN bound never matches an event without a commit LSN.
func (f Filter) Match(e *events.Envelope) bool {
	if f.Author != 0 && e.AudienceKey != f.Author {
		return false
	}
	if f.Stream != "" && e.StreamID != f.Stream {
		return false
	}
	if len(f.Types) > 0 {
		ok := false
		for _, t := range f.Types {
			if e.Type == t {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return matchBound(f.From, e, false) && matchBound(f.To, e, true)
}

func matchBound(b Bound, e *events.Envelope, upper bool) bool {
	switch b.Kind {
	case BoundPosition:
		if upper {
			return e.Position <= b.Position
		}
		return e.Position >= b.Position
	case BoundTime:
		if upper {
			return !e.RecordedAt.After(b.Time)
		}
		return !e.RecordedAt.Before(b.Time)
	case BoundLSN:
		lsn, err := ParseLSN(e.CommitLSN)
		if err != nil {
			return false
		}
		if upper {
			return lsn <= b.LSN
		}
		return lsn >= b.LSN
	}
	return true
}
