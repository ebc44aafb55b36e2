package events

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrUnknownType is returned for an event type no decoder or upcaster knows.
var ErrUnknownType = errors.New("unknown event type")

// Upcaster turns the payload of an old event version into the payload of a
// newer one. Chains are followed until a current type is reached.
type Upcaster func(payload json.RawMessage) (newType string, newPayload json.RawMessage, err error)

// Codec decodes stored events into current-version payloads. The zero value
// is not usable; use NewCodec.
type Codec struct {
	upcasters map[string]Upcaster
}

// NewCodec returns a codec that knows every current type and the given
// upcasters, keyed by the old type they read.
func NewCodec(upcasters map[string]Upcaster) *Codec {
	c := &Codec{upcasters: map[string]Upcaster{}}
	for t, u := range upcasters {
		c.upcasters[t] = u
	}
	return c
}

// DefaultCodec knows the current types and upcasts the old versions
// (post.created.v1 to post.created.v2).
var DefaultCodec = NewCodec(map[string]Upcaster{TypePostCreatedV1: upcastPostCreatedV1})

// upcastPostCreatedV1 reads a post.created.v1 as post.created.v2: the v2
// payload is v1's plus optional fields (reply, quote, media) that a v1
// post does not have, so the payload is the same.
func upcastPostCreatedV1(payload json.RawMessage) (string, json.RawMessage, error) {
	return TypePostCreated, payload, nil
}

// Encode returns the JSON payload of an event.
func Encode(e Event) (json.RawMessage, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.EventType(), err)
	}
	return b, nil
}

// Decode returns the current-version event for a stored type and payload,
// upcasting old versions first.
func (c *Codec) Decode(typ string, payload json.RawMessage) (Event, error) {
	for hops := 0; ; hops++ {
		if hops > 16 {
			return nil, fmt.Errorf("decode %s: upcaster chain too long", typ)
		}
		u, ok := c.upcasters[typ]
		if !ok {
			break
		}
		nt, np, err := u(payload)
		if err != nil {
			return nil, fmt.Errorf("upcast %s: %w", typ, err)
		}
		typ, payload = nt, np
	}
	var e Event
	switch typ {
	case TypeUserRegistered:
		e = &UserRegistered{}
	case TypePostCreated:
		e = &PostCreated{}
	case TypePostDeleted:
		e = &PostDeleted{}
	case TypePostEdited:
		e = &PostEdited{}
	case TypeFollowed:
		e = &Followed{}
	case TypeUnfollowed:
		e = &Unfollowed{}
	case TypeMuted:
		e = &Muted{}
	case TypeUnmuted:
		e = &Unmuted{}
	case TypeBlocked:
		e = &Blocked{}
	case TypeUnblocked:
		e = &Unblocked{}
	case TypePostReposted:
		e = &PostReposted{}
	case TypePostUnreposted:
		e = &PostUnreposted{}
	case TypePostLiked:
		e = &PostLiked{}
	case TypePostUnliked:
		e = &PostUnliked{}
	default:
		return nil, fmt.Errorf("decode %q: %w", typ, ErrUnknownType)
	}
	if err := json.Unmarshal(payload, e); err != nil {
		return nil, fmt.Errorf("decode %s: %w", typ, err)
	}
	return deref(e), nil
}

// DecodeEnvelope decodes an envelope's payload.
func (c *Codec) DecodeEnvelope(env Envelope) (Event, error) {
	return c.Decode(env.Type, env.Payload)
}

func deref(e Event) Event {
	switch v := e.(type) {
	case *UserRegistered:
		return *v
	case *PostCreated:
		return *v
	case *PostDeleted:
		return *v
	case *PostEdited:
		return *v
	case *Followed:
		return *v
	case *Unfollowed:
		return *v
	case *Muted:
		return *v
	case *Unmuted:
		return *v
	case *Blocked:
		return *v
	case *Unblocked:
		return *v
	case *PostReposted:
		return *v
	case *PostUnreposted:
		return *v
	case *PostLiked:
		return *v
	case *PostUnliked:
		return *v
	}
	return e
}
